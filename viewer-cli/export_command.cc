// fragscope export TRACE [--perfetto OUT.json] [--torch-snapshot OUT.pickle]
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "fragscope/export/export_input.h"
#include "fragscope/export/perfetto_trace.h"
#include "fragscope/export/torch_snapshot_writer.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"
#include "fragscope/trace/output_file.h"
#include "report_output.h"
#include "trace_loading.h"

namespace fragscope::cli {

namespace {
constexpr char kUsage[] =
    "usage: fragscope export TRACE... [--perfetto OUT.json] [--torch-snapshot OUT.pickle]\n"
    "                        [--fragmentation-floor BYTES] [--debug-dir DIR[:DIR...]]\n"
    "  TRACE             a trace from `fragscope run -o`, or a PyTorch snapshot .pickle\n"
    "  --perfetto        Chrome/Perfetto trace-event JSON: memory counters per device, failed\n"
    "                    allocations and OOMs as instant events (open in ui.perfetto.dev);\n"
    "                    several TRACEs (a job's ranks): one timeline, a process each\n"
    "  --torch-snapshot  PyTorch memory snapshot (pickle protocol 2) of the segments and blocks\n"
    "                    at the end of the trace (open in pytorch.org/memory_viz)\n"
    "  --debug-dir       folders of debug files for binaries not here or rebuilt, by build-id\n"
    "                    (DIR/.build-id/xx/yyyy.debug) or name (DIR/NAME.debug)\n"
    "  At least one of --perfetto / --torch-snapshot.\n";

// Large enough for any real process; bounds the file for a pathological one.
constexpr std::size_t kTorchMaxSegmentsPerDevice = std::size_t{1} << 20;

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  return WriteOutputFile(path, bytes);  // 0644 at most, whatever the umask
}

// Several traces into one Perfetto timeline. Every trace that can be read goes in; exit 3 if
// one could not be read whole (the file is still written from the rest).
int ExportJob(const std::vector<std::string>& paths, const ModelOptions& options,
              const std::string& perfetto_path) {
  std::vector<ModelSummary> summaries;
  const std::vector<std::string> problems =
      LoadTraces(paths, options, nullptr, [&](const std::string&, LoadedTrace loaded) {
        summaries.push_back(std::move(loaded.summary));
      });
  if (!summaries.empty()) {
    std::vector<std::unique_ptr<DwarfSymbolizer>> symbolizers;
    std::vector<exporter::PerfettoProcess> processes;
    for (const ModelSummary& s : summaries) {
      symbolizers.push_back(std::make_unique<DwarfSymbolizer>(s, DebugDirs()));
      processes.push_back({&s, symbolizers.back().get()});
    }
    std::ostringstream json;
    exporter::WritePerfettoJobTrace(processes, json);
    if (absl::Status s = WriteFile(perfetto_path, json.str()); !s.ok()) {
      std::fprintf(stderr, "fragscope export: %s\n", std::string(s.message()).c_str());
      return kExitBadInput;
    }
    std::fprintf(stderr,
                 "fragscope export: wrote %s (Perfetto / Chrome trace-event JSON, %zu "
                 "processes)\n",
                 perfetto_path.c_str(), summaries.size());
  }
  for (const std::string& p : problems) std::fprintf(stderr, "fragscope export: %s\n", p.c_str());
  if (!problems.empty()) {
    std::fprintf(stderr, "fragscope export: %zu of %zu traces could not be read whole\n",
                 problems.size(), paths.size());
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace

int ExportCommand(const std::vector<std::string>& args) {
  std::string perfetto_path, torch_path, floor;
  ArgReader reader("export", args);
  reader.Option("perfetto", "", &perfetto_path);
  reader.Option("torch-snapshot", "", &torch_path);
  reader.Option("fragmentation-floor", "", &floor);
  std::string debug_dir;
  reader.Option("debug-dir", "", &debug_dir);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return *exit;
  if (!UseDebugDirs("export", debug_dir)) return kExitUsage;
  if (reader.positionals().empty() || reader.saw_dashdash()) {
    std::fprintf(stderr, "fragscope export: expected a TRACE (fragscope export --help)\n");
    return kExitUsage;
  }
  if (reader.positionals().size() > 1 && !torch_path.empty()) {
    std::fprintf(stderr,
                 "fragscope export: --torch-snapshot holds one process: give one TRACE (got "
                 "%zu), or use --perfetto for the job (fragscope export --help)\n",
                 reader.positionals().size());
    return kExitUsage;
  }
  if (perfetto_path.empty() && torch_path.empty()) {
    std::fprintf(stderr,
                 "fragscope export: say what to write: --perfetto and/or --torch-snapshot "
                 "(fragscope export --help)\n");
    return kExitUsage;
  }
  if (OutputIsAnInput("export", {{"--perfetto", &perfetto_path}, {"--torch-snapshot", &torch_path}},
                      reader.positionals())) {
    return kExitUsage;
  }
  ModelOptions options;
  if (!floor.empty()) {
    auto bytes = ArgReader::ParseBytes(floor);
    if (!bytes) {
      std::fprintf(stderr,
                   "fragscope export: --fragmentation-floor '%s' is not a byte count (e.g. 64M)\n",
                   floor.c_str());
      return kExitUsage;
    }
    options.fragmentation_floor_bytes = *bytes;
  }

  if (reader.positionals().size() > 1) {
    return ExportJob(reader.positionals(), options, perfetto_path);
  }
  const std::string& path = reader.positionals()[0];
  exporter::ExportInput input;
  auto loaded = LoadTrace(path, options, [&](const ProcessModel& model) {
    exporter::CaptureOptions capture;
    capture.max_segments_per_device = kTorchMaxSegmentsPerDevice;
    input = exporter::CaptureExportInput(model, capture);
  });
  if (!loaded.ok()) {
    std::fprintf(stderr, "fragscope export: %s\n", std::string(loaded.status().message()).c_str());
    return kExitBadInput;
  }
  DwarfSymbolizer symbolizer(input.summary, DebugDirs());

  if (!perfetto_path.empty()) {
    std::ostringstream json;
    exporter::WritePerfettoTrace(input.summary, symbolizer, json);
    if (absl::Status s = WriteFile(perfetto_path, json.str()); !s.ok()) {
      std::fprintf(stderr, "fragscope export: %s\n", std::string(s.message()).c_str());
      return kExitBadInput;
    }
    std::fprintf(stderr, "fragscope export: wrote %s (Perfetto / Chrome trace-event JSON)\n",
                 perfetto_path.c_str());
  }
  if (!torch_path.empty()) {
    exporter::TorchSnapshotStats stats;
    const std::string pickle = exporter::WriteTorchSnapshot(input, symbolizer, &stats);
    if (absl::Status s = WriteFile(torch_path, pickle); !s.ok()) {
      std::fprintf(stderr, "fragscope export: %s\n", std::string(s.message()).c_str());
      return kExitBadInput;
    }
    std::fprintf(stderr,
                 "fragscope export: wrote %s (PyTorch memory snapshot, pickle protocol 2): "
                 "%llu segments, %llu blocks, %llu OOM entries\n",
                 torch_path.c_str(), static_cast<unsigned long long>(stats.segments),
                 static_cast<unsigned long long>(stats.blocks),
                 static_cast<unsigned long long>(stats.oom_entries));
    if (stats.opaque_segments_left_out > 0) {
      std::fprintf(stderr,
                   "  left out: %llu opaque segments (%s) whose inside fragscope cannot see; "
                   "the PyTorch adapter makes them visible\n",
                   static_cast<unsigned long long>(stats.opaque_segments_left_out),
                   FormatBytes(stats.opaque_bytes_left_out).c_str());
    }
    if (stats.other_bytes_left_out > 0) {
      std::fprintf(stderr,
                   "  left out: %s of memory-pool, managed and graph memory (not segments a "
                   "snapshot can show)\n",
                   FormatBytes(stats.other_bytes_left_out).c_str());
    }
    if (stats.segments_left_out > 0) {
      std::fprintf(stderr, "  left out: %llu smaller segments over the per-device limit\n",
                   static_cast<unsigned long long>(stats.segments_left_out));
    }
  }
  if (!loaded->damage.empty()) {
    std::fprintf(stderr,
                 "fragscope export: warning: %s\n"
                 "  the export covers the trace up to that point\n",
                 loaded->damage.c_str());
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace fragscope::cli
