// fragscope import SNAPSHOT.pickle -o TRACE
#include <cstdio>

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
    "  Converts a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) to a fragscope\n"
    "  trace. `report` also reads .pickle files directly.\n";
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
  auto frames = torch::ImportTorchSnapshotFile(reader.positionals()[0], torch::ImportOptions{});
  if (!frames.ok()) {
    std::fprintf(stderr, "fragscope import: %s\n", std::string(frames.status().message()).c_str());
    return kExitBadInput;
  }
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
  std::fprintf(stderr, "fragscope import: wrote %zu frames to %s\n", frames->size(),
               out_path.c_str());
  return kExitOk;
}

}  // namespace fragscope::cli
