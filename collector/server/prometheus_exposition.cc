#include "fragscope/server/prometheus_exposition.h"

#include <functional>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "fragscope/report/job_summary.h"

namespace fragscope {

namespace {

std::string LabelValue(const std::string& v) {
  return absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

struct Family {
  const char* name;
  const char* type;  // gauge | counter
  const char* help;
};

// One family's samples, written together after its HELP/TYPE lines as the format requires.
class Exposition {
 public:
  void Add(const Family& f, const std::string& labels, double value) {
    auto& samples = families_[f.name];
    if (samples.empty()) meta_[f.name] = f;
    samples += absl::StrFormat("%s{%s} %.17g\n", f.name, labels, value);
  }
  std::string Text() const {
    std::string out;
    for (const auto& [name, samples] : families_) {
      const Family& f = meta_.at(name);
      out += absl::StrFormat("# HELP %s %s\n# TYPE %s %s\n%s", name, f.help, name, f.type, samples);
    }
    return out;
  }

 private:
  std::map<std::string, std::string> families_;
  std::map<std::string, Family> meta_;
};

constexpr Family kReserved{"fragscope_reserved_bytes", "gauge",
                           "Device memory this process's segments hold (bytes)."};
constexpr Family kAllocated{"fragscope_allocated_bytes", "gauge",
                            "Live blocks in exact and annotated segments (bytes)."};
constexpr Family kCached{"fragscope_cached_bytes", "gauge",
                         "Free ranges inside annotated segments (bytes)."};
constexpr Family kOpaque{"fragscope_opaque_bytes", "gauge",
                         "Segments carved by an allocator fragscope cannot see (bytes)."};
constexpr Family kLargest{"fragscope_largest_free_range_bytes", "gauge",
                          "Largest free range inside one annotated segment (bytes)."};
constexpr Family kStranded{"fragscope_stranded_bytes", "gauge",
                           "Cached bytes no single request can use (bytes)."};
constexpr Family kFragmentation{
    "fragscope_fragmentation_ratio", "gauge",
    "1 - largest_free_range/cached; absent when unknown (below the floor or opaque)."};
constexpr Family kUntracked{"fragscope_untracked_bytes", "gauge",
                            "Device memory outside this process's segments; absent if unknown."};
constexpr Family kPeakReserved{
    "fragscope_peak_reserved_bytes", "gauge",
    "Peak of reserved bytes since the stream started (the run's peak only where "
    "fragscope_history_complete is 1)."};
constexpr Family kHistoryComplete{
    "fragscope_history_complete", "gauge",
    "1 when the stream holds the run from its first event; 0 when it began with a snapshot "
    "(an attach, a wake, a late connect, a flight-recorder segment, a collector restart), so "
    "peaks and maxima are since then."};
constexpr Family kDeviceTotal{"fragscope_device_total_bytes", "gauge",
                              "Device memory capacity (bytes)."};
constexpr Family kDeviceFree{"fragscope_device_free_bytes", "gauge",
                             "Device free memory at the latest sample (bytes)."};
constexpr Family kEvents{"fragscope_events_total", "counter", "Events applied from the stream."};
constexpr Family kDrops{"fragscope_dropped_events_total", "counter",
                        "Events the agent could not ship."};
constexpr Family kFailed{"fragscope_failed_allocations_total", "counter",
                         "Failed allocations, recovered or not."};
constexpr Family kOoms{"fragscope_ooms_total", "counter", "OOM post-mortems by class."};
constexpr Family kConnected{"fragscope_stream_connected", "gauge",
                            "1 while the process's agent is connected."};
constexpr Family kBlockSyncs{
    "fragscope_block_syncs_total", "counter",
    "Reads of a sub-allocator's blocks from its own state (PyTorch snapshot diffs); 0 while its "
    "blocks are followed one by one."};
constexpr Family kBlocksFresh{
    "fragscope_blocks_fresh", "gauge",
    "1 when allocated, cached, largest free range and fragmentation hold the sub-allocator's "
    "blocks as they are now; 0 when they are those of its last sync (see block_syncs)."};

}  // namespace

std::string RenderPrometheus(const std::vector<SessionServer::StreamState>& streams) {
  Exposition e;
  for (const SessionServer::StreamState& s : streams) {
    const std::string proc = absl::StrFormat("pid=\"%d\",exe=\"%s\",host=\"%s\"", s.hello.pid(),
                                             LabelValue(s.hello.exe()), LabelValue(s.hello.host()));
    e.Add(kConnected, proc, s.connected ? 1 : 0);
    e.Add(kEvents, proc, static_cast<double>(s.summary.events));
    e.Add(kDrops, proc, static_cast<double>(s.summary.drops));
    e.Add(kFailed, proc, static_cast<double>(s.summary.failed_allocations.size()));
    e.Add(kBlockSyncs, proc, static_cast<double>(s.summary.block_syncs));
    e.Add(kBlocksFresh, proc, s.summary.blocks_known_at_end ? 1 : 0);
    e.Add(kHistoryComplete, proc, s.summary.history_from_seq ? 0 : 1);
    std::map<std::string, int> by_class;
    for (const OomPostMortem& o : s.summary.ooms) ++by_class[OomClassName(o.oom_class)];
    for (const auto& [cls, n] : by_class) e.Add(kOoms, proc + ",class=\"" + cls + "\"", n);
    for (const DeviceSummary& d : s.summary.devices) {
      const std::string labels =
          proc + absl::StrFormat(",device=\"%d\",uuid=\"%s\"", d.ordinal, GpuUuidName(d.uuid_hex));
      e.Add(kReserved, labels, static_cast<double>(d.reserved_bytes));
      e.Add(kAllocated, labels, static_cast<double>(d.allocated_bytes));
      e.Add(kCached, labels, static_cast<double>(d.cached_bytes));
      e.Add(kOpaque, labels, static_cast<double>(d.opaque_bytes));
      e.Add(kLargest, labels, static_cast<double>(d.largest_free_range_bytes));
      e.Add(kStranded, labels, static_cast<double>(d.stranded_bytes));
      e.Add(kPeakReserved, labels, static_cast<double>(d.peak_reserved_bytes));
      if (d.fragmentation.known()) e.Add(kFragmentation, labels, *d.fragmentation.value);
      if (d.untracked_bytes.known()) {
        e.Add(kUntracked, labels, static_cast<double>(*d.untracked_bytes.value));
      }
      if (d.total_bytes.known())
        e.Add(kDeviceTotal, labels, static_cast<double>(*d.total_bytes.value));
      if (d.device_free_bytes.known()) {
        e.Add(kDeviceFree, labels, static_cast<double>(*d.device_free_bytes.value));
      }
    }
  }
  return e.Text();
}

}  // namespace fragscope
