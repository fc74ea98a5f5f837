#include "fragscope/export/job_index_html.h"

#include <set>
#include <sstream>

#include "absl/strings/str_format.h"
#include "fragscope/export/html_escape.h"

namespace fragscope::exporter {
namespace {

constexpr char kStyle[] = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em; color: #222; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; font-size: 12.5px; }
li.first { font-weight: 600; }
.tag { background: #c0392b; color: #fff; border-radius: 3px; padding: 0 .4em; font-size: 12px; }
)css";

}  // namespace

void RenderJobIndexHtml(const JobSummary& job, const std::vector<std::string>& pages,
                        std::ostream& out) {
  std::ostringstream summary;
  RenderJobSummaryText(job, summary);
  std::set<std::size_t> first;  // members whose OOM came first (per host)
  for (const HostFirstOom& h : job.first_ooms) first.insert(h.oom.member);
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << absl::StrFormat("<title>fragscope job: %d processes, %d OOMs</title>\n", job.process_count,
                         job.oom_count)
      << "<style>" << kStyle << "</style>\n</head>\n<body>\n"
      << absl::StrFormat("<h1>fragscope job: %d processes, %d OOMs in %d of them</h1>\n",
                         job.process_count, job.oom_count, job.processes_with_oom);
  out << "<h2>Processes</h2>\n<ul>\n";
  for (std::size_t i = 0; i < job.members.size(); ++i) {
    const JobMemberInfo& m = job.members[i];
    const std::string name = m.rank ? absl::StrFormat("rank %d, pid %d", *m.rank, m.pid)
                                    : absl::StrFormat("pid %d", m.pid);
    const std::string exe = m.exe.substr(m.exe.rfind('/') + 1);
    out << (first.count(i) ? "<li class=\"first\">" : "<li>") << "<a href=\""
        << HtmlEscape(i < pages.size() ? pages[i] : "") << "\">" << HtmlEscape(name) << "</a> "
        << HtmlEscape(exe) << " on " << HtmlEscape(m.host)
        << absl::StrFormat(" &middot; %d OOM%s", m.oom_count, m.oom_count == 1 ? "" : "s")
        << (first.count(i) ? " <span class=\"tag\">first OOM</span>" : "")
        << (m.resumes ? " &middot; resumed after a collector restart" : "")
        << (m.damage.empty() ? "" : " &middot; damaged input: " + HtmlEscape(m.damage))
        << "</li>\n";
  }
  out << "</ul>\n<h2>Job summary</h2>\n<pre>" << HtmlEscape(summary.str()) << "</pre>\n"
      << "</body>\n</html>\n";
}

}  // namespace fragscope::exporter
