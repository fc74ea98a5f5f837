// Converts a PyTorch memory snapshot (the pickle `torch.cuda.memory._dump_snapshot()` writes)
// into fragscope frames, so the same model and reports serve imported and traced memory.
//
// What comes out, in this order (all on one imported stream):
//   1. Hello (backend BACKEND_IMPORTED).
//   2. DeviceInfo for every device a segment or a trace list names (total unknown: 0).
//   3. SymbolizedStack for every distinct Python/C++ stack a segment, block or OOM carries.
//   4. One Snapshot (reason REASON_IMPORTED, seq 1): the allocator state at dump time, or, when
//      the history is replayed (step 5), the state before the history's first entry.
//      - A plain segment (cudaMalloc) is one LiveAllocation (kind DEVICE, api API_torch_snapshot,
//        size total_size, stream, pool 0).
//      - An expandable segment is reported by PyTorch as one entry per contiguous mapped range.
//        Each becomes a LiveReservation over that range, one synthetic LiveHandle (ids 1, 2, ...,
//        unique within the import) of the same size, and a LiveMapping of the handle over the
//        whole range, which is how the live agent would see cuMemAddressReserve + cuMemCreate +
//        cuMemMap. The reservation's unmapped tail and the page-by-page handles are not in the
//        snapshot and are not invented.
//      - One LiveBlock per active block: active_allocated, and active_pending_free (or the older
//        spelling active_awaiting_free) with pending_free = true. `inactive` blocks are free
//        ranges and are not emitted. Block pool: 0 for PyTorch's default pool id (0, 0); other
//        segment_pool_id tuples are numbered 1, 2, ... in order of first appearance.
//   5. The history (device_traces, all devices merged by time_us), seq 2, 3, ...: `alloc` ->
//      BlockEvent OP_ALLOC, `free_requested` -> OP_FREE_PENDING, `free_completed` -> OP_FREE,
//      `segment_alloc` -> AllocEvent (its stack: one frame naming PyTorch's allocator, so the
//      segment is opaque until its first block, as live), `segment_free` -> FreeEvent, and
//      `oom` -> FailedAlloc: api API_torch_snapshot, result 2 (cudaErrorMemoryAllocation),
//      from_sub_allocator = true, has_mem_info = true with device_free_bytes when the entry
//      says how much was free (device_total_bytes stays 0: the snapshot does not record it).
//      The state before the first entry is found by undoing the entries from the snapshot's
//      state, newest first. When an entry does not fit that state, or the history maps or
//      unmaps expandable segments (segment_map / segment_unmap), the history is not replayed
//      (a warning names the entry): the Snapshot frame is the dump's state and only the `oom`
//      entries follow it. Other actions (snapshot, annotate) change no memory and are skipped.
//      Trace times are the snapshot's own clock, microseconds converted to nanoseconds.
// A bare list (what torch.cuda.memory_snapshot() returns: the segments alone) is read as the
// `segments` of a snapshot without device_traces.
//
// Legacy (2023) files whose blocks carry `history: [{addr, real_size, frames}]` and no
// `address` get block addresses by walking each segment from its `address` in block order
// (blocks tile their segment exactly); a history address that disagrees is reported as a
// warning and the walk wins.
//
// Thread-safety: the functions below share no state; call them from any threads at once.
// Units: bytes for sizes and addresses, nanoseconds for frame times.
#ifndef FRAGSCOPE_TORCH_SNAPSHOT_IMPORTER_H_
#define FRAGSCOPE_TORCH_SNAPSHOT_IMPORTER_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fragscope.pb.h"
#include "fragscope/torch/pickle_reader.h"

namespace fragscope::torch {

struct ImportOptions {
  PickleLimits pickle_limits;
  // Emit SymbolizedStack frames and set stack ids. Off: every stack_id is 0.
  bool include_stacks = true;
  // Most entries the Snapshot frame may list: LiveBlocks, plus one per plain segment and three
  // per expandable segment (reservation, handle, mapping). PickleLimits bound the values a
  // pickle creates, not the references to them, so without this a few KB could ask for
  // millions of blocks. The default keeps the frame under the trace format's 64 MiB frame
  // limit (kMaxFrameBytes) even when every entry takes its largest encoding (about 55 bytes;
  // snapshot_importer_test checks it); real snapshots hold thousands. Raise it (with
  // kMaxFrameBytes in mind) to import a larger snapshot; over the limit the import fails.
  uint64_t max_snapshot_entries = 1'000'000;
};

// Figures computed straight from the snapshot, per device, in bytes. Independent of the
// frames, so tests and `fragscope import` can cross-check the model against them.
struct DeviceSummary {
  int32_t device = 0;
  uint64_t segment_count = 0;             // entries in `segments` (expandable: mapped ranges)
  uint64_t expandable_segment_count = 0;  // of which is_expandable
  uint64_t reserved_bytes = 0;            // sum of segment total_size
  uint64_t allocated_bytes = 0;           // sum of active_allocated block sizes
  uint64_t pending_free_bytes = 0;        // sum of active_pending_free / active_awaiting_free
  uint64_t inactive_bytes = 0;            // sum of inactive block sizes (PyTorch's free ranges)
  // Largest run of address-adjacent inactive blocks inside one segment.
  uint64_t largest_inactive_range = 0;
  uint64_t active_block_count = 0;  // allocated + pending free
  uint64_t inactive_block_count = 0;
  uint64_t trace_entry_count = 0;  // entries in device_traces[device]
  uint64_t oom_count = 0;          // of which action == "oom"
};

enum class SnapshotFormat {
  kCurrent,        // every block has `address`
  kLegacyHistory,  // at least one block's address came from walking its segment
};

struct ImportResult {
  std::vector<v1::Frame> frames;
  std::map<int32_t, DeviceSummary> devices;  // by CUDA ordinal
  SnapshotFormat format = SnapshotFormat::kCurrent;
  uint64_t stack_count = 0;  // SymbolizedStack frames emitted
  // The device_traces history was replayed: the Snapshot frame holds the state before its
  // first entry and the entries follow as events (see the top of this file).
  bool history_replayed = false;
  // Oddities that did not stop the import (unknown block state, sizes that do not add up),
  // each naming where in the snapshot it was.
  std::vector<std::string> warnings;
};

// Converts an already parsed snapshot. `source_name` starts every error message. Errors are
// kInvalidArgument and name the snapshot path of the bad value
// (e.g. "segments[3].blocks[2].size: expected int, got str"); besides wrong types they are
// a segment whose range repeats or overlaps another segment's on the same device, a block of
// 0 bytes, a block outside its segment or over the previous block, and more entries than
// ImportOptions::max_snapshot_entries (kResourceExhausted).
absl::StatusOr<ImportResult> ConvertTorchSnapshot(const PickleValue& root,
                                                  std::string_view source_name,
                                                  const ImportOptions& options = {});

// Parses `bytes` with a restricted PickleReader and converts them.
absl::StatusOr<ImportResult> ImportTorchSnapshotBytes(std::string_view bytes,
                                                      std::string_view source_name,
                                                      const ImportOptions& options = {});

// Reads, parses and converts the snapshot at `path`, keeping the summaries.
absl::StatusOr<ImportResult> ImportTorchSnapshotFileWithSummary(const std::string& path,
                                                                const ImportOptions& options = {});

// Reads, parses and converts the snapshot at `path`; the frames, ready for a FrameWriter.
absl::StatusOr<std::vector<v1::Frame>> ImportTorchSnapshotFile(const std::string& path,
                                                               const ImportOptions& options = {});

}  // namespace fragscope::torch

#endif  // FRAGSCOPE_TORCH_SNAPSHOT_IMPORTER_H_
