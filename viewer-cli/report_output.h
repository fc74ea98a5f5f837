// Writes a ModelSummary as text or JSON to a file or stream, symbolizing with debug info. HTML
// needs segment layouts as well and is written by WriteHtmlReportFile.
#ifndef FRAGSCOPE_VIEWER_CLI_REPORT_OUTPUT_H_
#define FRAGSCOPE_VIEWER_CLI_REPORT_OUTPUT_H_

#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "fragscope/export/export_input.h"
#include "fragscope/model/model_summary.h"

namespace fragscope::cli {

enum class ReportFormat { kText, kJson, kHtml };

// `--debug-dir DIR[:DIR...]` of report and export: folders of debug files, found by build-id
// (DIR/.build-id/xx/yyyy.debug) or by the module's file name (DIR/NAME.debug, DIR/NAME), that
// every report and export this process writes then reads (ModuleSymbolizer). Returns false and
// says which on stderr, naming `command`, when one is not a folder (the caller exits 2).
bool UseDebugDirs(const char* command, const std::string& colon_separated);
const std::vector<std::string>& DebugDirs();

// "text" / "json" / "html"; false for anything else.
bool ParseReportFormat(const std::string& name, ReportFormat* format);

// kHtml here has no segment layouts (the page says so); WriteHtmlReportFile has them.
void WriteReport(const ModelSummary& summary, ReportFormat format, std::ostream& out);
// `path` "-" means stdout.
absl::Status WriteReportFile(const ModelSummary& summary, ReportFormat format,
                             const std::string& path);
// One process of a job for WriteJobReport: its summary, where it came from (a trace path; empty
// for a stream whose trace was not kept) and the damage its input had, if any.
struct JobReportInput {
  std::string trace;
  ModelSummary summary;
  std::string damage;
};
// Several processes (the ranks of a job): text, each process's report under a "==== process
// PID (TRACE) ====" line, then the job summary (fragscope/report/job_summary.h); JSON, one
// document with the job summary and every report (collector/REPORT.md "Several processes").
// kHtml is not accepted here (one page per process): callers refuse it first.
void WriteJobReport(const std::vector<JobReportInput>& processes, ReportFormat format,
                    std::ostream& out);
// The order a job's processes are shown in: by rank when every one has a rank, else as given.
// Indices into `processes`.
std::vector<std::size_t> JobOrder(const std::vector<JobReportInput>& processes);
// Several processes as HTML: folder `dir` (created if missing) gets one page per process
// (`pages[i]` is processes[i]'s, with its segment layouts), named NN-rankR-pidP.html, and
// index.html with the job summary linking them.
absl::Status WriteJobHtml(const std::vector<JobReportInput>& processes,
                          const std::vector<exporter::ExportInput>& pages, const std::string& dir);
// For commands that write their files only at the end of a run that may last hours (`run`,
// `attach`): checks each (option, path) before the run starts, and on the first that cannot be
// written prints "fragscope COMMAND: OPTION PATH: reason; choose a writable path" and returns
// false (the caller exits 3). Empty paths (not given) and "-" (stdout) pass.
bool OutputsWritable(const char* command,
                     std::initializer_list<std::pair<const char*, const std::string*>> outputs);
// For commands that read inputs and write a file: true when an (option, path) names an existing
// file that is also one of `inputs` (the same file, also through another name or a link); it
// prints "fragscope COMMAND: OPTION PATH is the input INPUT; writing it would destroy what is
// read: choose another path" (the caller exits 2). Empty paths and "-" pass.
bool OutputIsAnInput(const char* command,
                     std::initializer_list<std::pair<const char*, const std::string*>> outputs,
                     const std::vector<std::string>& inputs);
// The self-contained HTML page (collector/export/html_report.h); `path` "-" means stdout.
absl::Status WriteHtmlReportFile(const exporter::ExportInput& input, const std::string& path);

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_REPORT_OUTPUT_H_
