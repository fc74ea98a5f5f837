// `fragscope export --torch-snapshot`: the memory snapshot format PyTorch writes with
// torch.cuda.memory._dump_snapshot() (scripts/adapter/README.md), so PyTorch's own
// viewer (pytorch.org/memory_viz) and scripts written for snapshots read fragscope traces.
//
// Written with PickleWriter (protocol 2, builtin types only). What goes in:
//   - `segments`: every exact or annotated segment, in address order per device.
//       * A driver allocation is one segment entry; a VMM reservation is one entry per
//         contiguous mapped range with is_expandable = True (as PyTorch reports expandable
//         segments).
//       * Annotated: its blocks (state active_allocated, or active_pending_free) and its free
//         ranges as `inactive` blocks, in address order, tiling the entry.
//       * Exact (no sub-allocator): one active_allocated block filling the entry.
//       * Fields: device, address, total_size, allocated_size, active_size, requested_size
//         (= allocated_size: the request sizes are not recorded), stream, segment_type ('small'
//         up to 2 MiB, else 'large'), segment_pool_id ((0, 0) for the default pool, (0, pool)
//         otherwise), is_expandable, frames, blocks. Blocks: address, size, requested_size
//         (= size), state, frames. Frames: [{name, filename, line}], innermost first.
//   - `device_traces`: one list per device ordinal 0..max, as _record_memory_history() records
//     it: the history ExportInput::record holds (trace_replay.h: alloc, free_requested,
//     free_completed, segment_alloc, segment_free, segment_map, segment_unmap, each {action,
//     addr, size, stream, time_us, frames}) merged by seq with one {action: 'oom', device_free
//     (left out when unknown), size, stream, time_us, frames} entry per OOM post-mortem of the
//     summary. Without a recorded history (ExportInput::history_recorded false) only the oom
//     entries.
// Left out, and counted in TorchSnapshotStats so the CLI can say so: opaque segments (their
// inside is unknown; PyTorch's format has no "unknown" state), memory-pool (cudaMallocAsync),
// managed, graph and imported memory (not segments of this process's sub-allocator), segments
// beyond the capture limit, and events with an unknown device.
#ifndef FRAGSCOPE_EXPORT_TORCH_SNAPSHOT_WRITER_H_
#define FRAGSCOPE_EXPORT_TORCH_SNAPSHOT_WRITER_H_

#include <cstdint>
#include <string>

#include "fragscope/export/export_input.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope::exporter {

struct TorchSnapshotStats {
  uint64_t segments = 0;  // segment entries written
  uint64_t blocks = 0;    // block entries written (all states)
  uint64_t oom_entries = 0;
  uint64_t history_entries = 0;  // device_traces entries other than oom
  uint64_t opaque_segments_left_out = 0;
  uint64_t opaque_bytes_left_out = 0;
  uint64_t segments_left_out = 0;  // over CaptureOptions::max_segments_per_device
  // Memory in buckets the format cannot show: pools, managed, graph (per DeviceSummary).
  uint64_t other_bytes_left_out = 0;
};

// Returns the pickle's bytes. `stats` may be null.
std::string WriteTorchSnapshot(const ExportInput& input, Symbolizer& symbolizer,
                               TorchSnapshotStats* stats = nullptr);

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_TORCH_SNAPSHOT_WRITER_H_
