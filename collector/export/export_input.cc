#include "fragscope/export/export_input.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace fragscope::exporter {
namespace {

void AddStack(const ProcessModel& model, uint64_t id, ModelSummary* summary) {
  if (id == 0 || summary->stacks.count(id)) return;
  if (std::optional<StackInfo> s = model.FindStack(id)) summary->stacks[id] = *std::move(s);
}

// The stacks a map names: each segment's allocation and each block's.
void AddLayoutStacks(const ProcessModel& model, const std::vector<SegmentLayout>& layouts,
                     ModelSummary* summary) {
  for (const SegmentLayout& s : layouts) {
    AddStack(model, s.stack_id, summary);
    for (const BlockLayout& b : s.blocks) AddStack(model, b.stack_id, summary);
  }
}

}  // namespace

ExportInput CaptureExportInput(const ProcessModel& model, const CaptureOptions& options) {
  ExportInput in;
  in.summary = model.Summarize();
  in.segments_captured = true;
  for (const DeviceSummary& d : in.summary.devices) {
    std::vector<SegmentLayout> layouts =
        model.SegmentLayouts(d.ordinal, options.max_segments_per_device);
    AddLayoutStacks(model, layouts, &in.summary);
    const uint64_t kept = layouts.size();
    if (d.segments > kept) in.segments_left_out[d.ordinal] = d.segments - kept;
    in.segments[d.ordinal] = std::move(layouts);
  }
  // The post-mortems' maps name sites too (blocks long freed by the end).
  for (const OomPostMortem& o : in.summary.ooms) {
    if (o.segments_at_failure != nullptr)
      AddLayoutStacks(model, *o.segments_at_failure, &in.summary);
  }
  return in;
}

}  // namespace fragscope::exporter
