// The collector model of one process stream.
//
// Usage (what `fragscope run/report` does):
//
//   fragscope::ProcessModel model(options);
//   fragscope::v1::Frame frame;
//   while (reader.Next(&frame) == FrameReader::Result::kFrame) model.Apply(frame);
//   fragscope::ModelSummary summary = model.Summarize();
//   fragscope::RenderText(summary, symbolizer, std::cout);   // fragscope/report/report_text.h
//
// The model rebuilds, per device, the segments this process holds and the blocks inside them
// exactly as collector/REPORT.md defines it, keeps gap summaries so metrics are O(log n) per
// event, and runs the OOM analysis inline: a failure's class is decided from the state at the
// failure, not at the end. Memory is O(live blocks + distinct stacks + kept post-mortems), not
// O(events). The rules it applies are written down in collector/REPORT.md.
//
// Thread-safety: not thread-safe; one thread applies frames and summarizes (a live view that
// reads from another thread must serialize with Apply). Summaries are independent copies.
#ifndef FRAGSCOPE_MODEL_PROCESS_MODEL_H_
#define FRAGSCOPE_MODEL_PROCESS_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/model/model_options.h"
#include "fragscope/model/model_summary.h"
#include "fragscope/model/segment_layout.h"
#include "fragscope/trace/hot_frame_decoder.h"

namespace fragscope {

class ProcessModel {
 public:
  explicit ProcessModel(ModelOptions options = {});
  ~ProcessModel();
  ProcessModel(const ProcessModel&) = delete;
  ProcessModel& operator=(const ProcessModel&) = delete;
  ProcessModel(ProcessModel&&) noexcept;
  ProcessModel& operator=(ProcessModel&&) noexcept;

  // Applies the next frame of the stream (frames in stream order; `seq` decides nothing here,
  // the agent already ordered them). Never fails: what cannot be placed is counted and reported.
  void Apply(const v1::Frame& frame);
  // The same for an event frame as decoded (ArenaFrameReader::Next(frame, event)): exactly what
  // Apply of the frame StoreHotEvent would build from it does, without building it.
  void Apply(const HotEvent& event);

  // The state now. Failures still waiting for a retry are judged as if the stream ended here
  // (unrecovered), which is what a report of a cut trace wants; a later Apply may still mark
  // them recovered. Cost: O(devices x (sites + pools) + kept post-mortems).
  ModelSummary Summarize() const;

  // The segments of `device` that hold memory now (those DeviceSummary::segments counts), in
  // address order, at most `max_segments` of them (the largest by backing bytes are kept when
  // there are more). For segment maps and snapshot exports. Cost: O(segments + their blocks).
  std::vector<SegmentLayout> SegmentLayouts(int device, std::size_t max_segments) const;

  // Stack `id` as reports show it (StackIndex::Reported, as in Summarize's `stacks`); nullopt
  // for 0 or an id that never arrived. Lets exports name the sites of blocks a summary does not
  // list.
  std::optional<StackInfo> FindStack(uint64_t id) const;
  // Every distinct return address of the stream's stacks, ascending, and the module map: what
  // a trace's SymbolTable is made from (collector/symbolize/symbol_table_builder.h).
  std::vector<uint64_t> StackPcs() const;
  const std::vector<ModuleInfo>& Modules() const;

  const ModelOptions& options() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_PROCESS_MODEL_H_
