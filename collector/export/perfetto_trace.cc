#include "fragscope/export/perfetto_trace.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "fragscope/export/site_names.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/report/json_writer.h"
#include "fragscope/report/report_caveats.h"

namespace fragscope::exporter {
namespace {

int TidOf(int device) { return device < 0 ? 0 : device + 1; }

std::string DeviceName(int device) {
  return device < 0 ? std::string("GPU ?") : absl::StrFormat("GPU %d", device);
}

double Micros(int64_t time_ns) { return static_cast<double>(time_ns) / 1000.0; }

// The time of a process's first recorded moment (its own CLOCK_MONOTONIC), 0 when nothing
// carries a time. Timeline points of frames that are not events (the stream's opening, device
// info) carry 0, "not recorded", and are not a start.
uint64_t FirstTime(const ModelSummary& s, const std::vector<MarkEvent>* marks) {
  uint64_t first = UINT64_MAX;
  auto see = [&](uint64_t t) {
    if (t != 0) first = std::min(first, t);
  };
  for (const DeviceSummary& d : s.devices) {
    for (const TimelinePoint& p : d.timeline) see(p.time_ns);
  }
  for (const FailedAllocation& f : s.failed_allocations) see(f.time_ns);
  for (const OomPostMortem& o : s.ooms) see(o.failure.time_ns);
  if (marks != nullptr) {
    for (const MarkEvent& m : *marks) see(m.time_ns);
  }
  return first == UINT64_MAX ? 0 : first;
}

// The start of one trace event: its phase, name, process and thread. The caller adds the rest
// and ends the object.
void BeginEvent(JsonWriter& w, const char* phase, std::string_view name, int pid, int tid) {
  w.BeginObject();
  w.Field("ph", phase);
  w.Field("name", name);
  w.Field("pid", pid);
  w.Field("tid", tid);
}

// An instant event ("i") of scope `scope` ("t" thread, "p" process) at `ts` (microseconds),
// left open inside its args object: the caller adds the args and ends both objects.
void BeginInstantArgs(JsonWriter& w, std::string_view name, const char* scope, const char* category,
                      double ts, int pid, int tid) {
  BeginEvent(w, "i", name, pid, tid);
  w.Field("s", scope);
  w.Field("cat", category);
  w.FieldDoubleExact("ts", ts);
  w.Key("args");
  w.BeginObject();
}

// A metadata event ("M") whose args hold one string.
void MetadataEvent(JsonWriter& w, const char* name, int pid, int tid, const char* arg,
                   std::string_view value) {
  BeginEvent(w, "M", name, pid, tid);
  w.Key("args");
  w.BeginObject();
  w.Field(arg, value);
  w.EndObject();
  w.EndObject();
}

// The events of one process, as elements of the open traceEvents array: its name, a thread per
// device, the counter tracks, the failed allocations, OOMs and marks. `pid` is the id the viewer
// groups them by; an event's ts is its time minus `origin_ns` (the process's clock: its first
// moment, or the job's first moment moved onto this process's clock), a time not recorded
// (0) counting as the process's first moment. `sort_index` orders processes.
void WriteProcessEvents(const ModelSummary& s, const std::vector<MarkEvent>* marks,
                        Symbolizer& symbolizer, int pid, int64_t origin_ns,
                        std::optional<int64_t> sort_index, JsonWriter& w) {
  SiteNames sites(s, symbolizer);
  const uint64_t first = FirstTime(s, marks);
  auto Ts = [first, origin_ns](uint64_t time_ns) {
    const uint64_t t = time_ns != 0 ? time_ns : first;
    return Micros(static_cast<int64_t>(t) - origin_ns);
  };
  std::string process = s.exe.empty() ? "traced process" : s.exe;
  if (s.pid != 0) process += absl::StrFormat(" (pid %d)", s.pid);
  if (s.rank) process = absl::StrFormat("rank %d: %s", *s.rank, process);
  MetadataEvent(w, "process_name", pid, 0, "name", "fragscope: " + process);
  if (sort_index) {
    BeginEvent(w, "M", "process_sort_index", pid, 0);
    w.Key("args");
    w.BeginObject();
    w.Key("sort_index");
    w.Int(*sort_index);
    w.EndObject();
    w.EndObject();
  }

  std::set<int> devices;
  for (const DeviceSummary& d : s.devices) devices.insert(d.ordinal);
  for (const FailedAllocation& f : s.failed_allocations) devices.insert(f.device);
  for (int device : devices) {
    MetadataEvent(w, "thread_name", pid, TidOf(device), "name", DeviceName(device));
  }

  for (const DeviceSummary& d : s.devices) {
    const std::string prefix = DeviceName(d.ordinal);
    for (const TimelinePoint& p : d.timeline) {
      const double ts = Ts(p.time_ns);
      // One counter event; `value` writes its one arg.
      auto counter = [&](const char* figure, const char* key, auto value) {
        BeginEvent(w, "C", prefix + " " + figure, pid, 0);
        w.FieldDoubleExact("ts", ts);
        w.Key("args");
        w.BeginObject();
        w.Key(key);
        value();
        w.EndObject();
        w.EndObject();
      };
      counter("reserved", "bytes", [&] { w.Uint(p.reserved_bytes); });
      counter("allocated", "bytes", [&] { w.Uint(p.allocated_bytes); });
      counter("cached", "bytes", [&] { w.Uint(p.cached_bytes); });
      if (p.fragmentation) {
        counter("fragmentation", "ratio", [&] { w.DoubleExact(*p.fragmentation); });
      }
    }
  }
  for (const FailedAllocation& f : s.failed_allocations) {
    BeginInstantArgs(w, absl::StrFormat("failed %s %s", f.api_name, FormatBytes(f.requested_bytes)),
                     "t", "failed_alloc", Ts(f.time_ns), pid, TidOf(f.device));
    w.Field("seq", f.seq);
    w.Field("api", f.api_name);
    w.Field("result", f.result);
    w.Field("requested_bytes", f.requested_bytes);
    w.Field("is_oom", f.is_oom);
    w.Field("recovered", f.recovered);
    w.Field("stream", f.stream);
    w.Field("pool", f.pool);
    w.Field("site", sites.Name(f.stack_id));
    w.EndObject();
    w.EndObject();
  }

  for (const OomPostMortem& o : s.ooms) {
    const OomFigures& f = o.figures;
    BeginInstantArgs(w, o.headline, "t", "oom", Ts(o.failure.time_ns), pid,
                     TidOf(o.failure.device));
    w.Field("seq", o.failure.seq);
    w.Field("class", OomClassName(o.oom_class));
    w.Field("explanation", o.explanation);
    w.Field("requested_bytes", f.requested_bytes);
    w.FieldOrNull("device_total_bytes", f.device_total_bytes.value);
    w.FieldOrNull("device_free_bytes", f.device_free_bytes.value);
    w.Field("reserved_bytes", f.reserved_bytes);
    w.Field("allocated_bytes", f.allocated_bytes);
    w.Field("opaque_bytes", f.opaque_bytes);
    w.Field("cached_bytes", f.cached_bytes);
    w.Field("largest_free_range_bytes", f.largest_free_range_bytes);
    w.FieldStrings("advice", o.advice);
    w.Field("site", sites.Name(o.failure.stack_id));
    w.EndObject();
    w.EndObject();
  }

  // The program's own labels (fragscope_annotate_mark): on the whole process, not a device.
  if (marks != nullptr) {
    for (const MarkEvent& m : *marks) {
      BeginInstantArgs(w, m.label.empty() ? std::string_view("mark") : std::string_view(m.label),
                       "p", "mark", Ts(m.time_ns), pid, 0);
      w.Field("seq", m.seq);
      w.Field("label", m.label);
      w.EndObject();
      w.EndObject();
    }
  }
}

// The trace's start as wall-clock text for otherData ("2026-12-06 05:19:50.979 UTC"), empty
// when unknown.
std::string WallText(std::optional<uint64_t> wall_ns) {
  if (!wall_ns) return "";
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC",
                          absl::FromUnixNanos(static_cast<int64_t>(*wall_ns)), absl::UTCTimeZone());
}

}  // namespace

void WritePerfettoTrace(const ModelSummary& s, Symbolizer& symbolizer, std::ostream& out,
                        const std::vector<MarkEvent>* marks) {
  const uint64_t first = FirstTime(s, marks);
  JsonWriter w(out, /*pretty=*/false);
  w.BeginObject();
  w.Key("traceEvents");
  w.BeginArray();
  WriteProcessEvents(s, marks, symbolizer, s.pid != 0 ? static_cast<int>(s.pid) : 1,
                     static_cast<int64_t>(first), std::nullopt, w);
  w.EndArray();
  w.Field("displayTimeUnit", "ms");
  // The limits of the figures, as the reports state them (the viewer shows otherData as the
  // trace's metadata): counters between two syncs of blocks, or before a mid-run start, are not
  // measurements of those moments.
  w.Key("otherData");
  w.BeginObject();
  w.Field("producer", "fragscope");
  w.Field("time_base", "us since the trace's first event");
  w.Field("start_monotonic_ns", first);
  w.FieldOrNull("start_unix_ns", s.WallTimeNs(first));
  w.Field("start_utc", WallText(s.WallTimeNs(first)));
  w.Field("exe", s.exe);
  w.Field("host", s.host);
  w.FieldStrings("notes", ReportCaveats(s));
  w.EndObject();
  w.EndObject();
  out << "\n";
}

void WritePerfettoJobTrace(const std::vector<PerfettoProcess>& processes, std::ostream& out) {
  // One clock for all: wall-clock time when every process has it (hosts then line up, to their
  // clocks' agreement), else each process's CLOCK_MONOTONIC (which lines up within one host).
  const bool wall = !processes.empty() &&
                    std::all_of(processes.begin(), processes.end(), [](const PerfettoProcess& p) {
                      return p.summary->realtime_minus_monotonic_ns.has_value();
                    });
  // Two streams of one pid (a resumed stream, two hosts) must stay two processes in the view.
  std::vector<int> view_pids;
  std::set<int> pids;
  for (const PerfettoProcess& p : processes) {
    int pid = p.summary->pid != 0 ? static_cast<int>(p.summary->pid) : 1;
    while (!pids.insert(pid).second) pid += 1 << 22;
    view_pids.push_back(pid);
  }
  // The job's start: the earliest first moment of any process, on the common clock (wall, or
  // the shared monotonic clock of one host). Each process's times are moved onto it.
  std::optional<int64_t> job_start;
  for (const PerfettoProcess& p : processes) {
    const uint64_t first = FirstTime(*p.summary, p.marks);
    if (first == 0) continue;
    const int64_t t =
        static_cast<int64_t>(first) + (wall ? *p.summary->realtime_minus_monotonic_ns : 0);
    job_start = job_start ? std::min(*job_start, t) : t;
  }
  JsonWriter w(out, /*pretty=*/false);
  w.BeginObject();
  w.Key("traceEvents");
  w.BeginArray();
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const ModelSummary& s = *processes[i].summary;
    const int64_t shift = wall ? *s.realtime_minus_monotonic_ns : 0;
    WriteProcessEvents(s, processes[i].marks, *processes[i].symbolizer, view_pids[i],
                       job_start.value_or(0) - shift,
                       s.rank ? static_cast<int64_t>(*s.rank) : static_cast<int64_t>(i), w);
  }
  w.EndArray();
  w.Field("displayTimeUnit", "ms");
  w.Key("otherData");
  w.BeginObject();
  w.Field("producer", "fragscope");
  w.Field("time_base", wall ? "us since the job's first event, processes aligned by wall clock"
                            : "us since the job's first event, processes aligned by "
                              "CLOCK_MONOTONIC (lines up within one host)");
  if (wall && job_start) {
    w.Field("start_unix_ns", static_cast<uint64_t>(*job_start));
    w.Field("start_utc", WallText(static_cast<uint64_t>(*job_start)));
  }
  w.Key("processes");
  w.BeginArray();
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const ModelSummary& s = *processes[i].summary;
    w.BeginObject();
    w.Field("pid", static_cast<uint64_t>(s.pid));
    w.Field("view_pid", view_pids[i]);
    w.FieldOrNull("rank", s.rank ? std::optional<uint64_t>(*s.rank) : std::nullopt);
    w.Field("exe", s.exe);
    w.Field("host", s.host);
    w.FieldStrings("notes", ReportCaveats(s));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.EndObject();
  out << "\n";
}

}  // namespace fragscope::exporter
