// The CI gate's decision, separated from the command line so it can be tested directly:
// given a summary and limits, which checks pass and which fail, each with a one-line reason.
#ifndef FRAGSCOPE_VIEWER_CLI_GATE_CHECK_H_
#define FRAGSCOPE_VIEWER_CLI_GATE_CHECK_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fragscope/model/model_summary.h"

namespace fragscope::cli {

// The moments a gate judges, as bits (`--at` takes a comma-separated list of them).
enum class GateMoment : unsigned {
  kPeak = 1,     // the peak of reserved memory on each device
  kEnd = 2,      // the end of the trace
  kOom = 4,      // every OOM post-mortem, with the figures at the failure
  kSamples = 8,  // every timeline point (the peak among them)
  kAll = kPeak | kEnd | kOom | kSamples,
};
constexpr GateMoment operator|(GateMoment a, GateMoment b) {
  return static_cast<GateMoment>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr bool Has(GateMoment set, GateMoment m) {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(m)) != 0;
}
// The default: the peak, and every OOM, where a run that died of fragmentation shows it (its
// peak may hold no cache at all, so the peak alone would pass it).
inline constexpr GateMoment kDefaultGateMoments = GateMoment::kPeak | GateMoment::kOom;

struct GateLimits {
  std::optional<double> max_fragmentation;  // 0..1
  std::optional<uint64_t> max_stranded_bytes;
  std::optional<uint64_t> max_reserved_bytes;
  // A fragmentation limit applies only where cached memory is at least this much: on a nearly
  // empty cache the ratio is noise.
  uint64_t min_cached_bytes = uint64_t{64} << 20;
  GateMoment at = kDefaultGateMoments;
  bool allow_opaque = false;
  // A stream that knows the sub-allocator's blocks at syncs only (ModelSummary::block_syncs):
  // stranded bytes and fragmentation at a moment between syncs are not known, and fail a
  // visibility check unless this allows judging the blocks of the last sync instead.
  bool allow_coarse_blocks = false;
  // A stream that begins mid-run (ModelSummary::history_from_seq: a flight-recorder segment, a
  // late connect, an attach) knows its peak and maximum from there on only: judging them fails
  // a history check unless this allows judging the window's.
  bool allow_partial_history = false;
  // Baseline comparison: per device max_fragmentation from an earlier JSON report.
  std::map<int, double> baseline_max_fragmentation;
  std::optional<double> max_increase;  // absolute (0.05 = five percentage points)
  // Baseline comparison: per device peak reserved bytes from the same report, and the rise
  // allowed, relative (0.05 = 5 % more than the baseline's peak).
  std::map<int, uint64_t> baseline_peak_reserved;
  std::optional<double> max_reserved_increase;
};

struct GateCheck {
  std::string name;  // "device 0 fragmentation at peak (seq 812)"
  bool passed = true;
  std::string reason;  // one line, set when !passed
  // The check apart from its moment ("fragmentation", "stranded", "history", ...) and its
  // device (-1: the whole trace): checks with the same kind and device are one CI test case.
  std::string kind;
  int device = -1;
  std::string when;  // "at peak (seq 812)"; empty for checks of the whole run
  // The figure judged and its limit, where the check has them (a visibility or history check
  // has none); as text for people, as numbers to tell the worst moment.
  std::optional<double> value, limit;
  std::string value_text, limit_text;
  // For a check that stands for several moments (WorstPerCheck): how many, and how many failed.
  int moments = 1;
  int failed_moments = 0;
};

// A failed check without a figure (a trace unreadable, history or visibility missing).
GateCheck FailedCheck(std::string name, std::string kind, std::string reason, int device = -1,
                      std::string when = "");

// How far a check is past its limit (value / limit); measured failures rank above those
// without a figure, which rank above passes. For choosing the worst moment and violation.
double GateSeverity(const GateCheck& c);

// One check per kind and device, in the order first seen: the worst of its moments decides
// (it fails if any moment fails) and is the one quoted, with how many moments failed. What CI
// shows as test cases and tables: `--at all` judges every sample, and a reader wants to know
// which limit broke on which device, not every sample that broke it.
std::vector<GateCheck> WorstPerCheck(const std::vector<GateCheck>& checks);

// Every check the limits ask for, over every device and moment. A summary with no device
// memory at all yields one failed check: nothing measured must not pass as "fine".
std::vector<GateCheck> EvaluateGate(const ModelSummary& summary, const GateLimits& limits);

// The JUnit XML CI systems read: one testcase per check.
std::string GateJunitXml(const std::vector<GateCheck>& checks, const std::string& trace);
// Several traces (a job's processes): one <testsuite> per trace, in the order given.
struct GateSuite {
  std::string trace;
  std::vector<GateCheck> checks;
};
std::string GateJunitXml(const std::vector<GateSuite>& suites);

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_GATE_CHECK_H_
