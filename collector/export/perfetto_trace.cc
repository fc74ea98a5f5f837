#include "fragscope/export/perfetto_trace.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_format.h"
#include "fragscope/export/site_names.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/report/report_caveats.h"
#include "nlohmann/json.hpp"

namespace fragscope::exporter {
namespace {

using nlohmann::json;

int TidOf(int device) { return device < 0 ? 0 : device + 1; }

std::string DeviceName(int device) {
  return device < 0 ? std::string("GPU ?") : absl::StrFormat("GPU %d", device);
}

double Micros(uint64_t time_ns) { return static_cast<double>(time_ns) / 1000.0; }

json MeasuredBytes(const Measured<uint64_t>& m) { return m.value ? json(*m.value) : json(nullptr); }

// The events of one process into `events`: its name, a thread per device, the counter tracks,
// the failed allocations and OOMs. `pid` is the id the viewer groups them by, `shift_ns` is added
// to every time (0: the process's own CLOCK_MONOTONIC), `sort_index` orders processes.
void AppendProcessEvents(const ModelSummary& s, Symbolizer& symbolizer, int pid, int64_t shift_ns,
                         std::optional<int64_t> sort_index, json& events) {
  SiteNames sites(s, symbolizer);
  auto Ts = [shift_ns](uint64_t time_ns) {
    return Micros(time_ns + static_cast<uint64_t>(shift_ns));
  };
  std::string process = s.exe.empty() ? "traced process" : s.exe;
  if (s.pid != 0) process += absl::StrFormat(" (pid %d)", s.pid);
  if (s.rank) process = absl::StrFormat("rank %d: %s", *s.rank, process);
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", pid},
                    {"tid", 0},
                    {"args", {{"name", "fragscope: " + process}}}});
  if (sort_index) {
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"sort_index", *sort_index}}}});
  }

  std::set<int> devices;
  for (const DeviceSummary& d : s.devices) devices.insert(d.ordinal);
  for (const FailedAllocation& f : s.failed_allocations) devices.insert(f.device);
  for (int device : devices) {
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", TidOf(device)},
                      {"args", {{"name", DeviceName(device)}}}});
  }

  for (const DeviceSummary& d : s.devices) {
    const std::string prefix = DeviceName(d.ordinal);
    for (const TimelinePoint& p : d.timeline) {
      const double ts = Ts(p.time_ns);
      auto counter = [&](const char* figure, const char* key, json value) {
        events.push_back({{"ph", "C"},
                          {"name", prefix + " " + figure},
                          {"pid", pid},
                          {"tid", 0},
                          {"ts", ts},
                          {"args", {{key, std::move(value)}}}});
      };
      counter("reserved", "bytes", p.reserved_bytes);
      counter("allocated", "bytes", p.allocated_bytes);
      counter("cached", "bytes", p.cached_bytes);
      if (p.fragmentation) counter("fragmentation", "ratio", *p.fragmentation);
    }
  }
  for (const FailedAllocation& f : s.failed_allocations) {
    json args = {{"seq", f.seq},
                 {"api", f.api_name},
                 {"result", f.result},
                 {"requested_bytes", f.requested_bytes},
                 {"is_oom", f.is_oom},
                 {"recovered", f.recovered},
                 {"stream", f.stream},
                 {"pool", f.pool},
                 {"site", sites.Name(f.stack_id)}};
    events.push_back(
        {{"ph", "i"},
         {"s", "t"},
         {"cat", "failed_alloc"},
         {"name", absl::StrFormat("failed %s %s", f.api_name, FormatBytes(f.requested_bytes))},
         {"pid", pid},
         {"tid", TidOf(f.device)},
         {"ts", Ts(f.time_ns)},
         {"args", std::move(args)}});
  }

  for (const OomPostMortem& o : s.ooms) {
    const OomFigures& f = o.figures;
    json args = {{"seq", o.failure.seq},
                 {"class", OomClassName(o.oom_class)},
                 {"explanation", o.explanation},
                 {"requested_bytes", f.requested_bytes},
                 {"device_total_bytes", MeasuredBytes(f.device_total_bytes)},
                 {"device_free_bytes", MeasuredBytes(f.device_free_bytes)},
                 {"reserved_bytes", f.reserved_bytes},
                 {"allocated_bytes", f.allocated_bytes},
                 {"opaque_bytes", f.opaque_bytes},
                 {"cached_bytes", f.cached_bytes},
                 {"largest_free_range_bytes", f.largest_free_range_bytes},
                 {"advice", o.advice},
                 {"site", sites.Name(o.failure.stack_id)}};
    events.push_back({{"ph", "i"},
                      {"s", "t"},
                      {"cat", "oom"},
                      {"name", o.headline},
                      {"pid", pid},
                      {"tid", TidOf(o.failure.device)},
                      {"ts", Ts(o.failure.time_ns)},
                      {"args", std::move(args)}});
  }

}

}  // namespace

void WritePerfettoTrace(const ModelSummary& s, Symbolizer& symbolizer, std::ostream& out) {
  json events = json::array();
  AppendProcessEvents(s, symbolizer, s.pid != 0 ? static_cast<int>(s.pid) : 1, 0, std::nullopt,
                      events);
  // The limits of the figures, as the reports state them (the viewer shows otherData as the
  // trace's metadata): counters between two syncs of blocks, or before a mid-run start, are not
  // measurements of those moments.
  json doc = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"producer", "fragscope"}, {"exe", s.exe}, {"host", s.host}, {"notes", ReportCaveats(s)}}}};
  // Paths and labels from the trace may hold bytes that are not UTF-8: replace, never throw.
  out << doc.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
}

void WritePerfettoJobTrace(const std::vector<PerfettoProcess>& processes, std::ostream& out) {
  // One clock for all: wall-clock time when every process has it (hosts then line up, to their
  // clocks' agreement), else each process's CLOCK_MONOTONIC (which lines up within one host).
  const bool wall = !processes.empty() && std::all_of(processes.begin(), processes.end(),
                                                     [](const PerfettoProcess& p) {
                                                       return p.summary->realtime_minus_monotonic_ns
                                                           .has_value();
                                                     });
  json events = json::array();
  json members = json::array();
  std::set<int> pids;
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const ModelSummary& s = *processes[i].summary;
    // Two streams of one pid (a resumed stream, two hosts) must stay two processes in the view.
    int pid = s.pid != 0 ? static_cast<int>(s.pid) : 1;
    while (!pids.insert(pid).second) pid += 1 << 22;
    const int64_t shift = wall ? *s.realtime_minus_monotonic_ns : 0;
    AppendProcessEvents(s, *processes[i].symbolizer, pid, shift,
                        s.rank ? static_cast<int64_t>(*s.rank) : static_cast<int64_t>(i),
                        events);
    members.push_back({{"pid", s.pid},
                       {"view_pid", pid},
                       {"rank", s.rank ? json(*s.rank) : json(nullptr)},
                       {"exe", s.exe},
                       {"host", s.host},
                       {"notes", ReportCaveats(s)}});
  }
  json doc = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"producer", "fragscope"},
                {"time_base", wall ? "wall clock (us since the Unix epoch)"
                                   : "CLOCK_MONOTONIC of each process (aligned within one host)"},
                {"processes", std::move(members)}}}};
  out << doc.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
}

}  // namespace fragscope::exporter
