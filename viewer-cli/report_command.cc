// fragscope report TRACE [--format text|json|html] [-o OUT]
#include <cstdio>
#include <functional>
#include <iostream>

#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "report_output.h"
#include "trace_loading.h"

namespace fragscope::cli {

namespace {
// The page draws every segment as SVG; beyond this many per device only the largest are drawn.
constexpr std::size_t kHtmlMaxSegmentsPerDevice = 1024;
constexpr char kUsage[] =
    "usage: fragscope report TRACE [--format text|json|html] [-o OUT]\n"
    "                        [--fragmentation-floor BYTES]\n"
    "  TRACE   a trace from `fragscope run -o` / FRAGSCOPE_OUTPUT, or a PyTorch snapshot "
    ".pickle\n"
    "  html    one self-contained page (segment map, timeline, OOM post-mortems); use -o\n";
}  // namespace

int ReportCommand(const std::vector<std::string>& args) {
  std::string format_name = "text", out_path = "-", floor;
  ArgReader reader("report", args);
  reader.Option("format", "f", &format_name);
  reader.Option("output", "o", &out_path);
  reader.Option("fragmentation-floor", "", &floor);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return *exit;
  ReportFormat format;
  if (!ParseReportFormat(format_name, &format)) {
    std::fprintf(stderr, "fragscope report: unknown --format '%s' (text, json or html)\n%s",
                 format_name.c_str(), kUsage);
    return kExitUsage;
  }
  if (reader.positionals().size() != 1 || reader.saw_dashdash()) {
    std::fprintf(stderr, "fragscope report: expected exactly one TRACE\n%s", kUsage);
    return kExitUsage;
  }
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
  const std::string& path = reader.positionals()[0];
  // HTML draws the segment map, which needs the model's segment layouts, not just the summary.
  exporter::ExportInput html_input;
  std::function<void(const ProcessModel&)> capture;
  if (format == ReportFormat::kHtml) {
    capture = [&](const ProcessModel& model) {
      exporter::CaptureOptions capture_options;
      capture_options.max_segments_per_device = kHtmlMaxSegmentsPerDevice;
      html_input = exporter::CaptureExportInput(model, capture_options);
    };
  }
  auto loaded = LoadTrace(path, options, capture);
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
