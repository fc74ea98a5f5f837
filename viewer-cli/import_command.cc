// fragscope import SNAPSHOT.pickle -o TRACE
#include <cstdio>
#include <string>
#include <vector>

#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "fragscope/torch/snapshot_importer.h"
#include "fragscope/trace/frame_writer.h"
#include "report_output.h"

namespace fragscope::cli {

namespace {
constexpr char kUsage[] =
    "usage: fragscope import SNAPSHOT.pickle -o TRACE\n"
    "  Converts a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot, or the list\n"
    "  torch.cuda.memory_snapshot() returns) to a fragscope trace, replaying its recorded\n"
    "  history (device_traces) when it has one. `report` also reads .pickle files directly.\n";
}  // namespace

int ImportCommand(const std::vector<std::string>& args) {
  std::string out_path;
  ArgReader reader("import", args);
  reader.Option("output", "o", &out_path);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return *exit;
  if (reader.positionals().size() != 1 || out_path.empty()) {
    std::fprintf(
        stderr, "fragscope import: expected one SNAPSHOT and -o TRACE (fragscope import --help)\n");
    return kExitUsage;
  }
  if (OutputIsAnInput("import", {{"-o", &out_path}}, reader.positionals())) return kExitUsage;
  auto imported =
      torch::ImportTorchSnapshotFileWithSummary(reader.positionals()[0], torch::ImportOptions{});
  if (!imported.ok()) {
    std::fprintf(stderr, "fragscope import: %s\n",
                 std::string(imported.status().message()).c_str());
    return kExitBadInput;
  }
  // Oddities that did not stop the import (a history that does not lead to the snapshot, block
  // sizes that do not add up): the figures depend on them.
  for (const std::string& w : imported->warnings) {
    std::fprintf(stderr, "fragscope import: warning: %s\n", w.c_str());
  }
  const std::vector<v1::Frame>* frames = &imported->frames;
  auto writer = FrameWriter::CreateFile(out_path);
  if (!writer.ok()) {
    std::fprintf(stderr, "fragscope import: %s\n", std::string(writer.status().message()).c_str());
    return kExitBadInput;
  }
  for (const v1::Frame& f : *frames) {
    if (absl::Status s = writer->Write(f); !s.ok()) {
      std::fprintf(stderr, "fragscope import: %s\n", std::string(s.message()).c_str());
      return kExitBadInput;
    }
  }
  if (absl::Status s = writer->Close(); !s.ok()) {
    std::fprintf(stderr, "fragscope import: %s\n", std::string(s.message()).c_str());
    return kExitBadInput;
  }
  std::fprintf(
      stderr, "fragscope import: wrote %zu frames to %s (%s)\n", frames->size(), out_path.c_str(),
      imported->history_replayed ? "the snapshot's history replayed: peaks are the history's"
                                 : "the snapshot's moment: peaks are those at snapshot time");
  return kExitOk;
}

}  // namespace fragscope::cli
