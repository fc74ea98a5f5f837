// What every export draws from: the summary of a stream plus the inside of the segments each
// device holds (ProcessModel::SegmentLayouts), taken from one model at one moment.
//
// Plain values; safe to read from any thread once built. Units: bytes.
#ifndef FRAGSCOPE_EXPORT_EXPORT_INPUT_H_
#define FRAGSCOPE_EXPORT_EXPORT_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "fragscope/export/trace_replay.h"
#include "fragscope/model/model_summary.h"
#include "fragscope/model/process_model.h"
#include "fragscope/model/segment_layout.h"

namespace fragscope::exporter {

struct ExportInput {
  // `summary.stacks` also holds every stack a segment or block below names, so exports can
  // name the allocation site of any block with SymbolizeStack().
  ModelSummary summary;
  std::map<int, std::vector<SegmentLayout>> segments;  // by device ordinal, address order
  // Segments a device holds that are not in `segments` (over max_segments_per_device).
  std::map<int, uint64_t> segments_left_out;
  // False when built from a summary alone (no model at hand): `segments` is then empty because
  // nothing was asked, not because the devices hold no segments.
  bool segments_captured = false;
  // Marks and the memory history up to the moment (CaptureExportInputByReplay); empty and
  // false otherwise. `summary.stacks` holds the history's stacks too.
  ReplayRecord record;
  bool history_recorded = false;
  // What moment the segments show, in words ("the end of the trace", "the peak ...").
  std::string moment = "the end of the trace";
};

struct CaptureOptions {
  // Bounds the size of an export of a process with very many segments; the largest are kept.
  std::size_t max_segments_per_device = 4096;
};

// Summarizes `model` and copies its segment layouts. O(segments + blocks + stacks).
ExportInput CaptureExportInput(const ProcessModel& model, const CaptureOptions& options = {});

// The moment `export --torch-snapshot --at` shows, resolved against the whole stream's summary.
struct ExportMoment {
  std::optional<uint64_t> stop_at_seq;  // unset: the end
  bool stop_after_blocks = false;       // the peak: with the block the growth was for
  std::string description;
};
// `at`: "end", "peak" (the largest peak reserved of any device), "oom" (the first OOM
// post-mortem that was not recovered), "oom:N" (the N-th post-mortem, from 1), or "" (the
// first unrecovered OOM, else the end). Errors name the value and what exists to choose from.
absl::StatusOr<ExportMoment> ResolveExportMoment(std::string_view at, const ModelSummary& whole);

// Replays a stream (frames from `next`, in stream order) into a fresh model up to `moment`,
// recording marks and history on the way, and captures it there.
ExportInput CaptureExportInputByReplay(const FrameSource& next, const ModelOptions& model_options,
                                       const ExportMoment& moment,
                                       const CaptureOptions& options = {});

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_EXPORT_INPUT_H_
