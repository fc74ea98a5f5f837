#include "report_output.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "fragscope/export/html_report.h"
#include "fragscope/report/job_summary.h"
#include "fragscope/report/report_json.h"
#include "fragscope/report/report_text.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"
#include "fragscope/trace/output_file.h"

namespace fragscope::cli {

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
  DwarfSymbolizer symbolizer(summary.modules);
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

void WriteJobReport(const std::vector<JobReportInput>& given, ReportFormat format,
                    std::ostream& out) {
  // In rank order when every process knows its rank (the order its users think in), else as
  // given. Pointers, not copies: a summary holds whole stack tables.
  std::vector<const JobReportInput*> processes;
  for (const JobReportInput& p : given) processes.push_back(&p);
  if (std::all_of(given.begin(), given.end(),
                  [](const JobReportInput& p) { return p.summary.rank.has_value(); })) {
    std::stable_sort(processes.begin(), processes.end(),
                     [](const JobReportInput* a, const JobReportInput* b) {
                       return *a->summary.rank < *b->summary.rank;
                     });
  }
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
      out << absl::StrFormat(
          "==== %sprocess %d%s ====\n",
          p->summary.rank ? absl::StrFormat("rank %d: ", *p->summary.rank) : "", p->summary.pid,
          p->trace.empty() ? "" : " (" + p->trace + ")");
      WriteReport(p->summary, ReportFormat::kText, out);
      out << "\n";
    }
    RenderJobSummaryText(job, out);
  }
  out.flush();
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
  DwarfSymbolizer symbolizer(input.summary.modules);
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
