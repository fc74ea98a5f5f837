// fragscope export TRACE [--perfetto OUT.json] [--torch-snapshot OUT.pickle [--at MOMENT]]
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
#include "fragscope/export/trace_replay.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"
#include "fragscope/torch/snapshot_importer.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/output_file.h"
#include "report_output.h"
#include "trace_loading.h"

namespace fragscope::cli {

namespace {
constexpr char kUsage[] =
    "usage: fragscope export TRACE... [--perfetto OUT.json] [--torch-snapshot OUT.pickle]\n"
    "                        [--at end|peak|oom|oom:N] [--fragmentation-floor BYTES]\n"
    "                        [--debug-dir DIR[:DIR...]]\n"
    "  TRACE             a trace from `fragscope run -o`, or a PyTorch snapshot .pickle\n"
    "  --perfetto        Chrome/Perfetto trace-event JSON: memory counters per device, failed\n"
    "                    allocations, OOMs and marks as instant events, times from the trace's\n"
    "                    start (open in ui.perfetto.dev); several TRACEs (a job's ranks): one\n"
    "                    timeline, a process each, aligned by wall clock\n"
    "  --torch-snapshot  PyTorch memory snapshot (pickle protocol 2): the segments and blocks at\n"
    "                    one moment and the alloc/free history up to it (pytorch.org/memory_viz)\n"
    "  --at              that moment: end, peak (of reserved memory), oom (the first OOM that was\n"
    "                    not recovered) or oom:N (the N-th OOM, from 1); default: the first OOM\n"
    "                    that was not recovered, else the end\n"
    "  --debug-dir       folders of debug files for binaries not here or rebuilt, by build-id\n"
    "                    (DIR/.build-id/xx/yyyy.debug) or name (DIR/NAME.debug)\n"
    "  At least one of --perfetto / --torch-snapshot.\n";

// Large enough for any real process; bounds the file for a pathological one.
constexpr std::size_t kTorchMaxSegmentsPerDevice = std::size_t{1} << 20;

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  return WriteOutputFile(path, bytes);  // 0644 at most, whatever the umask
}

// The frames of TRACE in stream order, for a replay (exporter::ReplayStream): a fragscope trace
// read frame by frame, or a PyTorch snapshot converted (as `report` reads them).
class TraceFrames {
 public:
  static absl::StatusOr<std::unique_ptr<TraceFrames>> Open(const std::string& path) {
    auto t = std::unique_ptr<TraceFrames>(new TraceFrames());
    if (LooksLikePickle(path)) {
      auto frames = torch::ImportTorchSnapshotFile(path, torch::ImportOptions{});
      if (!frames.ok()) return frames.status();
      t->converted_ = std::move(*frames);
      return t;
    }
    auto reader = FrameReader::OpenFile(path);
    if (!reader.ok()) return reader.status();
    t->reader_.emplace(std::move(*reader));
    return t;
  }
  exporter::FrameSource Source() {
    return [this](v1::Frame* f) { return Next(f); };
  }
  // After the replay: an unreadable trace (not one whole frame), or "" with `damage` set when
  // it was cut after some frames.
  std::string error() const { return frames_ == 0 ? damage_ : ""; }
  std::string damage() const { return frames_ > 0 ? damage_ : ""; }

 private:
  TraceFrames() = default;
  bool Next(v1::Frame* f) {
    if (!reader_) {
      if (next_ >= converted_.size()) return false;
      *f = converted_[next_++];
      ++frames_;
      return true;
    }
    const FrameReader::Result r = reader_->Next(f);
    if (r == FrameReader::Result::kFrame) {
      ++frames_;
      return true;
    }
    if (r != FrameReader::Result::kEnd) damage_ = reader_->error();
    return false;
  }
  std::optional<FrameReader> reader_;
  std::vector<v1::Frame> converted_;
  std::size_t next_ = 0;
  uint64_t frames_ = 0;
  std::string damage_;
};

// Replays TRACE to `moment` (exporter::CaptureExportInputByReplay); `damage` set as LoadTrace
// sets it.
absl::StatusOr<exporter::ExportInput> ReplayTrace(const std::string& path,
                                                  const ModelOptions& options,
                                                  const exporter::ExportMoment& moment,
                                                  std::string* damage) {
  auto frames = TraceFrames::Open(path);
  if (!frames.ok()) return frames.status();
  exporter::CaptureOptions capture;
  capture.max_segments_per_device = kTorchMaxSegmentsPerDevice;
  exporter::ExportInput input =
      exporter::CaptureExportInputByReplay((*frames)->Source(), options, moment, capture);
  if (!(*frames)->error().empty()) return absl::DataLossError((*frames)->error());
  *damage = (*frames)->damage();
  return input;
}

// Several traces into one Perfetto timeline. Every trace that can be read goes in; exit 3 if
// one could not be read whole (the file is still written from the rest).
int ExportJob(const std::vector<std::string>& paths, const ModelOptions& options,
              const std::string& perfetto_path) {
  std::vector<exporter::ExportInput> inputs;
  std::vector<std::string> problems;
  for (const std::string& path : paths) {
    std::string damage;
    auto input = ReplayTrace(path, options, exporter::ExportMoment{}, &damage);
    if (!input.ok()) {
      problems.push_back(std::string(input.status().message()));
      continue;
    }
    if (!damage.empty()) problems.push_back(damage);  // names the file
    inputs.push_back(std::move(*input));
  }
  if (!inputs.empty()) {
    std::vector<std::unique_ptr<DwarfSymbolizer>> symbolizers;
    std::vector<exporter::PerfettoProcess> processes;
    for (const exporter::ExportInput& in : inputs) {
      symbolizers.push_back(std::make_unique<DwarfSymbolizer>(in.summary, DebugDirs()));
      processes.push_back({&in.summary, symbolizers.back().get(), &in.record.marks});
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
                 perfetto_path.c_str(), inputs.size());
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
  std::string perfetto_path, torch_path, floor, at;
  ArgReader reader("export", args);
  reader.Option("perfetto", "", &perfetto_path);
  reader.Option("torch-snapshot", "", &torch_path);
  reader.Option("at", "", &at);
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
  if (!at.empty() && torch_path.empty()) {
    std::fprintf(stderr,
                 "fragscope export: --at '%s' chooses the moment of --torch-snapshot; the "
                 "Perfetto trace covers the whole run. Add --torch-snapshot OUT.pickle\n%s",
                 at.c_str(), kUsage);
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
  std::string damage;
  auto whole = ReplayTrace(path, options, exporter::ExportMoment{}, &damage);
  if (!whole.ok()) {
    std::fprintf(stderr, "fragscope export: %s\n", std::string(whole.status().message()).c_str());
    return kExitBadInput;
  }
  exporter::ExportInput& input = *whole;
  // The snapshot's moment, decided from the whole run; a moment before the end is a second
  // replay that stops there (the model keeps no past states).
  std::optional<exporter::ExportInput> at_moment;
  if (!torch_path.empty()) {
    auto moment = exporter::ResolveExportMoment(at, input.summary);
    if (!moment.ok()) {
      std::fprintf(stderr, "fragscope export: %s: %s\n", path.c_str(),
                   std::string(moment.status().message()).c_str());
      return absl::IsInvalidArgument(moment.status()) ? kExitUsage : kExitBadInput;
    }
    if (moment->stop_at_seq) {
      std::string again;
      auto replayed = ReplayTrace(path, options, *moment, &again);
      if (!replayed.ok()) {
        std::fprintf(stderr, "fragscope export: %s\n",
                     std::string(replayed.status().message()).c_str());
        return kExitBadInput;
      }
      at_moment = std::move(*replayed);
    } else {
      input.moment = moment->description;
    }
  }
  DwarfSymbolizer symbolizer(input.summary, DebugDirs());

  if (!perfetto_path.empty()) {
    std::ostringstream json;
    exporter::WritePerfettoTrace(input.summary, symbolizer, json, &input.record.marks);
    if (absl::Status s = WriteFile(perfetto_path, json.str()); !s.ok()) {
      std::fprintf(stderr, "fragscope export: %s\n", std::string(s.message()).c_str());
      return kExitBadInput;
    }
    std::fprintf(stderr, "fragscope export: wrote %s (Perfetto / Chrome trace-event JSON)\n",
                 perfetto_path.c_str());
  }
  if (!torch_path.empty()) {
    exporter::TorchSnapshotStats stats;
    const exporter::ExportInput& shown = at_moment ? *at_moment : input;
    std::optional<DwarfSymbolizer> moment_symbolizer;
    if (at_moment) moment_symbolizer.emplace(at_moment->summary, DebugDirs());
    const std::string pickle = exporter::WriteTorchSnapshot(
        shown, moment_symbolizer ? *moment_symbolizer : symbolizer, &stats);
    if (absl::Status s = WriteFile(torch_path, pickle); !s.ok()) {
      std::fprintf(stderr, "fragscope export: %s\n", std::string(s.message()).c_str());
      return kExitBadInput;
    }
    std::fprintf(stderr,
                 "fragscope export: wrote %s (PyTorch memory snapshot, pickle protocol 2) at "
                 "%s: %llu segments, %llu blocks, %llu history entries, %llu OOM entries\n",
                 torch_path.c_str(), shown.moment.c_str(),
                 static_cast<unsigned long long>(stats.segments),
                 static_cast<unsigned long long>(stats.blocks),
                 static_cast<unsigned long long>(stats.history_entries),
                 static_cast<unsigned long long>(stats.oom_entries));
    if (shown.record.history_entries_dropped > 0) {
      std::fprintf(stderr, "  left out: the %llu oldest history entries (the newest %zu kept)\n",
                   static_cast<unsigned long long>(shown.record.history_entries_dropped),
                   exporter::ReplayOptions{}.max_history);
    }
    if (shown.record.history_restarted_at_seq > 0) {
      std::fprintf(stderr,
                   "  history from seq %llu on: the trace resumed from a snapshot there (an "
                   "attach or lost events), and what came before does not lead to its state\n",
                   static_cast<unsigned long long>(shown.record.history_restarted_at_seq));
    }
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
  if (!damage.empty()) {
    std::fprintf(stderr,
                 "fragscope export: warning: %s\n"
                 "  the export covers the trace up to that point\n",
                 damage.c_str());
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace fragscope::cli
