#include "top_table.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "fragscope/model/format_bytes.h"

namespace fragscope::cli {
namespace {

std::string Fmt(const nlohmann::json& v) {
  return v.is_number_unsigned() ? FormatBytes(v.get<uint64_t>()) : std::string("unknown");
}

}  // namespace

std::string TopTable(const nlohmann::json& doc, long pid_filter, TopRates* rates, double now) {
  std::string out =
      absl::StrFormat("%-8s %-18s %3s %11s %11s %11s %7s %9s  %s\n", "PID", "PROCESS", "DEV",
                      "RESERVED", "ALLOCATED", "LARGESTFREE", "FRAG", "EVENTS/s", "TOP SITE");
  int rows = 0;
  bool any_stale = false;
  for (const auto& s : doc.value("streams", nlohmann::json::array())) {
    uint64_t pid = s.value("pid", 0ull);
    if (pid_filter > 0 && pid != static_cast<uint64_t>(pid_filter)) continue;
    const nlohmann::json& r = s["report"];
    std::string exe = s.value("exe", "");
    exe = exe.substr(exe.rfind('/') + 1).substr(0, 18);
    uint64_t events = r.value("events", 0ull);
    double rate = 0;
    auto it = rates->find(pid);
    if (it != rates->end() && now > it->second.second) {
      rate = static_cast<double>(events - std::min(events, it->second.first)) /
             (now - it->second.second);
    }
    (*rates)[pid] = {events, now};
    // Blocks read at syncs only, with events since the last: the block columns are that sync's.
    // (blocks_known_at_end is true for a stream without syncs.)
    const bool stale = !r.value("blocks_known_at_end", true);
    const std::string star = stale ? "*" : "";
    any_stale = any_stale || stale;
    for (const auto& d : r.value("devices", nlohmann::json::array())) {
      std::string frag = d["fragmentation"].is_number()
                             ? absl::StrFormat("%.1f%%", 100 * d["fragmentation"].get<double>())
                             : "n/a";
      std::string site;
      if (r.contains("sites") && !r["sites"].empty() && r["sites"][0].contains("stack") &&
          !r["sites"][0]["stack"].empty()) {
        const auto& f = r["sites"][0]["stack"][0];
        site = f.value("function", f.value("module", std::string("?")));
      }
      out += absl::StrFormat("%-8d %-18s %3d %11s %11s %11s %7s %9.0f  %s%s\n", pid, exe,
                             d.value("device", -1), Fmt(d["reserved_bytes"]),
                             Fmt(d["allocated_bytes"]) + star,
                             Fmt(d["largest_free_range_bytes"]) + star, frag + star, rate, site,
                             s.value("connected", false) ? "" : " (ended)");
      ++rows;
    }
  }
  if (rows == 0) out += "(no process with device memory yet)\n";
  if (any_stale) {
    out +=
        "* PyTorch's blocks as of its last sync (snapshot diffs: exact at syncs only); blocks "
        "that came and went since are not seen.\n";
  }
  return out;
}

}  // namespace fragscope::cli
