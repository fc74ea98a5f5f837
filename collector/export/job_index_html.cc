#include "fragscope/export/job_index_html.h"

#include <set>
#include <sstream>

#include "absl/strings/str_format.h"
#include "fragscope/export/html_escape.h"
#include "fragscope/model/format_bytes.h"

namespace fragscope::exporter {
namespace {

constexpr char kStyle[] = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1200px;
       padding: 16px 24px 48px; color: #1d2330; }
h1 { font-size: 22px; } h2 { font-size: 18px; border-bottom: 1px solid #d5dae2; }
.wrap { overflow-x: auto; }
table { border-collapse: collapse; } td, th { padding: 3px 12px 3px 0; text-align: left;
  vertical-align: top; } th { font-size: 12px; color: #5d6677; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.first td { font-weight: 600; }
.tag { background: #c0392b; color: #fff; border-radius: 3px; padding: 0 .4em; font-size: 12px; }
.muted { color: #5d6677; }
@media (max-width: 600px) { body { padding: 8px 10px 32px; } h1 { font-size: 18px; } }
)css";

std::string MemberName(const JobMemberInfo& m) {
  return m.rank ? absl::StrFormat("rank %d, pid %d", *m.rank, m.pid)
                : absl::StrFormat("pid %d", m.pid);
}

std::string Link(const std::vector<std::string>& pages, std::size_t member,
                 const std::string& text) {
  if (member >= pages.size() || pages[member].empty()) return HtmlEscape(text);
  return "<a href=\"" + HtmlEscape(pages[member]) + "\">" + HtmlEscape(text) + "</a>";
}

}  // namespace

void RenderJobIndexHtml(const JobSummary& job, const std::vector<std::string>& pages,
                        std::ostream& out) {
  std::set<std::size_t> first;  // members whose OOM came first (per host)
  for (const HostFirstOom& h : job.first_ooms) first.insert(h.oom.member);
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << absl::StrFormat("<title>fragscope job: %d processes, %d OOMs</title>\n", job.process_count,
                         job.oom_count)
      << "<style>" << kStyle << "</style>\n</head>\n<body>\n"
      << absl::StrFormat("<h1>fragscope job: %d processes, %d OOMs in %d of them</h1>\n",
                         job.process_count, job.oom_count, job.processes_with_oom);
  // Which OOM came first, per host: where to start reading.
  for (const HostFirstOom& h : job.first_ooms) {
    const JobMemberInfo& m = job.members[h.oom.member];
    out << "<p>First OOM on " << HtmlEscape(h.host) << ": "
        << Link(pages, h.oom.member, MemberName(m)) << ", device " << h.oom.device << ", "
        << HtmlEscape(FormatBytes(h.oom.requested_bytes))
        << (h.oom.oom_class ? std::string(", ") + OomClassName(*h.oom.oom_class) : "")
        << (h.oom.wall_time_ns ? ", " + HtmlEscape(FormatWallTime(*h.oom.wall_time_ns)) : "")
        << (h.later_ooms_elsewhere > 0
                ? absl::StrFormat("; %d later OOM%s in other processes of the host",
                                  h.later_ooms_elsewhere, h.later_ooms_elsewhere == 1 ? "" : "s")
                : "")
        << (h.time_order_known ? "" : " (order not certain: some OOMs have no time)") << ".</p>\n";
  }
  out << "<h2>Processes and devices</h2>\n<div class=\"wrap\"><table class=\"job\">\n"
      << "<tr><th>process</th><th>program</th><th>host</th><th>device</th><th>peak "
         "reserved</th><th>max fragmentation</th><th>OOMs</th><th>first OOM</th></tr>\n";
  for (const JobRow& row : job.rows) {
    const JobMemberInfo& m = job.members[row.member];
    out << (first.count(row.member) ? "<tr class=\"first\">" : "<tr>") << "<td>"
        << Link(pages, row.member, MemberName(m))
        << (first.count(row.member) ? " <span class=\"tag\">first OOM</span>" : "")
        << (m.resumes ? " <span class=\"muted\">(resumed)</span>" : "")
        << (m.damage.empty()
                ? ""
                : " <span class=\"muted\">damaged: " + HtmlEscape(m.damage) + "</span>")
        << "</td><td>" << HtmlEscape(m.exe.substr(m.exe.rfind('/') + 1)) << "</td><td>"
        << HtmlEscape(m.host) << "</td><td class=\"num\">"
        << (row.device < 0 ? std::string("-") : std::to_string(row.device))
        << "</td><td class=\"num\">" << HtmlEscape(FormatBytes(row.peak_reserved_bytes))
        << "</td><td class=\"num\">"
        << HtmlEscape(row.max_fragmentation.known() ? FormatPercent(*row.max_fragmentation.value)
                                                    : "n/a")
        << "</td><td class=\"num\">" << row.oom_count << "</td><td>"
        << (row.first_oom ? HtmlEscape(row.first_oom->headline) : std::string("-"))
        << "</td></tr>\n";
  }
  out << "</table></div>\n";
  // Processes that competed for one GPU: each one's peak counts against the others' room.
  if (!job.shared_devices.empty()) {
    out << "<h2>GPUs used by several processes</h2>\n<ul>\n";
    for (const SharedDevice& d : job.shared_devices) {
      out << "<li>" << HtmlEscape(GpuUuidName(d.uuid_hex)) << " on " << HtmlEscape(d.host) << ":";
      for (std::size_t i = 0; i < d.users.size(); ++i) {
        const SharedDevice::User& u = d.users[i];
        out << (i == 0 ? " " : ", ") << Link(pages, u.member, MemberName(job.members[u.member]))
            << " (device " << u.device << ", peak "
            << HtmlEscape(FormatBytes(u.peak_reserved_bytes)) << ")";
      }
      out << "</li>\n";
    }
    out << "</ul>\n";
  }
  out << "</body>\n</html>\n";
}

}  // namespace fragscope::exporter
