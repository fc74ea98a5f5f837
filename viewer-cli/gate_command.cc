// fragscope gate TRACE... [limits...]: exits 1 with a one-line reason when a limit is exceeded.
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/trace/output_file.h"
#include "gate_check.h"
#include "trace_loading.h"

namespace fragscope::cli {

namespace {
constexpr char kUsage[] =
    "usage: fragscope gate TRACE... [--max-fragmentation F] [--max-stranded BYTES]\n"
    "                            [--max-reserved BYTES] [--min-cached BYTES]\n"
    "                            [--at peak,end,oom|all] [--baseline OLD.json\n"
    "                            [--max-increase D] [--max-reserved-increase R]]\n"
    "                            [--allow-opaque] [--allow-coarse-blocks]\n"
    "                            [--allow-partial-history] [--junit OUT.xml]\n"
    "  F and D are fractions (0.25 = 25 %); BYTES take K/M/G suffixes (powers of 1024).\n"
    "  --at: which moments to judge, comma-separated; peak,oom (default): the peak of\n"
    "  reserved memory on each device and every OOM (at the failure); end: the end; all:\n"
    "  every sample, the end and every OOM. Opaque segments fail the gate unless --allow-opaque;\n"
    "  blocks known at syncs only (PyTorch's snapshot diffs) fail it between syncs unless\n"
    "  --allow-coarse-blocks; a trace that begins mid-run, or an imported PyTorch snapshot\n"
    "  (one moment), fails peak and baseline checks unless --allow-partial-history.\n"
    "  Baseline: a `fragscope report --format json` file, of one process or of a job (whose\n"
    "  processes are matched with the TRACEs by rank); D bounds the rise of each device's\n"
    "  max fragmentation (0.05 = five points), R the rise of its peak reserved memory,\n"
    "  relative (0.05 = 5 %). Several TRACEs (the processes of a job): each is judged and the\n"
    "  gate passes only if all do. Exit: 0 pass, 1 fail, 2 usage, 3 bad input.\n";

bool ParseFraction(const std::string& s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v >= 0.0 && v <= 1.0)) return false;
  *out = v;
  return true;
}

// "peak,oom" -> GateMoment bits; false for an empty list or an unknown word.
bool ParseMoments(const std::string& text, GateMoment* out) {
  unsigned bits = 0;
  for (absl::string_view word : absl::StrSplit(text, ',')) {
    if (word == "peak") {
      bits |= static_cast<unsigned>(GateMoment::kPeak);
    } else if (word == "end") {
      bits |= static_cast<unsigned>(GateMoment::kEnd);
    } else if (word == "oom") {
      bits |= static_cast<unsigned>(GateMoment::kOom);
    } else if (word == "all") {
      bits |= static_cast<unsigned>(GateMoment::kAll);
    } else {
      return false;
    }
  }
  if (bits == 0) return false;
  *out = static_cast<GateMoment>(bits);
  return true;
}

// A baseline process's figures, per device.
struct BaselineFigures {
  std::map<int, double> max_fragmentation;
  std::map<int, uint64_t> peak_reserved;
};

// From one process's JSON report (devices[]); devices without the figure are left out.
BaselineFigures ReadBaselineFigures(const nlohmann::json& report) {
  BaselineFigures b;
  if (!report.contains("devices") || !report["devices"].is_array()) return b;
  for (const auto& d : report["devices"]) {
    if (!d.is_object() || !d.contains("device") || !d["device"].is_number_integer()) continue;
    if (d.contains("max_fragmentation") && d["max_fragmentation"].is_number()) {
      b.max_fragmentation[d["device"].get<int>()] = d["max_fragmentation"].get<double>();
    }
    if (d.contains("peak_reserved_bytes") && d["peak_reserved_bytes"].is_number_unsigned()) {
      b.peak_reserved[d["device"].get<int>()] = d["peak_reserved_bytes"].get<uint64_t>();
    }
  }
  return b;
}

std::string RankList(const std::map<uint32_t, BaselineFigures>& by_rank) {
  std::string list;
  for (const auto& [rank, figures] : by_rank) {
    absl::StrAppendFormat(&list, "%s%d", list.empty() ? "" : ", ", rank);
  }
  return list;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "fragscope gate: %s\n%s", message.c_str(), kUsage);
  return kExitUsage;
}

// What `fragscope gate` was asked to judge, parsed and checked.
struct GateOptions {
  std::vector<std::string> traces;
  GateLimits limits;          // without the baseline's figures (per trace, see JudgeTrace)
  std::string baseline_path;  // empty: no baseline comparison
  std::string junit_path;     // empty: no JUnit XML
};

// Fills `options`. Returns the exit code to stop with (usage error, --help), or nullopt.
std::optional<int> ParseGateOptions(const std::vector<std::string>& args, GateOptions* options) {
  std::string max_frag, max_stranded, max_reserved, min_cached, at = "peak,oom", max_increase,
                                                                max_reserved_increase;
  GateOptions& o = *options;
  GateLimits& limits = o.limits;
  ArgReader reader("gate", args);
  reader.Option("max-fragmentation", "", &max_frag);
  reader.Option("max-stranded", "", &max_stranded);
  reader.Option("max-reserved", "", &max_reserved);
  reader.Option("min-cached", "", &min_cached);
  reader.Option("at", "", &at);
  reader.Option("baseline", "", &o.baseline_path);
  reader.Option("max-increase", "", &max_increase);
  reader.Option("max-reserved-increase", "", &max_reserved_increase);
  reader.Option("junit", "", &o.junit_path);
  reader.Flag("allow-opaque", &limits.allow_opaque);
  reader.Flag("allow-coarse-blocks", &limits.allow_coarse_blocks);
  reader.Flag("allow-partial-history", &limits.allow_partial_history);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return exit;
  if (reader.positionals().empty()) return Usage("expected a TRACE");
  o.traces = reader.positionals();
  double f = 0;
  if (!max_frag.empty()) {
    if (!ParseFraction(max_frag, &f))
      return Usage("--max-fragmentation '" + max_frag + "' must be a fraction between 0 and 1");
    limits.max_fragmentation = f;
  }
  for (auto [text, dest, flag] :
       {std::tuple{&max_stranded, &limits.max_stranded_bytes, "--max-stranded"},
        std::tuple{&max_reserved, &limits.max_reserved_bytes, "--max-reserved"}}) {
    if (text->empty()) continue;
    auto b = ArgReader::ParseBytes(*text);
    if (!b) return Usage(std::string(flag) + " '" + *text + "' is not a byte count (e.g. 512M)");
    *dest = *b;
  }
  if (!min_cached.empty()) {
    auto b = ArgReader::ParseBytes(min_cached);
    if (!b) return Usage("--min-cached '" + min_cached + "' is not a byte count (e.g. 64M)");
    limits.min_cached_bytes = *b;
  }
  if (!ParseMoments(at, &limits.at)) {
    return Usage("--at '" + at + "' must be a comma-separated list of peak, end, oom or all");
  }
  const bool compares = !max_increase.empty() || !max_reserved_increase.empty();
  if (o.baseline_path.empty() == compares) {
    return Usage(o.baseline_path.empty()
                     ? "--max-increase and --max-reserved-increase need --baseline OLD.json"
                     : "--baseline needs --max-increase or --max-reserved-increase");
  }
  if (!max_increase.empty()) {
    if (!ParseFraction(max_increase, &f)) {
      return Usage("--max-increase '" + max_increase + "' must be a fraction between 0 and 1");
    }
    limits.max_increase = f;
  }
  if (!max_reserved_increase.empty()) {
    char* end = nullptr;
    const double r = std::strtod(max_reserved_increase.c_str(), &end);
    if (*end != '\0' || !(r >= 0.0 && r <= 100.0)) {
      return Usage("--max-reserved-increase '" + max_reserved_increase +
                   "' must be a relative rise of at least 0 (0.05 = 5 %)");
    }
    limits.max_reserved_increase = r;
  }
  if (!limits.max_fragmentation && !limits.max_stranded_bytes && !limits.max_reserved_bytes &&
      !limits.max_increase && !limits.max_reserved_increase) {
    return Usage("give at least one limit");
  }
  return std::nullopt;
}

// The baseline's figures: one process's report, or a job's, whose processes are matched with
// the traces by rank.
struct GateBaseline {
  std::optional<BaselineFigures> single;
  std::map<uint32_t, BaselineFigures> by_rank;
};

// Reads --baseline (if given) into `baseline`. Returns the exit code to stop with, or nullopt.
std::optional<int> LoadGateBaseline(const GateOptions& o, GateBaseline* baseline) {
  if (o.baseline_path.empty()) return std::nullopt;
  const std::string& path = o.baseline_path;
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "fragscope gate: %s: cannot read baseline\n", path.c_str());
    return kExitBadInput;
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("job") && j.contains("processes") && j["processes"].is_array()) {
    for (const auto& p : j["processes"]) {
      const nlohmann::json* rank = nullptr;
      if (p.is_object() && p.contains("report") && p["report"].is_object() &&
          p["report"].contains("process") && p["report"]["process"].contains("rank")) {
        rank = &p["report"]["process"]["rank"];
      }
      if (rank == nullptr || !rank->is_number_unsigned()) {
        std::fprintf(stderr,
                     "fragscope gate: %s: a job's report whose processes have no rank; a job "
                     "baseline is matched by rank (RANK in the launcher's environment), so "
                     "gate each trace against its own process's report instead\n",
                     path.c_str());
        return kExitBadInput;
      }
      baseline->by_rank[rank->get<uint32_t>()] = ReadBaselineFigures(p["report"]);
    }
    return std::nullopt;
  }
  if (j.is_discarded() || !j.is_object() || !j.contains("devices") || !j["devices"].is_array()) {
    std::fprintf(stderr,
                 "fragscope gate: %s: not a fragscope JSON report (expected an object with "
                 "devices[]; make one with `fragscope report TRACE --format json`)\n",
                 path.c_str());
    return kExitBadInput;
  }
  if (o.traces.size() > 1) {
    // One process's figures; which of several traces they would stand for is a guess.
    return Usage("--baseline " + path + " is one process's report and " +
                 std::to_string(o.traces.size()) +
                 " traces were given: use a job's report (`fragscope report TRACE... "
                 "--format json` of a run with ranks) or gate each trace alone");
  }
  baseline->single = ReadBaselineFigures(j);
  return std::nullopt;
}

// The checks of one trace. A trace that cannot be read, or is damaged, is one failed check
// (and sets *unreadable): a cut trace could hide the very moment that fails.
std::vector<GateCheck> JudgeTrace(const std::string& path, const GateOptions& o,
                                  const GateBaseline& baseline, bool* unreadable) {
  *unreadable = false;
  auto loaded = LoadTrace(path, ModelOptions{});
  if (!loaded.ok()) {
    std::fprintf(stderr, "fragscope gate: %s\n", std::string(loaded.status().message()).c_str());
    *unreadable = true;
    return {{"trace readable", false, std::string(loaded.status().message())}};
  }
  if (!loaded->damage.empty()) {
    std::fprintf(stderr, "fragscope gate: %s; refusing to judge a damaged trace\n",
                 loaded->damage.c_str());
    *unreadable = true;
    return {{"trace whole", false, loaded->damage}};
  }
  std::vector<GateCheck> checks;
  GateLimits limits = o.limits;
  if (baseline.single) {
    limits.baseline_max_fragmentation = baseline.single->max_fragmentation;
    limits.baseline_peak_reserved = baseline.single->peak_reserved;
  } else if (!baseline.by_rank.empty()) {
    const std::optional<uint32_t> rank = loaded->summary.rank;
    auto it = rank ? baseline.by_rank.find(*rank) : baseline.by_rank.end();
    if (it == baseline.by_rank.end()) {
      // Another job shape: comparing it with the baseline would be comparing other things.
      checks.push_back(
          {"baseline for this process", false,
           rank ? absl::StrFormat("rank %d is not in the baseline %s (its ranks: %s); make a "
                                  "new baseline for this job",
                                  *rank, o.baseline_path, RankList(baseline.by_rank))
                : absl::StrFormat("the trace has no rank (no RANK in its launcher's "
                                  "environment), and the baseline %s is a job's, matched by "
                                  "rank",
                                  o.baseline_path)});
    } else {
      limits.baseline_max_fragmentation = it->second.max_fragmentation;
      limits.baseline_peak_reserved = it->second.peak_reserved;
    }
  }
  std::vector<GateCheck> judged = EvaluateGate(loaded->summary, limits);
  checks.insert(checks.end(), judged.begin(), judged.end());
  return checks;
}

// One line on stderr for a judged trace: its first failed check, or that nothing was judged, or
// (in a job) that it passed. Returns whether a check failed.
bool SayTraceVerdict(const std::string& path, const std::vector<GateCheck>& checks,
                     const GateOptions& o) {
  const bool several = o.traces.size() > 1;
  int failed = 0;
  const GateCheck* first = nullptr;
  for (const GateCheck& c : checks) {
    if (!c.passed) {
      ++failed;
      if (first == nullptr) first = &c;
    }
  }
  if (first != nullptr) {
    std::fprintf(stderr, "fragscope gate: FAILED: %s%s", several ? (path + ": ").c_str() : "",
                 first->reason.c_str());
    if (failed > 1) std::fprintf(stderr, " (and %d more failed checks)", failed - 1);
    std::fprintf(stderr, "\n");
  } else if (checks.empty()) {
    // Nothing failed, but nothing was judged either: say so rather than look like a clean bill.
    std::fprintf(stderr,
                 "fragscope gate: %spassed, but no check applied: no device had at least %s "
                 "cached at the chosen moment (--at), so fragmentation was not judged\n",
                 several ? (path + ": ").c_str() : "",
                 FormatBytes(o.limits.min_cached_bytes).c_str());
  } else if (several) {
    std::fprintf(stderr, "fragscope gate: %s: passed (%zu check%s)\n", path.c_str(), checks.size(),
                 checks.size() == 1 ? "" : "s");
  }
  return first != nullptr;
}

// The job's last line and the exit code.
int GateVerdict(const GateOptions& o, int unreadable, int failed_traces, std::size_t total_checks) {
  const std::size_t traces = o.traces.size();
  const bool several = traces > 1;
  if (unreadable > 0) {
    if (several) {
      std::fprintf(stderr, "fragscope gate: %d of %zu traces could not be judged\n", unreadable,
                   traces);
    }
    return kExitBadInput;
  }
  if (failed_traces > 0) {
    if (several) {
      std::fprintf(stderr, "fragscope gate: FAILED: %d of %zu traces exceed a limit\n",
                   failed_traces, traces);
    }
    return kExitGateFailed;
  }
  if (total_checks == 0 && !several) return kExitOk;  // said by SayTraceVerdict
  if (several && total_checks == 0) {
    std::fprintf(stderr, "fragscope gate: passed, but no check applied in any of the %zu traces\n",
                 traces);
  } else if (several) {
    std::fprintf(stderr, "fragscope gate: passed (%zu traces, %zu checks)\n", traces, total_checks);
  } else {
    std::fprintf(stderr, "fragscope gate: passed (%zu check%s)\n", total_checks,
                 total_checks == 1 ? "" : "s");
  }
  return kExitOk;
}

}  // namespace

int GateCommand(const std::vector<std::string>& args) {
  GateOptions options;
  if (std::optional<int> exit = ParseGateOptions(args, &options)) return *exit;
  GateBaseline baseline;
  if (std::optional<int> exit = LoadGateBaseline(options, &baseline)) return *exit;
  // Every trace is judged, whatever the others do: a job passes only when each of its
  // processes does, and one unreadable or damaged trace fails it (exit 3), since the moment
  // that fails could be in what was not read.
  std::vector<GateSuite> suites;
  int unreadable = 0, failed_traces = 0;
  std::size_t total_checks = 0;
  for (const std::string& path : options.traces) {
    bool cannot_judge = false;
    std::vector<GateCheck> checks = JudgeTrace(path, options, baseline, &cannot_judge);
    if (cannot_judge) {
      ++unreadable;
    } else {
      total_checks += checks.size();
      if (SayTraceVerdict(path, checks, options)) ++failed_traces;
    }
    suites.push_back({path, std::move(checks)});
  }
  if (!options.junit_path.empty()) {
    // 0644 at most, whatever the umask.
    if (absl::Status s = WriteOutputFile(options.junit_path, GateJunitXml(suites)); !s.ok()) {
      std::fprintf(stderr, "fragscope gate: cannot write JUnit XML: %s\n",
                   std::string(s.message()).c_str());
      return kExitBadInput;
    }
  }
  return GateVerdict(options, unreadable, failed_traces, total_checks);
}

}  // namespace fragscope::cli
