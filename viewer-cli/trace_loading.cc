#include "trace_loading.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "fragscope/model/process_model.h"
#include "fragscope/server/stream_session.h"
#include "fragscope/torch/snapshot_importer.h"
#include "fragscope/trace/frame_reader.h"

namespace fragscope::cli {

bool LooksLikePickle(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char first = 0;
  // Every pickle of protocol 2 and later starts with the PROTO opcode.
  return in.get(first) && static_cast<unsigned char>(first) == 0x80;
}

absl::StatusOr<LoadedTrace> LoadTrace(const std::string& path, const ModelOptions& options,
                                      const std::function<void(const ProcessModel&)>& inspect) {
  LoadedTrace loaded;
  if (LooksLikePickle(path)) {
    auto frames = torch::ImportTorchSnapshotFile(path, torch::ImportOptions{});
    if (!frames.ok()) return frames.status();
    ProcessModel model(options);
    for (const v1::Frame& f : *frames) model.Apply(f);
    if (inspect) inspect(model);
    loaded.summary = model.Summarize();
    return loaded;
  }
  auto reader = FrameReader::OpenFile(path);
  if (!reader.ok()) return reader.status();
  StreamSession session(options, nullptr);
  StreamOutcome outcome = session.Run(*reader);
  if (outcome.result == FrameReader::Result::kError && outcome.frames == 0) {
    return absl::DataLossError(outcome.error);
  }
  if (outcome.result != FrameReader::Result::kEnd) loaded.damage = outcome.error;
  if (inspect) inspect(session.model());
  loaded.summary = session.model().Summarize();
  return loaded;
}

std::vector<std::string> LoadTraces(
    const std::vector<std::string>& paths, const ModelOptions& options,
    const std::function<void(const ProcessModel&)>& inspect,
    const std::function<void(const std::string& path, LoadedTrace loaded)>& take) {
  std::vector<std::string> problems;
  for (const std::string& path : paths) {
    absl::StatusOr<LoadedTrace> loaded = LoadTrace(path, options, inspect);
    if (!loaded.ok()) {
      problems.push_back(std::string(loaded.status().message()));
      continue;
    }
    if (!loaded->damage.empty()) problems.push_back(loaded->damage);  // names the file
    take(path, std::move(*loaded));
  }
  return problems;
}

}  // namespace fragscope::cli
