#include "report_output.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "fragscope/export/html_report.h"
#include "fragscope/export/job_index_html.h"
#include "fragscope/report/job_summary.h"
#include "fragscope/report/report_json.h"
#include "fragscope/report/report_text.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"
#include "fragscope/trace/output_file.h"

namespace fragscope::cli {

namespace {
std::vector<std::string>& DebugDirList() {
  static std::vector<std::string> dirs;
  return dirs;
}
}  // namespace

bool UseDebugDirs(const char* command, const std::string& colon_separated) {
  for (absl::string_view d : absl::StrSplit(colon_separated, ':', absl::SkipEmpty())) {
    const std::string dir(d);
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      std::fprintf(stderr,
                   "fragscope %s: --debug-dir %s is not a folder; give the folder that holds the "
                   "debug files (.build-id/xx/yyyy.debug or NAME.debug)\n",
                   command, dir.c_str());
      return false;
    }
    DebugDirList().push_back(dir);
  }
  return true;
}

const std::vector<std::string>& DebugDirs() { return DebugDirList(); }

bool ParseReportFormat(const std::string& name, ReportFormat* format) {
  if (name == "text") {
    *format = ReportFormat::kText;
  } else if (name == "json") {
    *format = ReportFormat::kJson;
  } else if (name == "html") {
    *format = ReportFormat::kHtml;
  } else {
    return false;
  }
  return true;
}

void WriteReport(const ModelSummary& summary, ReportFormat format, std::ostream& out) {
  DwarfSymbolizer symbolizer(summary, DebugDirs());
  if (format == ReportFormat::kJson) {
    RenderJson(summary, symbolizer, out);
  } else if (format == ReportFormat::kHtml) {
    // Without the model there are no segment layouts: the page says the map is missing.
    exporter::ExportInput input;
    input.summary = summary;
    exporter::RenderHtml(input, symbolizer, out);
  } else {
    RenderText(summary, symbolizer, out);
  }
  out.flush();
}

std::vector<std::size_t> JobOrder(const std::vector<JobReportInput>& processes) {
  std::vector<std::size_t> order(processes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (std::all_of(processes.begin(), processes.end(),
                  [](const JobReportInput& p) { return p.summary.rank.has_value(); })) {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return *processes[a].summary.rank < *processes[b].summary.rank;
    });
  }
  return order;
}

void WriteJobReport(const std::vector<JobReportInput>& given, ReportFormat format,
                    std::ostream& out) {
  // Pointers, not copies: a summary holds whole stack tables.
  std::vector<const JobReportInput*> processes;
  for (std::size_t i : JobOrder(given)) processes.push_back(&given[i]);
  std::vector<JobMember> members;
  for (const JobReportInput* p : processes) members.push_back({p->trace, &p->summary, p->damage});
  const JobSummary job = BuildJobSummary(members);
  if (format == ReportFormat::kJson) {
    std::vector<std::string> reports;
    for (const JobReportInput* p : processes) {
      std::ostringstream one;
      WriteReport(p->summary, ReportFormat::kJson, one);
      reports.push_back(one.str());
    }
    RenderJobJson(job, reports, out);
  } else {
    for (const JobReportInput* p : processes) {
      out << absl::StrFormat("==== %sprocess %d%s ====\n",
                             p->summary.rank ? absl::StrFormat("rank %d: ", *p->summary.rank) : "",
                             p->summary.pid, p->trace.empty() ? "" : " (" + p->trace + ")");
      WriteReport(p->summary, ReportFormat::kText, out);
      out << "\n";
    }
    RenderJobSummaryText(job, out);
  }
  out.flush();
}

absl::Status WriteJobHtml(const std::vector<JobReportInput>& processes,
                          const std::vector<exporter::ExportInput>& pages, const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: cannot create the folder for the job's pages: %s; give -o a folder you can write", dir,
        std::strerror(errno)));
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not a folder; several traces as HTML make a folder (index.html and a page per "
        "process): give -o a folder",
        dir));
  }
  std::vector<JobMember> members;
  std::vector<std::string> names;
  for (std::size_t i : JobOrder(processes)) {
    const JobReportInput& p = processes[i];
    const std::string name = p.summary.rank
                                 ? absl::StrFormat("%02d-rank%d-pid%d.html", names.size(),
                                                   *p.summary.rank, p.summary.pid)
                                 : absl::StrFormat("%02d-pid%d.html", names.size(), p.summary.pid);
    if (absl::Status s = WriteHtmlReportFile(pages[i], dir + "/" + name); !s.ok()) return s;
    members.push_back({p.trace, &p.summary, p.damage});
    names.push_back(name);
  }
  std::ostringstream index;
  exporter::RenderJobIndexHtml(BuildJobSummary(members), names, index);
  return WriteOutputFile(dir + "/index.html", index.str());
}

bool OutputsWritable(const char* command,
                     std::initializer_list<std::pair<const char*, const std::string*>> outputs) {
  for (const auto& [option, path] : outputs) {
    if (path->empty() || *path == "-") continue;
    if (absl::Status st = CheckOutputFileWritable(*path); !st.ok()) {
      std::fprintf(stderr, "fragscope %s: %s %s\n", command, option,
                   std::string(st.message()).c_str());
      return false;
    }
  }
  return true;
}

bool OutputIsAnInput(const char* command,
                     std::initializer_list<std::pair<const char*, const std::string*>> outputs,
                     const std::vector<std::string>& inputs) {
  for (const auto& [option, path] : outputs) {
    struct stat out;
    if (path->empty() || *path == "-" || stat(path->c_str(), &out) != 0) continue;
    for (const std::string& input : inputs) {
      struct stat in;
      if (stat(input.c_str(), &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
        std::fprintf(stderr,
                     "fragscope %s: %s %s is the input %s; writing it would destroy what is "
                     "read: choose another path\n",
                     command, option, path->c_str(), input.c_str());
        return true;
      }
    }
  }
  return false;
}

absl::Status WriteReportFile(const ModelSummary& summary, ReportFormat format,
                             const std::string& path) {
  if (path == "-") {
    WriteReport(summary, format, std::cout);
    return absl::OkStatus();
  }
  std::ostringstream out;
  WriteReport(summary, format, out);
  return WriteOutputFile(path, out.str());  // 0644 at most, whatever the umask
}

}  // namespace fragscope::cli

namespace fragscope::cli {

absl::Status WriteHtmlReportFile(const exporter::ExportInput& input, const std::string& path) {
  DwarfSymbolizer symbolizer(input.summary, DebugDirs());
  if (path == "-") {
    exporter::RenderHtml(input, symbolizer, std::cout);
    std::cout.flush();
    return absl::OkStatus();
  }
  std::ostringstream out;
  exporter::RenderHtml(input, symbolizer, out);
  return WriteOutputFile(path, out.str());
}

}  // namespace fragscope::cli
