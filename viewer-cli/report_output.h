// Writes a ModelSummary as text or JSON to a file or stream, symbolizing with debug info.
#ifndef FRAGSCOPE_VIEWER_CLI_REPORT_OUTPUT_H_
#define FRAGSCOPE_VIEWER_CLI_REPORT_OUTPUT_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "fragscope/model/model_summary.h"

namespace fragscope::cli {

enum class ReportFormat { kText, kJson };

// "text" / "json"; false for anything else.
bool ParseReportFormat(const std::string& name, ReportFormat* format);

void WriteReport(const ModelSummary& summary, ReportFormat format, std::ostream& out);
// `path` "-" means stdout.
absl::Status WriteReportFile(const ModelSummary& summary, ReportFormat format,
                             const std::string& path);

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_REPORT_OUTPUT_H_
