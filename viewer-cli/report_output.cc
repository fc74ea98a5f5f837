#include "report_output.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "absl/strings/str_format.h"
#include "fragscope/export/html_report.h"
#include "fragscope/report/report_json.h"
#include "fragscope/report/report_text.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"

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

absl::Status WriteReportFile(const ModelSummary& summary, ReportFormat format,
                             const std::string& path) {
  if (path == "-") {
    WriteReport(summary, format, std::cout);
    return absl::OkStatus();
  }
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot write report: %s", path, std::strerror(errno)));
  }
  WriteReport(summary, format, out);
  if (!out) return absl::DataLossError(absl::StrFormat("%s: write failed", path));
  return absl::OkStatus();
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
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot write report: %s", path, std::strerror(errno)));
  }
  exporter::RenderHtml(input, symbolizer, out);
  out.flush();
  if (!out) return absl::DataLossError(absl::StrFormat("%s: write failed", path));
  return absl::OkStatus();
}

}  // namespace fragscope::cli
