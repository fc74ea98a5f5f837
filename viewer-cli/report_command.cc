// fragscope report TRACE [--format text|json|html] [-o OUT]
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <sstream>
#include <utility>

#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "fragscope/trace/output_file.h"
#include "report_output.h"
#include "trace_loading.h"

namespace fragscope::cli {

namespace {
// The page draws every segment as SVG; beyond this many per device only the largest are drawn.
constexpr std::size_t kHtmlMaxSegmentsPerDevice = 1024;
constexpr char kUsage[] =
    "usage: fragscope report TRACE... [--format text|json|html] [-o OUT]\n"
    "                        [--fragmentation-floor BYTES] [--debug-dir DIR[:DIR...]]\n"
    "  TRACE   a trace from `fragscope run -o` / FRAGSCOPE_OUTPUT, or a PyTorch snapshot "
    ".pickle;\n"
    "          several (the ranks of a job): each one's report, then the job summary (which\n"
    "          process ran out of memory first)\n"
    "  html    one self-contained page (segment map, timeline, OOM post-mortems); use -o FILE\n"
    "          (not written to a terminal),\n"
    "          or for several TRACEs -o DIR: index.html (the job) and a page per process\n"
    "  --debug-dir  folders of debug files for binaries not here or rebuilt, found by build-id\n"
    "          (DIR/.build-id/xx/yyyy.debug) or by name (DIR/NAME.debug); without them and\n"
    "          without symbols stored in the trace, such frames are module+offset\n";

// HTML draws the segment map, which needs the model's segment layouts, not just the summary:
// what LoadTrace should take from the model into `*page` (nothing for text and JSON).
std::function<void(const ProcessModel&)> HtmlCapture(ReportFormat format,
                                                     exporter::ExportInput* page) {
  if (format != ReportFormat::kHtml) return nullptr;
  return [page](const ProcessModel& model) {
    exporter::CaptureOptions capture_options;
    capture_options.max_segments_per_device = kHtmlMaxSegmentsPerDevice;
    *page = exporter::CaptureExportInput(model, capture_options);
  };
}

// Several traces: every one that can be read is reported, whatever the others do; exit 3 if
// any could not be read or was damaged.
int ReportJob(const std::vector<std::string>& paths, ReportFormat format,
              const ModelOptions& options, const std::string& out_path) {
  std::vector<JobReportInput> processes;
  std::vector<exporter::ExportInput> pages;  // HTML only: each page's segment layouts
  exporter::ExportInput page;                // the trace being loaded
  const std::vector<std::string> problems = LoadTraces(
      paths, options, HtmlCapture(format, &page), [&](const std::string& path, LoadedTrace loaded) {
        processes.push_back({path, std::move(loaded.summary), loaded.damage});
        // Moved, then reset (std::exchange with a temporary tripped gcc -O3's
        // maybe-uninitialized warning in Release builds).
        pages.push_back(std::move(page));
        page = exporter::ExportInput();
      });
  if (!processes.empty()) {
    absl::Status written;
    if (format == ReportFormat::kHtml) {
      written = WriteJobHtml(processes, pages, out_path);
    } else {
      std::ostringstream text;
      WriteJobReport(processes, format, text);
      written = out_path == "-" ? (std::cout << text.str() << std::flush, absl::OkStatus())
                                : WriteOutputFile(out_path, text.str());
    }
    if (!written.ok()) {
      std::fprintf(stderr, "fragscope report: %s\n", std::string(written.message()).c_str());
      return kExitBadInput;
    }
    if (format == ReportFormat::kHtml) {
      std::fprintf(stderr, "fragscope report: wrote %s/index.html and a page per process\n",
                   out_path.c_str());
    }
  }
  for (const std::string& p : problems) std::fprintf(stderr, "fragscope report: %s\n", p.c_str());
  if (!problems.empty()) {
    std::fprintf(stderr,
                 "fragscope report: %zu of %zu traces could not be read whole; the report %s\n",
                 problems.size(), paths.size(),
                 processes.empty() ? "was not written" : "covers what could be read");
    return kExitBadInput;
  }
  return kExitOk;
}
}  // namespace

int ReportCommand(const std::vector<std::string>& args) {
  std::string format_name = "text", out_path = "-", floor;
  ArgReader reader("report", args);
  reader.Option("format", "f", &format_name);
  reader.Option("output", "o", &out_path);
  reader.Option("fragmentation-floor", "", &floor);
  std::string debug_dir;
  reader.Option("debug-dir", "", &debug_dir);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return *exit;
  if (!UseDebugDirs("report", debug_dir)) return kExitUsage;
  ReportFormat format;
  if (!ParseReportFormat(format_name, &format)) {
    std::fprintf(
        stderr,
        "fragscope report: unknown --format '%s' (text, json or html) (fragscope report --help)\n",
        format_name.c_str());
    return kExitUsage;
  }
  if (reader.positionals().empty() || reader.saw_dashdash()) {
    std::fprintf(stderr, "fragscope report: expected a TRACE (fragscope report --help)\n");
    return kExitUsage;
  }
  if (reader.positionals().size() > 1 && format == ReportFormat::kHtml && out_path == "-") {
    std::fprintf(stderr,
                 "fragscope report: several traces as HTML make a folder (index.html and a page "
                 "per process): give -o DIR (fragscope report --help)\n");
    return kExitUsage;
  }
  // A page of markup and inline SVG scrolling by is of no use to anyone; a pipe or a redirect
  // (`> report.html`, `| gzip`) still gets it.
  if (format == ReportFormat::kHtml && out_path == "-" && isatty(STDOUT_FILENO) == 1) {
    std::fprintf(stderr,
                 "fragscope report: HTML to a terminal is unreadable: add -o report.html (or "
                 "redirect stdout to a file)\n");
    return kExitUsage;
  }
  if (OutputIsAnInput("report", {{"-o", &out_path}}, reader.positionals())) return kExitUsage;
  ModelOptions options;
  if (!floor.empty()) {
    auto bytes = ArgReader::ParseBytes(floor);
    if (!bytes) {
      std::fprintf(stderr,
                   "fragscope report: --fragmentation-floor '%s' is not a byte count "
                   "(e.g. 64M)\n",
                   floor.c_str());
      return kExitUsage;
    }
    options.fragmentation_floor_bytes = *bytes;
  }
  if (reader.positionals().size() > 1) {
    return ReportJob(reader.positionals(), format, options, out_path);
  }
  const std::string& path = reader.positionals()[0];
  exporter::ExportInput html_input;
  auto loaded = LoadTrace(path, options, HtmlCapture(format, &html_input));
  if (!loaded.ok()) {
    std::fprintf(stderr, "fragscope report: %s\n", std::string(loaded.status().message()).c_str());
    return kExitBadInput;
  }
  absl::Status written = format == ReportFormat::kHtml
                             ? WriteHtmlReportFile(html_input, out_path)
                             : WriteReportFile(loaded->summary, format, out_path);
  if (absl::Status s = written; !s.ok()) {
    std::fprintf(stderr, "fragscope report: %s\n", std::string(s.message()).c_str());
    return kExitBadInput;
  }
  if (!loaded->damage.empty()) {
    std::fprintf(stderr,
                 "fragscope report: warning: %s\n"
                 "  the report above covers the trace up to that point\n",
                 loaded->damage.c_str());
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace fragscope::cli
