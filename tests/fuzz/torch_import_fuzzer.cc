// Fuzz target: PyTorch snapshot import end to end, as `fragscope import snapshot.pickle` does it:
// bytes -> ImportTorchSnapshotBytes -> ProcessModel::Apply -> Summarize -> RenderJson/RenderText.
//
// Besides surviving, a successful import must have the shape snapshot_importer.h documents:
// Hello first, then DeviceInfo, SymbolizedStack (ids 1..stack_count), one Snapshot (seq 1), and
// FailedAlloc frames numbered from seq 2 (and possibly an End); every stack id used names an
// emitted stack.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "fragscope.pb.h"
#include "fragscope/model/process_model.h"
#include "fragscope/torch/snapshot_importer.h"
#include "fuzz_util.h"
#include "report_check.h"

namespace {

using fragscope::v1::Frame;

void CheckShape(const fragscope::torch::ImportResult& result) {
  const auto& frames = result.frames;
  FUZZ_CHECK(!frames.empty() && frames[0].has_hello(), "first frame is not Hello");
  size_t i = 1;
  while (i < frames.size() && frames[i].has_device()) ++i;
  uint64_t stacks = 0;
  while (i < frames.size() && frames[i].has_symbolized_stack()) {
    ++stacks;
    FUZZ_CHECK(frames[i].symbolized_stack().id() == stacks, "stack %llu has id %llu",
               static_cast<unsigned long long>(stacks),
               static_cast<unsigned long long>(frames[i].symbolized_stack().id()));
    ++i;
  }
  FUZZ_CHECK(stacks == result.stack_count, "%llu stacks emitted, stack_count %llu",
             static_cast<unsigned long long>(stacks),
             static_cast<unsigned long long>(result.stack_count));
  FUZZ_CHECK(i < frames.size() && frames[i].has_snapshot(), "no Snapshot after the stacks");
  const auto& snapshot = frames[i].snapshot();
  FUZZ_CHECK(snapshot.seq() == 1, "snapshot seq %llu",
             static_cast<unsigned long long>(snapshot.seq()));
  for (const auto& b : snapshot.blocks()) {
    FUZZ_CHECK(b.stack_id() <= stacks, "block stack id %llu of %llu",
               static_cast<unsigned long long>(b.stack_id()),
               static_cast<unsigned long long>(stacks));
    FUZZ_CHECK(b.size() == 0 || b.address() + b.size() > b.address(),
               "block [0x%llx, +%llu) wraps around", static_cast<unsigned long long>(b.address()),
               static_cast<unsigned long long>(b.size()));
  }
  for (const auto& a : snapshot.allocations()) {
    FUZZ_CHECK(a.stack_id() <= stacks, "segment stack id %llu of %llu",
               static_cast<unsigned long long>(a.stack_id()),
               static_cast<unsigned long long>(stacks));
  }
  uint64_t seq = 2;
  for (++i; i < frames.size(); ++i, ++seq) {
    // An End frame may close the stream (the import is complete, not a cut trace).
    if (frames[i].has_end() && i + 1 == frames.size()) break;
    // The replayed history (BlockEvent, AllocEvent, FreeEvent) and the OOMs, in seq order.
    const Frame& f = frames[i];
    uint64_t event_seq = 0, stack_id = 0;
    if (f.has_failed()) {
      event_seq = f.failed().seq();
      stack_id = f.failed().stack_id();
    } else if (f.has_block()) {
      event_seq = f.block().seq();
      stack_id = f.block().stack_id();
    } else if (f.has_alloc()) {
      event_seq = f.alloc().seq();
      stack_id = f.alloc().stack_id();
    } else if (f.has_free()) {
      event_seq = f.free().seq();
      stack_id = f.free().stack_id();
    } else {
      FUZZ_CHECK(false, "frame %zu after the Snapshot is not an event of the history", i);
    }
    FUZZ_CHECK(result.history_replayed || f.has_failed(),
               "frame %zu is a history event, but the history was not replayed", i);
    FUZZ_CHECK(event_seq == seq, "event seq %llu, expected %llu",
               static_cast<unsigned long long>(event_seq), static_cast<unsigned long long>(seq));
    FUZZ_CHECK(stack_id <= stacks, "event stack id out of range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<fragscope::torch::ImportResult> result =
      fragscope::torch::ImportTorchSnapshotBytes(bytes, "fuzz.pickle");
  if (!result.ok()) {
    FUZZ_CHECK(result.status().code() == absl::StatusCode::kInvalidArgument ||
                   result.status().code() == absl::StatusCode::kResourceExhausted,
               "undocumented status: %s", result.status().ToString().c_str());
    return 0;
  }
  CheckShape(*result);

  fragscope::ModelOptions options;
  options.timeline_max_points = 8;
  options.max_postmortems = 3;
  options.top_sites = 3;
  fragscope::ProcessModel model(options);
  for (const Frame& frame : result->frames) model.Apply(frame);
  fragscope::fuzz::SummarizeAndRender(model);
  return 0;
}
