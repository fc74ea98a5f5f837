// Replays a stream into a ProcessModel up to a chosen moment, recording on the way what the
// model's summary does not keep: the program's marks and the memory history, for exports.
//
//   - marks: every Mark frame (seq, time, label), for the Perfetto export's instant events;
//   - history: the events PyTorch's _record_memory_history() records, one per device, in the
//     order the model applies them: `alloc`, `free_requested`, `free_completed` (a
//     sub-allocator's blocks), `segment_alloc` / `segment_free` (driver allocations) and
//     `segment_map` / `segment_unmap` (mappings into VMM reservations, as PyTorch's expandable
//     segments record them). A driver allocation no block was ever reported in (a plain
//     cudaMalloc, a library's workspace) is one allocation filling its segment, as the
//     snapshot shows it: `alloc` right after its `segment_alloc`, `free_requested` and
//     `free_completed` right before its `segment_free`. A snapshot that replaces the state
//     (SnapshotPolicy: an attach, lost events) starts the history again, since what came
//     before no longer matches the state; PyTorch's viewer shows what was live then as present
//     from the start.
//
// Frames go through the same SeqOrderer a live stream does, so the model here applies them in
// the order `fragscope report` does and reaches the same figures. Not thread-safe.
#ifndef FRAGSCOPE_EXPORT_TRACE_REPLAY_H_
#define FRAGSCOPE_EXPORT_TRACE_REPLAY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/model/process_model.h"

namespace fragscope::exporter {

struct MarkEvent {
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  std::string label;  // as the program gave it (at most 72 bytes, possibly cut mid-character)
};

// One entry of PyTorch's device trace. `oom` entries are not recorded here: they come from the
// model's post-mortems (the writer merges them by seq).
struct HistoryEntry {
  enum class Action {
    kAlloc,
    kFreeRequested,
    kFreeCompleted,
    kSegmentAlloc,
    kSegmentFree,
    kSegmentMap,
    kSegmentUnmap
  };
  Action action = Action::kAlloc;
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  uint64_t stack_id = 0;
};
const char* HistoryActionName(HistoryEntry::Action action);

struct ReplayRecord {
  std::vector<MarkEvent> marks;
  std::map<int, std::vector<HistoryEntry>> history;  // by device ordinal (>= 0 only)
  // Entries dropped from the front of a device's history over ReplayOptions::max_history.
  uint64_t history_entries_dropped = 0;
  // The seq of the last replacing snapshot the history restarted at (0: none after the start).
  uint64_t history_restarted_at_seq = 0;
};

struct ReplayOptions {
  // Stop once the event with this seq has been applied (and, when `stop_after_blocks`, the
  // block placements that follow it directly, before any other state event: a sub-allocator
  // grows its pool for a request and then reports the block it was for). Unset: to the end.
  std::optional<uint64_t> stop_at_seq;
  bool stop_after_blocks = false;
  // Most history entries kept per device: the newest, as PyTorch's max_entries keeps them.
  std::size_t max_history = std::size_t{1} << 20;
};

// Calls `next` for frames in stream order until it returns false, applies them through a
// SeqOrderer to `model` and records as above. Returns whether the stop seq was reached (always
// true without one).
using FrameSource = std::function<bool(v1::Frame*)>;
bool ReplayStream(const FrameSource& next, const ReplayOptions& options, ProcessModel& model,
                  ReplayRecord& record);

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_TRACE_REPLAY_H_
