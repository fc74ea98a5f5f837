// Loads a saved trace (fragscope .fst, or a PyTorch snapshot .pickle) into a ProcessModel, the
// same way a live stream is applied.
#ifndef FRAGSCOPE_VIEWER_CLI_TRACE_LOADING_H_
#define FRAGSCOPE_VIEWER_CLI_TRACE_LOADING_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fragscope/model/model_options.h"
#include "fragscope/model/model_summary.h"
#include "fragscope/model/process_model.h"

namespace fragscope::cli {

struct LoadedTrace {
  ModelSummary summary;
  // Set when the input was damaged but a partial result was read (truncated trace): the
  // message says where; callers warn and exit 3 after printing what they have.
  std::string damage;
};

// Errors (unreadable, not a trace, newer format, malformed pickle) come back as a status whose
// message names the file and what to do. `inspect`, when set, is called with the model once
// every frame is applied (before the summary is taken), for callers that need more than the
// summary (segment layouts for the HTML report and exports).
absl::StatusOr<LoadedTrace> LoadTrace(
    const std::string& path, const ModelOptions& options,
    const std::function<void(const ProcessModel&)>& inspect = nullptr);

// Several traces, in order: `take(path, loaded)` for each that could be read (a damaged one
// too, with its damage), `inspect` as in LoadTrace for each. Returns one message per trace that
// could not be read or was damaged (each names its file); the caller reports them and exits 3.
std::vector<std::string> LoadTraces(
    const std::vector<std::string>& paths, const ModelOptions& options,
    const std::function<void(const ProcessModel&)>& inspect,
    const std::function<void(const std::string& path, LoadedTrace loaded)>& take);

// True when `path` looks like a PyTorch snapshot (by content, not by name).
bool LooksLikePickle(const std::string& path);

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_TRACE_LOADING_H_
