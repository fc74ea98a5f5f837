// What the collector model knows about one process stream at one point: per-device metrics,
// sites, failed allocations and OOM post-mortems. Produced by ProcessModel::Summarize(); consumed
// by the text/JSON reports, the live view and CI gates.
//
// Plain values, no references into the model: a summary stays valid after the model changes or
// is destroyed, and may be read from any thread once built. Units: bytes for sizes, nanoseconds
// (CLOCK_MONOTONIC of the traced process) for times. A figure the model cannot know is a
// `Measured<T>` without a value and with the reason, never 0.
#ifndef FRAGSCOPE_MODEL_MODEL_SUMMARY_H_
#define FRAGSCOPE_MODEL_MODEL_SUMMARY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fragscope/model/segment_layout.h"

namespace fragscope {

// A figure that may be unknown. `unknown_reason` is set exactly when `value` is empty.
template <typename T>
struct Measured {
  std::optional<T> value;
  std::string unknown_reason;

  static Measured Known(T v) { return Measured{v, {}}; }
  static Measured Unknown(std::string why) { return Measured{std::nullopt, std::move(why)}; }
  bool known() const { return value.has_value(); }
};

// Live bytes held by one allocation site (interned stack id; 0 = no stack recorded).
// How the agent's capture of a stack ended (proto StackEnd). Anything but kOutermost may lack the
// frames nearer main(): reports say so after the last frame rather than show it as whole.
enum class StackEnd : uint8_t {
  kUnspecified = 0,   // not recorded (an agent before format 1.11, a converted stream)
  kOutermost = 1,     // reached the thread's first frame: whole
  kDepthLimit = 2,    // more frames than FRAGSCOPE_STACK_DEPTH
  kNoUnwindInfo = 3,  // the last pc lies in no module or has no unwind table (JIT, stripped)
  kUnreadable = 4,    // the next frame's saved registers lie outside the thread's stack
  kUnsupported = 5,   // a signal frame, a DWARF expression, an architecture without CFI unwinding
};

// From Stack.end; a value this reader does not know says nothing it can name: kUnspecified.
StackEnd StackEndFromWire(int value);
// The JSON name: "outermost", "depth_limit", "no_unwind_info", "unreadable", "unsupported",
// "unspecified".
const char* StackEndName(StackEnd end);
// True for the ends that say frames are missing (not kOutermost, not kUnspecified).
bool IsCutStackEnd(StackEnd end);
// The end of a site merged from stacks ending `a` and `b`: a cut one if either is (the first
// of two cuts), else kUnspecified if either is, else kOutermost. A site must never look whole
// because one of its stacks was.
StackEnd MergeStackEnds(StackEnd a, StackEnd b);

struct SiteEntry {
  uint64_t stack_id = 0;
  uint64_t live_bytes = 0;
  uint64_t count = 0;  // live allocations/blocks attributed to the site
  // How its stacks ended (StackIndex::MergeSites, merged with MergeStackEnds); unset before
  // that and for stacks not in the stream: the stack's own end then (reports, SiteStackEnd).
  std::optional<StackEnd> end = std::nullopt;
};

// One point of a device's memory timeline.
struct TimelinePoint {
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t cached_bytes = 0;
  uint64_t largest_free_range_bytes = 0;
  std::optional<double> fragmentation;  // null under the floor or with opaque segments
};

// One memory pool (cudaMallocAsync / cuMemAllocFromPoolAsync). Its internal layout is unknown,
// so it has no largest-free figure.
struct PoolSummary {
  uint64_t pool = 0;  // CUmemoryPool handle as seen by the agent; 0 = the device's default pool
  // Last sampled cudaMemPoolAttrReservedMemCurrent, never below live + pending blocks; unknown
  // when never sampled (then reserved counts live + pending blocks, a lower bound).
  Measured<uint64_t> sampled_reserved_bytes;
  uint64_t reserved_bytes = 0;      // what `reserved` counts for this pool (see above)
  uint64_t used_bytes = 0;          // live async blocks
  uint64_t pending_free_bytes = 0;  // freed with cudaFreeAsync, stream not known to be past it
  uint64_t blocks = 0;
};

struct DeviceSummary {
  int ordinal = -1;      // -1: events whose device the agent could not tell
  std::string uuid_hex;  // 32 hex digits, empty if unknown
  std::string name;
  Measured<uint64_t> total_bytes;        // DeviceInfo or latest MemInfo
  Measured<uint64_t> device_free_bytes;  // latest MemInfo sample
  uint64_t device_free_sample_seq = 0;   // seq of that sample (0 if none)

  // Definitions: collector/REPORT.md, "Metrics".
  uint64_t reserved_bytes = 0;   // driver segments + non-imported VMM handles + pool reservations
  uint64_t allocated_bytes = 0;  // live blocks of exact and annotated segments + live pool blocks
  uint64_t opaque_bytes = 0;     // opaque segments (used part unknown; never counted free)
  uint64_t cached_bytes = 0;     // free ranges inside annotated segments
  uint64_t pending_free_bytes = 0;        // annotated blocks freed but not yet reusable
  uint64_t largest_free_range_bytes = 0;  // largest free range inside one annotated segment
  Measured<double> fragmentation;         // 1 - largest/cached, see ModelOptions floor
  uint64_t stranded_bytes = 0;            // cached - largest_free_range
  Measured<uint64_t> untracked_bytes;     // total - free - reserved, from the latest sample

  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_reserved_seq = 0;
  uint64_t peak_allocated_bytes = 0;
  Measured<double> max_fragmentation;  // over every event where fragmentation was reportable

  // Buckets kept out of reserved/allocated (see REPORT.md).
  uint64_t pool_reserved_bytes = 0;  // part of reserved
  uint64_t pool_used_bytes = 0;      // part of allocated
  uint64_t pool_pending_free_bytes = 0;
  uint64_t graph_bytes = 0;     // allocations made during stream capture / graph memory
  uint64_t managed_bytes = 0;   // cudaMallocManaged (may live on the host)
  uint64_t imported_bytes = 0;  // IPC imports and imported VMM handles: another process's memory
  uint64_t unmapped_handle_bytes = 0;  // created VMM handles (in reserved) not mapped anywhere
  std::vector<PoolSummary> pools;

  // Counts.
  uint64_t segments = 0;  // driver allocations + VMM reservations with mapped memory
  uint64_t exact_segments = 0;
  // Live bytes of exact segments (part of allocated): allocations no sub-allocator carves, such
  // as a plain program's cudaMalloc or a CUDA library's own workspace (cuBLAS, cuDNN) next to
  // PyTorch's cache.
  uint64_t exact_bytes = 0;
  uint64_t annotated_segments = 0;
  uint64_t opaque_segments = 0;
  uint64_t blocks = 0;       // exact segments (one block each) + annotated blocks + pool blocks
  uint64_t free_ranges = 0;  // in annotated segments
  uint64_t oom_count = 0;    // failures on this device that CountsAsOom (post-mortem kept or not)

  std::vector<SiteEntry> sites;          // live now, largest first, at most top_sites
  std::vector<SiteEntry> sites_at_peak;  // live at peak_reserved_seq, largest first
  std::vector<TimelinePoint> timeline;   // ordered by seq, at most timeline_max_points
};

// What kind of record an entry of a post-mortem's recent-event list was.
enum class EventKind {
  kAlloc,
  kFree,
  kFreeAsync,
  kReserve,
  kFreeRange,
  kMap,
  kUnmap,
  kHandleCreate,
  kHandleRelease,
  kHandleRetain,
  kHandleImport,
  kHandleExport,
  kBlockAlloc,
  kBlockFree,
  kBlockFreePending,
  kFailedAlloc,
  kMemInfo,
  kMark,
  kPutBack,  // an allocation put back after its release failed (result: the release's)
};
const char* EventKindName(EventKind kind);

// A fragscope.v1.Api value as CUDA spells the function ("cudaMalloc", "cuMemMap"); empty for a
// value this build does not know (a newer agent's).
std::string ApiName(int api);

struct RecentEvent {
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  EventKind kind = EventKind::kAlloc;
  int api = 0;  // fragscope.v1.Api value
  uint64_t address = 0;
  uint64_t size = 0;
  int result = 0;
  uint64_t stack_id = 0;
  std::string label;  // Mark label
};

struct FailedAllocation {
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  int api = 0;  // fragscope.v1.Api value
  std::string api_name;
  int result = 0;  // CUresult / cudaError_t
  int device = -1;
  uint64_t requested_bytes = 0;  // 0 for failure-only functions (cuLaunchKernel ...)
  uint64_t stream = 0;
  uint64_t pool = 0;
  uint64_t stack_id = 0;
  bool from_sub_allocator = false;  // reported through fragscope_alloc_failed / OOM observer
  // An out-of-memory failure: reported by a sub-allocator, or a CUDA result of 2
  // (CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation == 2). Other errors are listed only.
  bool is_oom = false;
  // See REPORT.md "Recovered": a later successful allocation on the same device of at least the
  // requested size before the stream ended.
  bool recovered = false;
  uint64_t recovered_by_seq = 0;
  // A driver failure followed (before any success) by a sub-allocator OOM on the same device is
  // explained by that OOM's post-mortem: this is its seq. 0 otherwise.
  uint64_t superseded_by_seq = 0;
  bool has_postmortem = false;

  // Whether this failure is one of the run's OOMs, the ones the OOM analyzer explains (it keeps
  // a post-mortem for each, up to ModelOptions::max_postmortems): an out-of-memory a
  // sub-allocator raised to the program (even if the program caught it), or a driver one that
  // no retry recovered and no later sub-allocator OOM explains (REPORT.md "Recovered").
  bool CountsAsOom() const {
    return is_oom && superseded_by_seq == 0 && (from_sub_allocator || !recovered);
  }
};

enum class OomClass { kCapacity, kExternal, kUnusableCache, kFragmentation, kUnknown };
// "capacity", "external", "unusable_cache", "fragmentation", "unknown" (the JSON spelling).
const char* OomClassName(OomClass c);

// The numbers an OOM class is decided from, taken from the model at the failure.
struct OomFigures {
  uint64_t requested_bytes = 0;
  Measured<uint64_t> device_total_bytes;
  Measured<uint64_t> device_free_bytes;
  bool mem_info_from_failure = false;  // free/total sampled with the failure, not earlier
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;  // includes live pool blocks
  uint64_t opaque_bytes = 0;
  uint64_t opaque_segments = 0;
  uint64_t cached_bytes = 0;
  uint64_t pending_free_bytes = 0;  // annotated pending + pool pending
  uint64_t pool_free_bytes = 0;     // pool reservations minus used and pending
  uint64_t graph_bytes = 0;
  uint64_t largest_free_range_bytes = 0;
  // Largest free range in a segment whose stream and pool match the request's.
  uint64_t largest_compatible_free_range_bytes = 0;
  // Largest free range that would exist if every pending free completed (pending block merged
  // with the free ranges touching it).
  uint64_t largest_free_range_if_pending_completed_bytes = 0;
  Measured<uint64_t> untracked_bytes;  // total - free - reserved
  // Backing of the VMM reservations a sub-allocator carves on the device: segments that grow in
  // place (PyTorch's expandable segments), so advice to turn those on does not apply.
  uint64_t carved_reservation_bytes = 0;
  // Set when the stream knows the sub-allocator's blocks only at syncs (Mark.blocks_synced) and
  // events came between the last sync and this failure: the block figures above (allocated,
  // cached, the free ranges) are that sync's, the seq given here, not the failure's.
  std::optional<uint64_t> blocks_synced_at_seq;
};

struct OomPostMortem {
  FailedAllocation failure;
  OomClass oom_class = OomClass::kUnknown;
  std::string headline;     // "OOM on device 0: requested 1.20 GiB — class: fragmentation"
  std::string explanation;  // one or two sentences with the numbers that decide the class
  OomFigures figures;
  std::vector<std::string> advice;
  std::vector<SiteEntry> sites_at_failure;  // largest first, at most top_sites
  std::vector<SiteEntry> sites_at_peak;
  uint64_t peak_reserved_bytes = 0;
  std::vector<RecentEvent> recent_events;  // oldest first, the failure itself last
  bool approximate = false;  // the failure lies in an interval the model could not follow
  // The failed device's segments at the failure, in address order: the map the HTML page draws
  // (by the end of a trace the cache has usually been given back). The largest
  // ModelOptions::postmortem_map_segments of them; `segments_left_out` more were not copied.
  // Shared and immutable, since summaries copy post-mortems. Null when there is none, and then
  // `map_missing` says why (maps turned off, too large, too many failures, or let go for a
  // later OOM's).
  std::shared_ptr<const std::vector<SegmentLayout>> segments_at_failure;
  uint64_t segments_left_out = 0;
  std::string map_missing;
};

// A sub-allocator block that lies in no known segment. Kept and reported, not dropped.
struct OrphanBlock {
  uint64_t seq = 0;
  int device = -1;
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t stack_id = 0;
  uint64_t allocator = 0;
};

// seq interval in which events were lost; figures derived from it are approximate.
struct ApproximateInterval {
  uint64_t from_seq = 0;           // last seq known good
  std::optional<uint64_t> to_seq;  // seq of the resync snapshot; empty if none came
  uint64_t dropped_events = 0;     // 0: not counted (a resync without a Drops frame before it)
};

struct ModuleInfo {
  std::string path;
  std::string build_id_hex;
  uint64_t load_address = 0;
  uint64_t size = 0;
};

// A text frame from a converted stream (PyTorch snapshot), already symbolized.
struct SourceFrameInfo {
  std::string function;
  std::string file;
  uint32_t line = 0;
};

// Symbols a trace file carries for its return addresses (SymbolTable frames), read where the
// stream ran from a module file with the build-id the module map records: by pc, the frames
// innermost first (several where code was inlined; none where the module had no symbol).
using StoredSymbols = std::map<uint64_t, std::vector<SourceFrameInfo>>;

struct StackInfo {
  std::vector<uint64_t> pcs;                   // innermost first
  std::vector<SourceFrameInfo> source_frames;  // set instead of pcs: converted streams, adapters
  StackEnd end = StackEnd::kUnspecified;       // how the capture ended (Stack.end)
};

struct ModelSummary {
  // From Hello.
  uint32_t pid = 0;
  std::string host;
  std::string exe;
  // The process's rank in a distributed job and the job's size: from its launcher's environment
  // (Hello.rank), or as the program set it later (a Mark's rank); unset outside one.
  std::optional<uint32_t> rank;
  std::optional<uint32_t> world_size;
  // Hello.resumed: how many times the agent lost its collector and resumed the stream in a new
  // one (a collector restart) before this stream began; 0 for the process's first stream.
  uint32_t resumed = 0;
  // Hello.exec_image: 0 for a process's first image, k after its k-th exec in place (same pid).
  uint32_t exec_image = 0;
  // End.exec: the stream ended because the image called exec (its memory ended with it).
  bool ended_by_exec = false;
  bool attached = false;
  bool imported = false;  // converted from another tool's snapshot (Hello BACKEND_IMPORTED)
  // An imported snapshot whose recorded history was replayed (PyTorch's device_traces): peaks,
  // maxima and the timeline are the history's, not the snapshot's moment alone.
  bool imported_history = false;
  // Hello.stack_depth: FRAGSCOPE_STACK_DEPTH in force, for "deeper than ..." (0: not said).
  uint32_t stack_depth = 0;
  // False when the agent took no stack on releases (Hello.release_stacks_off): a free's
  // stack_id 0 then means "not recorded", not "no stack".
  bool release_stacks = true;
  // False when the agent started after the program (Hello.attached, or a Snapshot without
  // complete_history): memory from before is in `untracked`, reported unknown without a sample.
  bool history_complete = true;
  // Set when the stream begins with a Snapshot (a flight-recorder segment, a late connect, a
  // wake, an attach) instead of the program's first event: the live state is the snapshot's,
  // but peaks, maxima and failures before this seq are not in the stream.
  std::optional<uint64_t> history_from_seq;
  // history_from_seq, unless the stream is one imported snapshot (which is all it holds, and
  // says so itself): the seq before which peaks, maxima and failures are missing. What reports
  // and gates read.
  std::optional<uint64_t> partial_history_from() const {
    return imported ? std::nullopt : history_from_seq;
  }

  // CLOCK_REALTIME minus CLOCK_MONOTONIC of the traced process, read together at its start
  // (Hello): turns an event's time_ns into wall-clock time. Unset when the stream did not say
  // (an imported snapshot, an older agent).
  std::optional<int64_t> realtime_minus_monotonic_ns;
  // The wall-clock time (ns since the Unix epoch) of an event time_ns; unset when either is
  // unknown (time_ns 0 means "not recorded").
  std::optional<uint64_t> WallTimeNs(uint64_t time_ns) const {
    if (time_ns == 0 || !realtime_minus_monotonic_ns) return std::nullopt;
    return time_ns + static_cast<uint64_t>(*realtime_minus_monotonic_ns);
  }

  uint64_t frames = 0;
  uint64_t events = 0;  // event frames applied (alloc, free, map, handle, block, failed, ...)
  uint64_t drops = 0;   // events the agent could not ship (total)
  uint64_t last_seq = 0;
  bool stream_ended = false;  // an End frame arrived
  std::optional<int> exit_status;
  std::vector<ApproximateInterval> approximate_intervals;
  // Events the model could not place (a free of an unknown address, a map into nothing ...).
  uint64_t unmatched_events = 0;
  // The agent's live table was full (Snapshot.entries_not_held): its snapshots lack up to this
  // many live allocations, so the state from the snapshot at `not_held_since_seq` on may
  // undercount. 0: every snapshot was complete.
  uint64_t live_entries_not_held = 0;
  uint64_t not_held_since_seq = 0;
  // Syncs of a sub-allocator's blocks (Mark.blocks_synced: a snapshot diff of PyTorch's state,
  // an injected attach's import). Non-zero: those blocks are known at the syncs only, so the
  // figures between two syncs (peaks, maxima, the timeline) may miss blocks that came and went.
  // 0: blocks are followed one by one (or there are none).
  uint64_t block_syncs = 0;
  uint64_t last_block_sync_seq = 0;
  // Whether the final figures hold the blocks as they were at the end: no syncs at all, or no
  // event after the last one (the adapter's exit sync, an attach's detach sync).
  bool blocks_known_at_end = true;

  // The program's marks (fragscope_annotate_mark, fragscope.mark()): the labels a timeline
  // shows. The first kMaxMarks of the stream; `marks_left_out` more were not kept.
  struct MarkEntry {
    uint64_t seq = 0;
    uint64_t time_ns = 0;
    std::string label;
  };
  static constexpr std::size_t kMaxMarks = 4096;
  std::vector<MarkEntry> marks;
  uint64_t marks_left_out = 0;

  std::vector<DeviceSummary> devices;                // by ordinal
  std::vector<FailedAllocation> failed_allocations;  // in seq order
  std::vector<OomPostMortem> ooms;                   // in seq order
  uint64_t ooms_without_postmortem = 0;              // beyond ModelOptions::max_postmortems
  std::vector<OrphanBlock> orphan_blocks;            // live now
  uint64_t orphan_blocks_total = 0;                  // ever seen

  // Every stack referenced above, and the module map, for symbolization.
  std::map<uint64_t, StackInfo> stacks;
  std::vector<ModuleInfo> modules;
  // The trace's stored symbols, shared (not copied) by every summary of the stream; null when
  // it carries none. Only for modules whose build-id matches the module map's.
  std::shared_ptr<const StoredSymbols> stored_symbols;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_MODEL_SUMMARY_H_
