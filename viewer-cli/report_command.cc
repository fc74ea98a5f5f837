// fragscope report TRACE [--format text|json] [-o OUT]
#include <cstdio>
#include <iostream>

#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "report_output.h"
#include "trace_loading.h"

namespace fragscope::cli {

namespace {
constexpr char kUsage[] =
    "usage: fragscope report TRACE [--format text|json] [-o OUT] [--fragmentation-floor BYTES]\n"
    "  TRACE   a trace from `fragscope run -o` / FRAGSCOPE_OUTPUT, or a PyTorch snapshot "
    ".pickle\n";
}  // namespace

int ReportCommand(const std::vector<std::string>& args) {
  std::string format_name = "text", out_path = "-", floor;
  bool help = false;
  ArgReader reader("report", args);
  reader.Option("format", "f", &format_name);
  reader.Option("output", "o", &out_path);
  reader.Option("fragmentation-floor", "", &floor);
  reader.Flag("help", &help);
  if (!reader.Parse()) {
    std::fprintf(stderr, "%s\n%s", reader.error().c_str(), kUsage);
    return kExitUsage;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  ReportFormat format;
  if (!ParseReportFormat(format_name, &format)) {
    std::fprintf(stderr, "fragscope report: unknown --format '%s' (text or json)\n%s",
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
  auto loaded = LoadTrace(path, options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "fragscope report: %s\n", std::string(loaded.status().message()).c_str());
    return kExitBadInput;
  }
  if (absl::Status s = WriteReportFile(loaded->summary, format, out_path); !s.ok()) {
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
