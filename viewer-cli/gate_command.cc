// fragscope gate TRACE... [limits...]: exits 1 with a one-line reason when a limit is exceeded.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
    "  F and D are fractions (0.25 or 25%); BYTES take K/M/G/T suffixes (powers of 1024;\n  1.5G, "
    "512MiB).\n"
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
  std::optional<double> v = ArgReader::ParseFraction(s);
  if (v) *out = *v;
  return v.has_value();
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
  std::fprintf(stderr, "fragscope gate: %s (fragscope gate --help)\n", message.c_str());
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
      return Usage("--max-fragmentation '" + max_frag +
                   "' must be a fraction between 0 and 1 (0.3 or 30%)");
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
      return Usage("--max-increase '" + max_increase +
                   "' must be a fraction between 0 and 1 (0.3 or 30%)");
    }
    limits.max_increase = f;
  }
  if (!max_reserved_increase.empty()) {
    const std::optional<double> r = ArgReader::ParseFraction(max_reserved_increase, 0.0, 100.0);
    if (!r) {
      return Usage("--max-reserved-increase '" + max_reserved_increase +
                   "' must be a relative rise of at least 0 (0.05 or 5% = 5 %)");
    }
    limits.max_reserved_increase = *r;
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
    return {
        FailedCheck("trace readable", "trace readable", std::string(loaded.status().message()))};
  }
  if (!loaded->damage.empty()) {
    std::fprintf(stderr, "fragscope gate: %s; refusing to judge a damaged trace\n",
                 loaded->damage.c_str());
    *unreadable = true;
    return {FailedCheck("trace whole", "trace whole", loaded->damage)};
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
      checks.push_back(FailedCheck(
          "baseline for this process", "baseline for this process",
          rank ? absl::StrFormat("rank %d is not in the baseline %s (its ranks: %s); make a "
                                 "new baseline for this job",
                                 *rank, o.baseline_path, RankList(baseline.by_rank))
               : absl::StrFormat("the trace has no rank (no RANK in its launcher's "
                                 "environment), and the baseline %s is a job's, matched by "
                                 "rank",
                                 o.baseline_path)));
    } else {
      limits.baseline_max_fragmentation = it->second.max_fragmentation;
      limits.baseline_peak_reserved = it->second.peak_reserved;
    }
  }
  std::vector<GateCheck> judged = EvaluateGate(loaded->summary, limits);
  checks.insert(checks.end(), judged.begin(), judged.end());
  return checks;
}

// A judged trace: its checks, one per kind and device (WorstPerCheck).
struct JudgedTrace {
  std::string path;
  std::vector<GateCheck> checks;
  bool unreadable = false;
};

// The failed checks of every trace, worst first, one line each on stderr: the first line is
// the worst violation of the run. Then, per trace, what passed or that nothing was judged.
// Returns how many traces failed a check.
int SayVerdicts(const std::vector<JudgedTrace>& traces, const GateOptions& o) {
  const bool several = traces.size() > 1;
  std::vector<std::pair<const JudgedTrace*, const GateCheck*>> failures;
  for (const JudgedTrace& t : traces) {
    if (t.unreadable) continue;
    for (const GateCheck& c : t.checks) {
      if (!c.passed) failures.emplace_back(&t, &c);
    }
  }
  std::stable_sort(failures.begin(), failures.end(), [](const auto& a, const auto& b) {
    return GateSeverity(*a.second) > GateSeverity(*b.second);
  });
  for (const auto& [trace, check] : failures) {
    std::fprintf(stderr, "fragscope gate: FAILED: %s%s\n",
                 several ? (trace->path + ": ").c_str() : "", check->reason.c_str());
  }
  int failed_traces = 0;
  for (const JudgedTrace& t : traces) {
    if (t.unreadable) continue;
    const bool failed =
        std::any_of(t.checks.begin(), t.checks.end(), [](const GateCheck& c) { return !c.passed; });
    failed_traces += failed ? 1 : 0;
    if (failed) continue;
    if (t.checks.empty()) {
      // Nothing failed, but nothing was judged either: say so rather than look like a clean bill.
      std::fprintf(stderr,
                   "fragscope gate: %spassed, but no check applied: no device had at least %s "
                   "cached at the chosen moment (--at), so fragmentation was not judged\n",
                   several ? (t.path + ": ").c_str() : "",
                   FormatBytes(o.limits.min_cached_bytes).c_str());
    } else if (several) {
      std::fprintf(stderr, "fragscope gate: %s: passed (%zu check%s)\n", t.path.c_str(),
                   t.checks.size(), t.checks.size() == 1 ? "" : "s");
    }
  }
  return failed_traces;
}

// GitHub Actions' workflow commands: data escapes %, CR and LF; properties also : and ,.
std::string GithubEscape(const std::string& s, bool property) {
  std::string out;
  for (char c : s) {
    if (c == '%') {
      out += "%25";
    } else if (c == '\r') {
      out += "%0D";
    } else if (c == '\n') {
      out += "%0A";
    } else if (property && c == ':') {
      out += "%3A";
    } else if (property && c == ',') {
      out += "%2C";
    } else {
      out += c;
    }
  }
  return out;
}

// A Markdown table cell: a pipe would end the cell, a newline the row.
std::string MarkdownCell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out.empty() ? "–" : out;
}

// Under GitHub Actions: an error annotation per failed check (on stdout, where the runner reads
// workflow commands) and the checks as a table in the job's summary page.
void ReportToGithub(const std::vector<JudgedTrace>& traces) {
  const char* actions = std::getenv("GITHUB_ACTIONS");
  if (actions == nullptr || std::string(actions) != "true") return;
  const bool several = traces.size() > 1;
  for (const JudgedTrace& t : traces) {
    for (const GateCheck& c : t.checks) {
      if (c.passed) continue;
      const std::string title =
          "fragscope gate: " + (several ? t.path + ": " : std::string()) + c.name;
      std::printf("::error title=%s::%s\n", GithubEscape(title, true).c_str(),
                  GithubEscape(c.reason, false).c_str());
    }
  }
  std::fflush(stdout);
  const char* summary_path = std::getenv("GITHUB_STEP_SUMMARY");
  if (summary_path == nullptr || summary_path[0] == '\0') return;
  bool all_passed = true;
  for (const JudgedTrace& t : traces) {
    for (const GateCheck& c : t.checks) all_passed = all_passed && c.passed;
  }
  std::string md = absl::StrFormat("### fragscope gate: %s\n\n", all_passed ? "passed" : "FAILED");
  md += several ? "| trace | check | device | limit | worst value | at | result |\n"
                  "|---|---|---|---|---|---|---|\n"
                : "| check | device | limit | worst value | at | result |\n"
                  "|---|---|---|---|---|---|\n";
  for (const JudgedTrace& t : traces) {
    for (const GateCheck& c : t.checks) {
      std::string at = c.when.rfind("at ", 0) == 0 ? c.when.substr(3) : c.when;
      if (c.moments > 1) absl::StrAppendFormat(&at, " (worst of %d)", c.moments);
      std::string result = c.passed ? "pass" : "**FAIL**";
      if (!c.passed && !c.value) result += ": " + c.reason;
      md += absl::StrFormat("%s| %s | %s | %s | %s | %s | %s |\n",
                            several ? "| " + MarkdownCell(t.path) + " " : "", MarkdownCell(c.kind),
                            c.device >= 0 ? std::to_string(c.device) : "–",
                            MarkdownCell(c.limit_text), MarkdownCell(c.value_text),
                            MarkdownCell(at), MarkdownCell(result));
    }
  }
  md += "\n";
  // Appended: other steps of the job write their own sections to the same file.
  std::ofstream out(summary_path, std::ios::app);
  out << md;
  out.flush();
  if (!out) {
    std::fprintf(stderr,
                 "fragscope gate: cannot append the summary to %s (GITHUB_STEP_SUMMARY): %s\n",
                 summary_path, std::strerror(errno));
  }
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
  if (total_checks == 0 && !several) return kExitOk;  // said by SayVerdicts
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
  std::vector<JudgedTrace> traces;
  int unreadable = 0;
  std::size_t total_checks = 0;
  for (const std::string& path : options.traces) {
    JudgedTrace t{path, {}, false};
    t.checks = WorstPerCheck(JudgeTrace(path, options, baseline, &t.unreadable));
    if (t.unreadable) {
      ++unreadable;
    } else {
      total_checks += t.checks.size();
    }
    traces.push_back(std::move(t));
  }
  const int failed_traces = SayVerdicts(traces, options);
  ReportToGithub(traces);
  if (!options.junit_path.empty()) {
    std::vector<GateSuite> suites;
    for (const JudgedTrace& t : traces) suites.push_back({t.path, t.checks});
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
