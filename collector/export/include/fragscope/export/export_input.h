// What every export draws from: the summary of a stream plus the inside of the segments each
// device holds (ProcessModel::SegmentLayouts), taken from one model at one moment.
//
// Plain values; safe to read from any thread once built. Units: bytes.
#ifndef FRAGSCOPE_EXPORT_EXPORT_INPUT_H_
#define FRAGSCOPE_EXPORT_EXPORT_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

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
};

struct CaptureOptions {
  // Bounds the size of an export of a process with very many segments; the largest are kept.
  std::size_t max_segments_per_device = 4096;
};

// Summarizes `model` and copies its segment layouts. O(segments + blocks + stacks).
ExportInput CaptureExportInput(const ProcessModel& model, const CaptureOptions& options = {});

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_EXPORT_INPUT_H_
