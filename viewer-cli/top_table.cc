#include "top_table.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/report/job_summary.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope::cli {
namespace {

std::string Fmt(const nlohmann::json& v) {
  return v.is_number_unsigned() ? FormatBytes(v.get<uint64_t>()) : std::string("unknown");
}

// A C++ function for a one-line column: a long name's parameter list becomes "(...)"
// (`c10::...::DeviceCachingAllocator::record_trace(c10::CachingDeviceAllocator::TraceEntry::
// Action, unsigned long, ...)` is a line of its own). Short names keep theirs, which tell
// overloads apart.
std::string ShortFunction(const std::string& name) {
  constexpr size_t kLong = 60;
  if (name.size() <= kLong) return name;
  size_t close = name.size();
  for (const char* suffix : {" const", " &&", " &"}) {  // qualifiers after the parameters
    const size_t n = std::strlen(suffix);
    if (close >= n && name.compare(close - n, n, suffix) == 0) close -= n;
  }
  if (close == 0 || name[close - 1] != ')') return name;
  int depth = 0;
  for (size_t i = close; i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0) {
      if (i + 1 == close - 1) return name;  // "()": nothing to shorten
      return name.substr(0, i) + "(...)" + name.substr(close);
    }
  }
  return name;
}

// The frame a site is known by: the first that is not fragscope's own (annotate.h's inline
// functions are the innermost frames of every annotated block), by function name where the
// collector symbolized it, else as module+offset ("text"). A source-level frame (no pc: an
// adapter's Python frame) also gets its file's name and line: Python function names alone
// (`forward`, `<module>`) say little.
std::string SiteName(const nlohmann::json& site) {
  if (!site.is_object() || !site.contains("stack") || !site["stack"].is_array()) return "";
  const nlohmann::json* chosen = nullptr;
  for (const auto& f : site["stack"]) {
    if (!f.is_object()) continue;
    // annotate.h's functions, the agent, and the PyTorch adapter's extension, whose trace
    // callback is the innermost frame of a tensor not named by its Python line yet.
    if (IsOwnFrame(f.value("function", std::string()), f.value("module", std::string()))) {
      continue;
    }
    chosen = &f;
    break;
  }
  if (chosen == nullptr) return "";
  std::string name = chosen->value("function", std::string());
  const std::string file = chosen->value("file", std::string());
  if (!name.empty() && !file.empty() && chosen->contains("pc") && (*chosen)["pc"].is_null()) {
    const int line = (*chosen).value("line", 0);
    name += " (" + file.substr(file.rfind('/') + 1) + (line > 0 ? ":" + std::to_string(line) : "") +
            ")";
  }
  return name.empty() ? chosen->value("text", std::string("?")) : ShortFunction(name);
}

// The process's rank in a distributed job, from its report (null or absent outside one).
std::optional<int64_t> RankOf(const nlohmann::json& stream) {
  if (!stream.contains("report") || !stream["report"].contains("process")) return std::nullopt;
  const nlohmann::json& p = stream["report"]["process"];
  if (!p.contains("rank") || !p["rank"].is_number_integer()) return std::nullopt;
  return p["rank"].get<int64_t>();
}

// Processes in view that hold memory on one physical GPU (same host and UUID) now: a note per
// such GPU under the table, "GPU-... on HOST: rank 0 (pid 41), rank 1 (pid 42)". Each of them
// counts the others' memory as outside its own segments.
std::string SharedGpuNotes(const nlohmann::json& streams, long pid_filter) {
  struct Gpu {
    std::string host, uuid;
    std::vector<std::string> users;
    std::vector<uint64_t> pids;
  };
  std::vector<Gpu> gpus;
  for (const auto& s : streams) {
    if (!s.value("connected", false) || !s.contains("report")) continue;
    const nlohmann::json& r = s["report"];
    const uint64_t pid = s.value("pid", 0ull);
    const std::string host = r.contains("process") ? r["process"].value("host", "") : "";
    for (const auto& d : r.value("devices", nlohmann::json::array())) {
      // The collector's form (nvidia-smi's) or an older collector's bare hex: one GPU either way.
      const std::string given = d.value("uuid", "");
      const std::string hex = GpuUuidHex(given);
      const std::string uuid = hex.empty() ? given : hex;
      const bool holds = d.contains("reserved_bytes") && d["reserved_bytes"].is_number() &&
                         d["reserved_bytes"].get<double>() > 0;
      if (uuid.empty() || !holds) continue;
      auto g = std::find_if(gpus.begin(), gpus.end(),
                            [&](const Gpu& x) { return x.host == host && x.uuid == uuid; });
      if (g == gpus.end()) g = gpus.insert(gpus.end(), Gpu{host, uuid, {}, {}});
      if (std::find(g->pids.begin(), g->pids.end(), pid) != g->pids.end()) continue;
      g->pids.push_back(pid);
      const std::optional<int64_t> rank = RankOf(s);
      g->users.push_back(rank ? absl::StrFormat("rank %d (pid %d)", *rank, pid)
                              : absl::StrFormat("pid %d", pid));
    }
  }
  std::string notes;
  for (const Gpu& g : gpus) {
    if (g.pids.size() < 2) continue;
    if (pid_filter > 0 && std::find(g.pids.begin(), g.pids.end(),
                                    static_cast<uint64_t>(pid_filter)) == g.pids.end()) {
      continue;
    }
    absl::StrAppendFormat(&notes,
                          "shared GPU %s%s: %s hold memory on it at once; each counts the "
                          "others' as outside its own segments.\n",
                          GpuUuidName(g.uuid), g.host.empty() ? "" : " on " + g.host,
                          absl::StrJoin(g.users, ", "));
  }
  return notes;
}

}  // namespace

std::string TopTable(const nlohmann::json& doc, long pid_filter, TopRates* rates, double now) {
  // A RANK column only when some process of a distributed job is in view.
  bool any_rank = false;
  for (const auto& s : doc.value("streams", nlohmann::json::array())) {
    any_rank = any_rank || RankOf(s).has_value();
  }
  std::string out =
      absl::StrFormat("%s%-8s %-18s %3s %11s %11s %11s %7s %4s %9s  %s\n", any_rank ? "RANK  " : "",
                      "PID", "PROCESS", "DEV", "RESERVED", "ALLOCATED", "LARGESTFREE", "FRAG",
                      "OOMS", "EVENTS/s", "TOP SITE");
  int rows = 0;
  bool any_stale = false;
  // A job's processes in rank order (then as the collector lists them); others after them.
  nlohmann::json streams = doc.value("streams", nlohmann::json::array());
  if (any_rank && streams.is_array()) {
    std::stable_sort(streams.begin(), streams.end(),
                     [](const nlohmann::json& a, const nlohmann::json& b) {
                       const std::optional<int64_t> ra = RankOf(a), rb = RankOf(b);
                       if (ra.has_value() != rb.has_value()) return ra.has_value();
                       return ra && *ra < *rb;
                     });
  }
  for (const auto& s : streams) {
    uint64_t pid = s.value("pid", 0ull);
    if (pid_filter > 0 && pid != static_cast<uint64_t>(pid_filter)) continue;
    const nlohmann::json& r = s["report"];
    std::string exe = s.value("exe", "");
    exe = exe.substr(exe.rfind('/') + 1).substr(0, 18);
    uint64_t events = r.value("events", 0ull);
    // A rate needs two looks: the first frame (and every --once) has none, shown as "-", not 0.
    // An ended stream has none either, and leaves the pid's count to its live successor (a
    // stream resumed after a collector restart has the same pid).
    const bool connected = s.value("connected", false);
    std::string rate = "-";
    auto it = rates->find(pid);
    if (connected && it != rates->end() && now > it->second.second) {
      rate =
          absl::StrFormat("%.0f", static_cast<double>(events - std::min(events, it->second.first)) /
                                      (now - it->second.second));
    }
    if (connected) (*rates)[pid] = {events, now};
    // Blocks read at syncs only, with events since the last: the block columns are that sync's.
    // (blocks_known_at_end is true for a stream without syncs.)
    const bool stale = !r.value("blocks_known_at_end", true);
    const std::string star = stale ? "*" : "";
    any_stale = any_stale || stale;
    for (const auto& d : r.value("devices", nlohmann::json::array())) {
      std::string frag = d["fragmentation"].is_number()
                             ? absl::StrFormat("%.1f%%", 100 * d["fragmentation"].get<double>())
                             : "n/a";
      // The device's own top site (a process's devices hold different things).
      std::string site;
      if (d.contains("sites") && d["sites"].is_array() && !d["sites"].empty()) {
        site = SiteName(d["sites"][0]);
      }
      const int device = d.value("device", -1);
      // The collector's count (DeviceSummary::oom_count), "-" from one too old to say.
      const bool counted = d.contains("oom_count") && d["oom_count"].is_number_integer() &&
                           d["oom_count"].get<int64_t>() >= 0;
      const std::string ooms = counted ? std::to_string(d["oom_count"].get<int64_t>()) : "-";
      std::string rank_cell;
      if (any_rank) {
        const std::optional<int64_t> rank = RankOf(s);
        rank_cell = rank ? absl::StrFormat("%-5d ", *rank) : absl::StrFormat("%-5s ", "-");
      }
      out +=
          absl::StrFormat("%s%-8d %-18s %3d %11s %11s %11s %7s %4s %9s  %s%s\n", rank_cell, pid,
                          exe, device, Fmt(d["reserved_bytes"]), Fmt(d["allocated_bytes"]) + star,
                          Fmt(d["largest_free_range_bytes"]) + star, frag + star, ooms, rate, site,
                          s.value("connected", false) ? "" : " (ended)");
      ++rows;
    }
  }
  if (rows == 0) out += "(no process with device memory yet)\n";
  out += SharedGpuNotes(streams, pid_filter);
  if (any_stale) {
    out +=
        "* PyTorch's blocks as of its last sync (snapshot diffs: exact at syncs only); blocks "
        "that came and went since are not seen.\n";
  }
  return out;
}

std::string FitToWidth(const std::string& text, int columns) {
  if (columns <= 0) return text;
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // Display columns: UTF-8 continuation bytes (10xxxxxx) take none.
    int width = 0;
    std::size_t cut = line.size();
    for (std::size_t i = 0; i < line.size(); ++i) {
      if ((static_cast<unsigned char>(line[i]) & 0xC0) == 0x80) continue;
      if (width == columns - 1) cut = i;  // where "…" goes if the line is too long
      if (++width > columns) break;
    }
    if (width > columns) {
      out.append(line.data(), cut);
      out.append("\u2026");
    } else {
      out.append(line.data(), line.size());
    }
    out.push_back('\n');
  }
  out.pop_back();  // StrSplit gave one piece more than there are newlines
  return out;
}

}  // namespace fragscope::cli
