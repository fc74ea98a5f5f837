// Frame dispatch of the collector model: turns each event into changes of segments, handles,
// pools and blocks, and keeps the per-device aggregates (DeviceState) in step with them.
#include "fragscope/model/process_model.h"
#include "fragscope/model/address_btree.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "fragscope/model/device_state.h"
#include "fragscope/model/oom_analyzer.h"
#include "fragscope/model/segment.h"
#include "fragscope/model/snapshot_policy.h"
#include "fragscope/model/stack_index.h"
#include "fragscope/trace/hot_event_view.h"

namespace fragscope {
namespace {

using v1::MemoryKind;

bool IsAsyncFree(v1::Api api) {
  return api == v1::API_cudaFreeAsync || api == v1::API_cuMemFreeAsync ||
         api == v1::API_cuMemFreeAsync_ptsz;
}

// The agent names the kind; older or partial streams may not, so infer it from the API.
MemoryKind ResolveKind(MemoryKind kind, v1::Api api, bool in_capture) {
  if (in_capture) return v1::MEMORY_KIND_GRAPH;
  if (kind != v1::MEMORY_KIND_UNSPECIFIED) return kind;
  switch (api) {
    case v1::API_cudaMallocAsync:
    case v1::API_cudaMallocFromPoolAsync:
    case v1::API_cuMemAllocAsync:
    case v1::API_cuMemAllocFromPoolAsync:
    case v1::API_cuMemAllocAsync_ptsz:
    case v1::API_cuMemAllocFromPoolAsync_ptsz:
      return v1::MEMORY_KIND_POOL;
    case v1::API_cudaMallocManaged:
    case v1::API_cuMemAllocManaged:
      return v1::MEMORY_KIND_MANAGED;
    case v1::API_cuIpcOpenMemHandle:
    case v1::API_cuMemPoolImportPointer:
      return v1::MEMORY_KIND_IPC_IMPORT;
    case v1::API_cudaMallocPitch:
    case v1::API_cudaMalloc3D:
    case v1::API_cuMemAllocPitch:
    case v1::API_cuMemAllocPitch_v2:
      return v1::MEMORY_KIND_PITCHED;
    default:
      return v1::MEMORY_KIND_DEVICE;
  }
}

// A live allocation that is not a segment of its own: pool blocks, graph, managed, imports.
struct LiveAllocation {
  int device = -1;
  MemoryKind kind = v1::MEMORY_KIND_UNSPECIFIED;
  uint64_t size = 0;
  uint64_t stack_id = 0;
  uint64_t pool = 0;
  bool pending_free = false;
};

// A VMM physical allocation. Freed when released (refs reach 0) and unmapped everywhere.
struct PhysicalHandle {
  uint64_t size = 0;
  int device = -1;
  bool imported = false;
  int refs = 1;
  uint64_t mappings = 0;
  uint64_t stack_id = 0;
};

}  // namespace

class ProcessModel::Impl {
 public:
  explicit Impl(ModelOptions options)
      : options_(std::move(options)),
        stacks_(options_.caching_allocator_modules),
        analyzer_(options_) {}
  ~Impl() { DeleteSegments(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  const ModelOptions& options() const { return options_; }
  void Apply(const v1::Frame& frame);
  void Apply(const HotEvent& event);
  ModelSummary Summarize() const;
  // `held` (optional): how many segments the device holds, max_segments or not.
  std::vector<SegmentLayout> SegmentLayouts(int device, std::size_t max_segments,
                                            std::size_t* held = nullptr) const;
  const StackIndex& stack_index() const { return stacks_; }
  std::optional<StackInfo> FindStack(uint64_t id) const {
    const StackInfo* s = id == 0 ? nullptr : stacks_.Find(id);
    if (s == nullptr) return std::nullopt;
    return stacks_.Reported(*s);
  }

 private:
  // Called several times by every event: forced inline, the common case is two compares.
  [[gnu::always_inline]] DeviceState& Device(int ordinal) {
    // Most streams have one device: remember the last one (std::map nodes stay put, and
    // devices are never erased).
    if (last_device_ != nullptr && last_device_->ordinal() == ordinal) [[likely]] {
      if (!last_device_->touched) Touch(last_device_);
      return *last_device_;
    }
    return FindDevice(ordinal);
  }
  DeviceState& FindDevice(int ordinal) {
    auto it = devices_.find(ordinal);
    if (it == devices_.end()) it = devices_.try_emplace(ordinal, ordinal, options_).first;
    last_device_ = &it->second;
    Touch(last_device_);
    return *last_device_;
  }
  // The device a segment's contribution `c` goes to, or nullptr. A reservation that no device's
  // memory is mapped into yet has device -1 (cuMemAddressReserve names none) and counts for
  // nothing: it must not invent a "device -1" that every report of an expandable-segments
  // PyTorch job would then list, empty. One that counts (blocks annotated before any map) does
  // show there: its bytes are real, on a device not known.
  DeviceState* SegmentDevice(int ordinal, const SegmentContribution& c) {
    if (ordinal < 0 && !c.counted && !devices_.contains(ordinal)) return nullptr;
    return &Device(ordinal);
  }
  [[gnu::always_inline]] void Touch(DeviceState* d) {
    if (d->touched) return;
    d->touched = true;
    // Inline: every event touches a device (a vector's push_back was a call per event).
    if (touched_count_ < kTouchedInline) [[likely]] {
      touched_[touched_count_++] = d;
    } else {
      touched_more_.push_back(d);
    }
  }
  // f(DeviceState*) for the devices the event touched, in the order first touched.
  template <typename F>
  void ForEachTouched(F&& f) {
    for (std::size_t i = 0; i < touched_count_; ++i) f(touched_[i]);
    for (DeviceState* d : touched_more_) f(d);
  }
  void FinishEvent(uint64_t seq, uint64_t time_ns);
  // The event being applied changed no allocation: a peak just set stays open to the block it
  // was for (DeviceState::KeepPeakOpen).
  void KeepPeaksOpen() {
    ForEachTouched([](DeviceState* d) { d->KeepPeakOpen(); });
  }
  // The event's RecentEvent, on `device`.
  template <typename Event>
  void Record(int device, const Event& e, EventKind kind) {
    Record(device, e, kind, e.result());
  }
  // The same with another result than the event's own.
  template <typename Event>
  void Record(int device, const Event& e, EventKind kind, int result) {
    // An event the model could not place on any device must not invent a "device -1".
    if (device < 0 && !devices_.contains(device)) return;
    Device(device).RecordEvent(e.seq(), e.time_ns(), kind, e.api(), e.address(), e.size(), result,
                               e.stack_id());
  }

  Segment* SegmentContaining(uint64_t address);
  // Every change to a segment goes through here: its old contribution (and segment-level site)
  // is taken out of its device, the change applied, and the new one put in.
  template <typename F>
  void Change(Segment& segment, F&& mutate);
  // The same for a change of blocks only (placed, freed, marked pending), which leaves the
  // segment's device, kind and site alone: the general way for a segment that may change
  // coverage or stop counting, a shorter one for the rest (Segment::StaysAnnotatedAndCounted).
  template <typename F>
  void ChangeBlocks(Segment& segment, F&& mutate);
  // A segment in the index, with its size beside its start: lookups and overlap checks read
  // both in the index node without touching the segment (a cache miss each, in a long trace).
  // The index owns `segment`: whatever takes an entry out deletes it or takes it over
  // (EraseSegment, InferReservation, DeleteSegments). A plain pointer rather than a
  // unique_ptr keeps the entry trivially copyable, so the index shifts entries as plain copies
  // (moving unique_ptrs one by one took a third of a cudaMalloc's index insert).
  struct IndexedSegment {
    uint64_t size = 0;
    Segment* segment = nullptr;
    Segment* operator->() const { return segment; }
    Segment& operator*() const { return *segment; }
  };
  static_assert(std::is_trivially_copyable_v<IndexedSegment>);
  // Keys apart from values, scanned linearly (address_btree.h): a bisection mispredicted a
  // branch at every other step of every cudaFree's lookup (absl's B-tree, 256-byte nodes), or,
  // without branches, made each step wait for the load before it (RESULTS.md).
  using SegmentIndex = AddressBtree<IndexedSegment>;
  void EraseSegment(SegmentIndex::iterator it);
  // Deletes every segment and empties the index.
  void DeleteSegments();
  void ClassifyPendingSegments();

  void DepositHandle(const PhysicalHandle& h, int sign);
  void SetHandleMappings(uint64_t handle, int delta);

  void CompletePoolFree(uint64_t address);

  void OnHello(const v1::Hello& hello);
  void OnDevice(const v1::DeviceInfo& info);
  // The three common events (all but block sites), as Apply takes them from a frame or a
  // decoded event (hot_event_view.h): the same accessors, the same results. Each counts the
  // event, applies it and finishes it (ApplyStateEvent, which every state event goes through).
  template <typename AllocEventT>
  void ApplyAlloc(const AllocEventT& e) {
    ApplyStateEvent(e, [this](const AllocEventT& a) { OnAlloc(a, /*from_snapshot=*/false); });
  }
  template <typename FreeEventT>
  void ApplyFree(const FreeEventT& e) {
    ApplyStateEvent(e, [this](const FreeEventT& f) { OnFree(f); });
  }
  template <typename BlockEventT>
  void ApplyBlock(const BlockEventT& e) {
    ApplyStateEvent(e, [this](const BlockEventT& b) { OnBlock(b); });
  }
  template <typename Event, typename Handler>
  void ApplyStateEvent(const Event& e, Handler&& handle) {
    ++events_;
    // An imported snapshot that carries its history (device_traces replayed) is more than one
    // moment: its peaks are the history's.
    if (imported_) [[unlikely]]
      imported_history_ = true;
    snapshot_policy_.OnStateEvent();
    handle(e);
    FinishEvent(e.seq(), e.time_ns());
    blocks_fresh_ = false;
  }
  template <typename AllocEventT>
  void OnAlloc(const AllocEventT& e, bool from_snapshot);
  // Snapshot segments a sub-allocator declared it carves: annotated even without blocks.
  void MarkSubAllocated(uint64_t segment_base);
  // Returns whether the allocation was placed (false: counted as unmatched, state unchanged).
  bool PlaceAllocation(uint64_t address, uint64_t size, int device, uint64_t stack_id,
                       uint64_t pool, MemoryKind kind);
  template <typename FreeEventT>
  void OnFree(const FreeEventT& e);
  void OnMap(const v1::MapEvent& e);
  // Whether a segment [address, address + size) fits the address space and overlaps no segment
  // but the one at `address` (which it would replace).
  bool CanPlaceSegment(uint64_t address, uint64_t size) const;
  // The new reservation, or nullptr when it cannot be placed (counted as unmatched).
  Segment* Reserve(uint64_t address, uint64_t size, int device, uint64_t stack_id);
  // The reservation a mapping outside every known one proves (its own range), made one with
  // the inferred reservations of `device` that it touches: memory mapped page by page before
  // an attach (PyTorch's expandable segments) is one reservation, and blocks span its pages.
  // nullptr when it cannot be placed (counted as unmatched).
  Segment* InferReservation(uint64_t address, uint64_t size, int device, uint64_t stack_id);
  // Forgets the inferred reservations inside [address, address + size) (the freed range of a
  // reservation whose start the model never saw) and says the device of the first; false
  // when there were none.
  bool FreeInferredReservations(uint64_t address, uint64_t size, int* device);
  void MapInto(uint64_t address, uint64_t size, uint64_t offset, uint64_t handle, int device,
               uint64_t stack_id);
  void OnHandle(const v1::HandleEvent& e);
  template <typename BlockEventT>
  void OnBlock(const BlockEventT& e);
  // BlockEvent.OP_SITE and OP_SITE_FREED, and ops newer than this reader (Apply dispatches
  // them).
  void OnBlockSite(const v1::BlockEvent& e);
  // Returns the segment holding `address` (whether or not the block could be placed in it), or
  // nullptr for an orphan.
  Segment* PlaceBlock(uint64_t address, const SubBlock& block, int device, uint64_t seq);
  void OnFailed(const v1::FailedAlloc& e);
  // The failed device's segment map into the post-mortem, within ModelOptions' limits; else
  // the reason there is none.
  void CaptureMap(const DeviceState& d, int device, OomPostMortem* pm);
  OomFigures FiguresAt(int device, uint64_t requested, uint64_t stream, uint64_t pool,
                       bool from_failure);
  void OnMemInfo(const v1::MemInfo& e);
  void OnMark(const v1::Mark& e);
  void OnDrops(const v1::Drops& e);
  // Returns whether the snapshot replaced the live state (SnapshotPolicy): false for a PERIODIC
  // one that is only a seek point for this reader.
  bool OnSnapshot(const v1::Snapshot& s);
  void OnEnd(const v1::End& e);
  void SeenSeq(uint64_t seq) {
    last_seq_ = std::max(last_seq_, seq);
    if (!drop_interval_open_) last_good_seq_ = last_seq_;
  }

  ModelOptions options_;
  StackIndex stacks_;
  OomAnalyzer analyzer_;
  SnapshotPolicy snapshot_policy_;

  // Mark.blocks_synced: how many, the last, and whether no event came after it (the blocks
  // are as the sub-allocator has them now). Meaningful once block_syncs_ > 0.
  uint64_t block_syncs_ = 0;
  uint64_t last_block_sync_seq_ = 0;
  std::vector<ModelSummary::MarkEntry> marks_;  // the first kMaxMarks, for timelines
  uint64_t marks_left_out_ = 0;
  bool blocks_fresh_ = false;
  // The stream sends blocks' sites after the fact (BlockEvent.OP_SITE, OP_SITE_FREED): from its
  // first such event on, frees remember the blocks live at the peak (RemoveFreedBlockSite).
  bool late_sites_ = false;
  // ModelSummary::history_from_seq.
  std::optional<uint64_t> history_from_seq_;

  std::map<int, DeviceState> devices_;
  DeviceState* last_device_ = nullptr;  // the one Device() returned last
  // The devices this event touched, in the order first touched: the first kTouchedInline in
  // touched_, the rest (a reclassification can touch every device) in touched_more_.
  static constexpr std::size_t kTouchedInline = 4;
  DeviceState* touched_[kTouchedInline] = {};
  std::size_t touched_count_ = 0;
  std::vector<DeviceState*> touched_more_;
  // UVA: one address space for every device, so segments are indexed by address alone. A
  // B-tree of pointers: a lookup touches a few small contiguous nodes (std::map: one node per
  // level), and the segments themselves stay put while others come and go.
  SegmentIndex segments_;
  // The segment SegmentContaining() found last: consecutive block events mostly land in the
  // same segment. Cleared whenever a segment leaves segments_.
  Segment* last_segment_ = nullptr;
  // SegmentContaining()'s answers by 16 MiB page of address, one slot per page (hashed, so that
  // segments laid out at regular strides do not pile onto the same slots): block events land
  // in segments picked at random, and a search of segments_ took ~165 instructions and a cache
  // miss per level where a slot is one load. A slot holds a segment that overlaps its page
  // (the last found there); an address is a hit only inside the slot's [begin, end), so a
  // stale or colliding slot costs a search, never a wrong answer. A segment leaving segments_
  // is taken out of the slots of its pages (ForgetCached). Made on first use: 96 KiB, nothing
  // for streams without block or mapping events.
  struct CachedSegment {
    uint64_t begin = 0;
    uint64_t end = 0;  // empty (0, 0): matches no address
    Segment* segment = nullptr;
  };
  static constexpr int kCachePageShift = 24;
  static constexpr int kCacheSlotBits = 12;
  static constexpr uint64_t kCacheSlots = uint64_t{1} << kCacheSlotBits;
  static std::size_t CacheSlot(uint64_t address) {
    // Fibonacci hashing: the top bits of the page number times 2^64 / phi.
    return static_cast<std::size_t>(((address >> kCachePageShift) * 0x9e3779b97f4a7c15u) >>
                                    (64 - kCacheSlotBits));
  }
  void ForgetCached(const Segment& s);
  std::unique_ptr<CachedSegment[]> segment_cache_;
  std::vector<uint64_t> unclassified_segments_;  // begins of segments whose stack is not here
  // Allocation sites (stack ids, never 0) whose segments a sub-allocator carved: some segment
  // allocated there became annotated. A snapshot that replaces the state lists segments, but
  // not which of them a sub-allocator carves; one without blocks (all of it cached) would come
  // back as a plain allocation, all of it allocated. A segment from such a site comes back
  // annotated instead (OnSnapshot). Kept across snapshots; O(distinct stacks).
  absl::flat_hash_set<uint64_t> carved_sites_;
  absl::flat_hash_map<uint64_t, LiveAllocation> allocations_;
  absl::flat_hash_map<uint64_t, PhysicalHandle> handles_;
  absl::flat_hash_map<uint64_t, OrphanBlock> orphans_;
  // Addresses of blocks that died with their segment (its memory given back while they were
  // live). A sub-allocator that reports by snapshot diffs (the adapter's fallback, the OOM and
  // detach syncs of an injected attach) frees them later: no mismatch. Emptied when it reaches
  // kMaxDiedBlocks (late frees then count as unmatched); a new block at the address leaves it.
  absl::flat_hash_set<uint64_t> died_blocks_;
  // Frames for the decoded events Apply(HotEvent) passes on as messages (map, handle, sites).
  HotFrameSet hot_frames_;
  static constexpr std::size_t kMaxDiedBlocks = 1 << 20;
  uint64_t orphans_total_ = 0;

  // Stream facts.
  uint32_t pid_ = 0;
  std::string host_;
  std::string exe_;
  bool attached_ = false;
  bool imported_ = false;
  bool imported_history_ = false;    // state events followed the imported snapshot
  bool release_stacks_off_ = false;  // Hello.release_stacks_off
  uint32_t stack_depth_ = 0;         // Hello.stack_depth
  bool history_complete_ = true;
  uint64_t live_entries_not_held_ = 0;  // Snapshot.entries_not_held, the largest seen
  uint64_t not_held_since_seq_ = 0;     // seq of the first snapshot that lacked entries
  uint64_t frames_ = 0;
  uint64_t events_ = 0;
  // Segments and blocks copied into post-mortem maps so far (CaptureMap's budget).
  uint64_t map_entries_copied_ = 0;
  uint64_t drops_ = 0;
  uint64_t last_seq_ = 0;
  uint64_t last_time_ns_ = 0;
  uint64_t last_good_seq_ = 0;  // last seq applied before events started being lost
  bool stream_ended_ = false;
  std::optional<int> exit_status_;
  std::optional<int64_t> realtime_minus_monotonic_ns_;  // from Hello, when it has both clocks
  std::optional<uint32_t> rank_, world_size_;           // Hello.rank/world_size, or a Mark's
  uint32_t resumed_ = 0;                                // Hello.resumed
  uint32_t exec_image_ = 0;                             // Hello.exec_image
  bool ended_by_exec_ = false;                          // End.exec
  uint64_t unmatched_ = 0;
  std::vector<ApproximateInterval> approximate_;
  bool drop_interval_open_ = false;  // approximate_.back() is waiting for a resync
};

// ---------------------------------------------------------------------------------------------
// Segments.

// Segments never overlap and never wrap around the address space: every per-device sum (cached,
// allocated, backing) adds up disjoint ranges, so it stays below 2^64 and the largest free range
// is one of the ranges counted in `cached`. An event that would break this (a snapshot listing
// overlapping ranges, a hostile or corrupt stream) is counted as unmatched and not applied;
// the one exception is a range at the same address as a known segment, whose free was lost.
bool ProcessModel::Impl::CanPlaceSegment(uint64_t address, uint64_t size) const {
  return RangeFits(address, size) &&
         !OverlapsOther(segments_, address, size, [](const IndexedSegment& s) { return s.size; });
}

Segment* ProcessModel::Impl::SegmentContaining(uint64_t address) {
  // Segments are disjoint, so the one holding `address` is the answer whoever asks, found in
  // the cache or the index alike.
  if (last_segment_ != nullptr && address >= last_segment_->begin() &&
      address < last_segment_->end()) {
    return last_segment_;
  }
  if (segment_cache_ != nullptr) {
    const CachedSegment& slot = segment_cache_[CacheSlot(address)];
    if (address - slot.begin < slot.end - slot.begin) {
      last_segment_ = slot.segment;
      return last_segment_;
    }
  }
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin()) return nullptr;
  --it;
  if (address - it->first >= it->second.size) return nullptr;
  last_segment_ = it->second.segment;
  if (segment_cache_ == nullptr) segment_cache_ = std::make_unique<CachedSegment[]>(kCacheSlots);
  segment_cache_[CacheSlot(address)] = {it->first, it->first + it->second.size, last_segment_};
  return last_segment_;
}

void ProcessModel::Impl::ForgetCached(const Segment& s) {
  if (last_segment_ == &s) last_segment_ = nullptr;
  if (segment_cache_ == nullptr || s.size() == 0) return;  // a zero-size segment is never cached
  const uint64_t first = s.begin() >> kCachePageShift;
  const uint64_t last = (s.end() - 1) >> kCachePageShift;
  if (last - first >= kCacheSlots) {  // as many pages as slots: look at every slot
    for (uint64_t i = 0; i < kCacheSlots; ++i) {
      if (segment_cache_[i].segment == &s) segment_cache_[i] = CachedSegment{};
    }
    return;
  }
  // Only the slots of the pages it overlaps can hold it.
  for (uint64_t page = first; page <= last; ++page) {
    CachedSegment& slot = segment_cache_[CacheSlot(page << kCachePageShift)];
    if (slot.segment == &s) slot = CachedSegment{};
  }
}

template <typename F>
void ProcessModel::Impl::Change(Segment& segment, F&& mutate) {
  // Driver allocations that nobody annotates are their own allocation site; VMM reservations
  // are not (their handles are, and annotated blocks are counted block by block).
  auto segment_site = [](const Segment& s) -> std::pair<bool, uint64_t> {
    const bool counts =
        s.kind() == SegmentKind::kDriverAllocation && s.coverage() != Coverage::kAnnotated;
    return {counts, s.stack_id()};
  };
  const int old_device = segment.device();
  const SegmentContribution before = segment.Contribution();
  const auto site_before = segment_site(segment);
  mutate(segment);
  const SegmentContribution after = segment.Contribution();
  const auto site_after = segment_site(segment);
  if (old_device == segment.device()) {
    // A device -1 that exists already holds `before` if it counted: no case is left out.
    if (DeviceState* d = SegmentDevice(old_device, after)) d->Replace(before, after);
  } else {
    if (DeviceState* d = SegmentDevice(old_device, before)) d->Retract(before);
    if (DeviceState* d = SegmentDevice(segment.device(), after)) d->Deposit(after);
  }
  // Only driver allocations are sites, and they always count (on a device they were made on).
  if (site_before != site_after || old_device != segment.device()) {
    if (site_before.first) Device(old_device).RemoveSite(site_before.second, segment.size());
    if (site_after.first) Device(segment.device()).AddSite(site_after.second, segment.size());
  }
  if (after.coverage == Coverage::kAnnotated && before.coverage != Coverage::kAnnotated &&
      segment.stack_id() != 0) {
    carved_sites_.insert(segment.stack_id());
  }
}

template <typename F>
void ProcessModel::Impl::ChangeBlocks(Segment& segment, F&& mutate) {
  if (!segment.StaysAnnotatedAndCounted()) [[unlikely]] {
    Change(segment, std::forward<F>(mutate));
    return;
  }
  // Counted before and after: its device exists (or is made, as Change's SegmentDevice would);
  // an annotated segment is no site of its own, and blocks move no segment between devices.
  const SegmentContribution before = segment.AnnotatedContribution();
  mutate(segment);
  Device(segment.device()).Replace(before, segment.AnnotatedContribution());
}

void ProcessModel::Impl::EraseSegment(SegmentIndex::iterator it) {
  Segment& s = *it->second;
  const SegmentContribution c = s.Contribution();
  // nullptr: a reservation nothing was mapped into, so no blocks either (they would count).
  if (DeviceState* device = SegmentDevice(s.device(), c)) {
    device->Retract(c);
    if (s.kind() == SegmentKind::kDriverAllocation) {
      device->driver_segment_bytes -= std::min(device->driver_segment_bytes, s.size());
      if (s.coverage() != Coverage::kAnnotated) device->RemoveSite(s.stack_id(), s.size());
    }
    // Blocks die with their segment.
    s.ForEachBlock(
        [&](uint64_t, const SubBlock& block) { device->RemoveSite(block.stack_id, block.size); });
  }
  if (s.block_count() > 0) {
    if (died_blocks_.size() + s.block_count() > kMaxDiedBlocks) died_blocks_.clear();
    s.ForEachBlock([&](uint64_t address, const SubBlock&) { died_blocks_.insert(address); });
  }
  // Mappings still in a freed reservation no longer hold their handles.
  for (const auto& [address, mapping] : s.mappings()) SetHandleMappings(mapping.handle, -1);
  ForgetCached(s);
  segments_.erase(it);
  delete &s;
}

void ProcessModel::Impl::DeleteSegments() {
  for (const auto& [begin, indexed] : segments_) delete indexed.segment;
  segments_.clear();
}

void ProcessModel::Impl::ClassifyPendingSegments() {
  std::vector<uint64_t> still_pending;
  for (uint64_t begin : unclassified_segments_) {
    auto it = segments_.find(begin);
    if (it == segments_.end()) continue;
    const std::optional<bool> via = stacks_.PassesThroughCachingAllocator(it->second->stack_id());
    if (!via) {
      still_pending.push_back(begin);
      continue;
    }
    Change(*it->second, [&](Segment& s) { s.set_via_caching_allocator(via); });
  }
  unclassified_segments_ = std::move(still_pending);
}

// ---------------------------------------------------------------------------------------------
// Handles and mappings.

void ProcessModel::Impl::DepositHandle(const PhysicalHandle& h, int sign) {
  DeviceState& device = Device(h.device);
  auto apply = [sign](uint64_t& field, uint64_t bytes) {
    field = sign > 0 ? field + bytes : field - std::min(field, bytes);
  };
  if (h.imported) {
    apply(device.imported_bytes, h.size);
    return;
  }
  apply(device.handle_bytes, h.size);
  if (h.mappings == 0) apply(device.unmapped_handle_bytes, h.size);
}

void ProcessModel::Impl::SetHandleMappings(uint64_t handle, int delta) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  PhysicalHandle& h = it->second;
  DepositHandle(h, -1);
  h.mappings = delta < 0 ? h.mappings - std::min<uint64_t>(h.mappings, -delta) : h.mappings + delta;
  if (h.refs <= 0 && h.mappings == 0) {
    handles_.erase(it);  // released and now unmapped everywhere: the memory is freed
    return;
  }
  DepositHandle(h, +1);
}

Segment* ProcessModel::Impl::Reserve(uint64_t address, uint64_t size, int device,
                                     uint64_t stack_id) {
  if (!CanPlaceSegment(address, size)) {
    ++unmatched_;
    return nullptr;
  }
  auto old = segments_.find(address);
  if (old != segments_.end()) {
    ++unmatched_;  // its free was lost
    EraseSegment(old);
  }
  // No segment starts at `address` now: the entry goes in.
  Segment& s = *new Segment(SegmentKind::kVmmReservation, address, size, device, stack_id);
  segments_.try_emplace(address, IndexedSegment{size, &s});
  s.set_via_caching_allocator(stacks_.PassesThroughCachingAllocator(stack_id));
  if (!s.via_caching_allocator()) unclassified_segments_.push_back(address);
  const SegmentContribution c = s.Contribution();
  if (DeviceState* d = SegmentDevice(device, c)) d->Deposit(c);
  return &s;
}

Segment* ProcessModel::Impl::InferReservation(uint64_t address, uint64_t size, int device,
                                              uint64_t stack_id) {
  auto joins = [&](SegmentIndex::const_iterator it) {
    const Segment& s = *it->second;
    return s.kind() == SegmentKind::kVmmReservation && s.inferred() && s.device() == device;
  };
  // The inferred reservations ending where the mapping begins and beginning where it ends.
  std::vector<uint64_t> parts;
  auto next = segments_.lower_bound(address);
  // (A segment at `address` itself is one Reserve replaces, its free lost: no joining then.)
  if (size > 0 && RangeFits(address, size) &&
      (next == segments_.end() || next->first >= address + size)) {
    if (next != segments_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size == address && joins(prev)) parts.push_back(prev->first);
    }
    if (next != segments_.end() && next->first == address + size && joins(next)) {
      parts.push_back(next->first);
    }
  }
  if (parts.empty()) {
    Segment* s = Reserve(address, size, device, stack_id);
    if (s != nullptr) s->set_inferred(true);
    return s;
  }
  // Take the parts out of the index and off their device, and put them back as one segment
  // with their mappings and blocks. Their handles stay mapped and their blocks' sites stay on
  // the device: only where the bytes sit changes.
  std::vector<std::unique_ptr<Segment>> taken;
  for (uint64_t begin : parts) {
    auto it = segments_.find(begin);
    Segment& s = *it->second;
    const SegmentContribution c = s.Contribution();
    if (DeviceState* d = SegmentDevice(s.device(), c)) d->Retract(c);
    ForgetCached(s);
    taken.emplace_back(it->second.segment);
    segments_.erase(it);
  }
  const uint64_t begin = std::min(address, taken.front()->begin());
  const uint64_t end = std::max(address + size, taken.back()->end());
  auto merged = std::make_unique<Segment>(SegmentKind::kVmmReservation, begin, end - begin, device,
                                          taken.front()->stack_id());
  merged->set_inferred(true);
  bool annotated = false;
  std::optional<bool> via;
  for (const auto& part : taken) {
    annotated = annotated || part->coverage() == Coverage::kAnnotated;
    if (!via.value_or(false)) via = part->via_caching_allocator();
    for (const auto& [at, mapping] : part->mappings()) merged->Map(at, mapping);
  }
  merged->set_via_caching_allocator(via);
  if (!via) unclassified_segments_.push_back(begin);
  if (annotated) merged->BecomeAnnotated();
  for (const auto& part : taken) {
    part->ForEachBlock([&](uint64_t at, const SubBlock& block) {
      BlockSite replaced;
      merged->AllocBlock(at, block, &replaced);  // disjoint parts: never rejected
    });
  }
  Segment* s = merged.get();
  segments_.try_emplace(begin, IndexedSegment{end - begin, merged.release()});
  const SegmentContribution c = s->Contribution();
  if (DeviceState* d = SegmentDevice(device, c)) d->Deposit(c);
  return s;
}

bool ProcessModel::Impl::FreeInferredReservations(uint64_t address, uint64_t size, int* device) {
  if (!RangeFits(address, size)) return false;
  std::vector<uint64_t> inside;
  for (auto it = segments_.lower_bound(address);
       it != segments_.end() && it->first < address + size; ++it) {
    const Segment& s = *it->second;
    if (s.kind() == SegmentKind::kVmmReservation && s.inferred() && s.end() <= address + size) {
      inside.push_back(it->first);
    }
  }
  if (inside.empty()) return false;
  *device = segments_.find(inside.front())->second->device();
  for (uint64_t begin : inside) EraseSegment(segments_.find(begin));
  return true;
}

void ProcessModel::Impl::MapInto(uint64_t address, uint64_t size, uint64_t offset, uint64_t handle,
                                 int device, uint64_t stack_id) {
  // Decide where the mapping goes before touching any state, so a mapping that cannot be
  // placed (outside its reservation, over another mapping or segment, wrapping around) leaves
  // no trace but the unmatched count.
  Segment* s = SegmentContaining(address);
  const bool in_reservation = s != nullptr && s->kind() == SegmentKind::kVmmReservation;
  const bool placeable = in_reservation
                             ? s->Encloses(address, size) && !s->MappingOverlaps(address, size)
                             : CanPlaceSegment(address, size);
  if (!placeable) {
    ++unmatched_;
    return;
  }
  auto h = handles_.find(handle);
  if (h == handles_.end()) {
    // Created before the agent saw it (attach) or the create was dropped: account what the
    // mapping proves exists. Only the latter is a mismatch: a stream that joined late was
    // bound to meet memory made before.
    if (history_complete_) ++unmatched_;
    PhysicalHandle ph;
    ph.size = RangeFits(offset, size) ? offset + size : size;
    ph.device = device;
    ph.stack_id = stack_id;
    h = handles_.emplace(handle, ph).first;
    DepositHandle(h->second, +1);
  }
  // Copied out: Reserve below may erase a stale segment and with it handles (rehashing).
  const int handle_device = h->second.device;
  Mapping mapping;
  mapping.size = size;
  mapping.handle = handle;
  mapping.offset = offset;
  mapping.handle_size = h->second.size;
  mapping.imported = h->second.imported;
  if (!in_reservation) {
    // The reservation predates the agent: the mapping is the smallest reservation it proves,
    // joined to the inferred ones it touches.
    if (history_complete_) ++unmatched_;
    s = InferReservation(address, size, handle_device, stack_id);
    if (s == nullptr) return;  // not reached: CanPlaceSegment said it fits
  } else if (auto old = s->mappings().find(address); old != s->mappings().end()) {
    // A mapping at the same VA: its unmap was lost. Take it out properly, so its bytes and its
    // handle's mapping count do not stay behind.
    ++unmatched_;
    const uint64_t old_end = address + old->second.size;
    std::vector<std::pair<uint64_t, int>> changes;
    Change(*s, [&](Segment& seg) { changes = seg.Unmap(address, old_end); });
    for (const auto& [old_handle, delta] : changes) SetHandleMappings(old_handle, delta);
  }
  Change(*s, [&](Segment& seg) {
    if (seg.device() < 0 && !mapping.imported) seg.set_device(handle_device);
    seg.Map(address, mapping);
  });
  SetHandleMappings(handle, +1);
}

// ---------------------------------------------------------------------------------------------
// Frames.

void ProcessModel::Impl::Apply(const v1::Frame& frame) {
  ++frames_;
  switch (frame.body_case()) {
    case v1::Frame::kHello:
      OnHello(frame.hello());
      break;
    case v1::Frame::kDevice:
      OnDevice(frame.device());
      break;
    case v1::Frame::kModuleMap:
      stacks_.AddModules(frame.module_map());
      ClassifyPendingSegments();
      break;
    case v1::Frame::kStacks:
      stacks_.AddStacks(frame.stacks());
      ClassifyPendingSegments();
      break;
    case v1::Frame::kSymbolizedStack:
      stacks_.AddSymbolizedStack(frame.symbolized_stack());
      ClassifyPendingSegments();
      break;
    case v1::Frame::kSymbolTable:
      stacks_.AddSymbolTable(frame.symbol_table());
      break;
    // Every event but a sample or a mark means time passed in the program, in which blocks
    // known only at syncs may have changed unseen (blocks_fresh_).
    case v1::Frame::kAlloc:
      ApplyAlloc(frame.alloc());
      return;
    case v1::Frame::kFree:
      ApplyFree(frame.free());
      return;
    case v1::Frame::kMap:
      ApplyStateEvent(frame.map(), [this](const v1::MapEvent& e) {
        OnMap(e);
        KeepPeaksOpen();
      });
      return;
    case v1::Frame::kHandle:
      ApplyStateEvent(frame.handle(), [this](const v1::HandleEvent& e) {
        OnHandle(e);
        KeepPeaksOpen();
      });
      return;
    case v1::Frame::kBlock:
      // A site update is dispatched here, not in OnBlock's switch: one more case there cost
      // OnBlock the inlining of its recent-event slot (+1 % of a replay's instructions).
      if (frame.block().op() >= v1::BlockEvent::OP_SITE) [[unlikely]] {
        ApplyStateEvent(frame.block(), [this](const v1::BlockEvent& e) {
          OnBlockSite(e);
          KeepPeaksOpen();
        });
      } else {
        ApplyBlock(frame.block());
      }
      return;
    case v1::Frame::kFailed:
      ++events_;
      OnFailed(frame.failed());  // judged with the blocks as fresh as they are now
      FinishEvent(frame.failed().seq(), frame.failed().time_ns());
      blocks_fresh_ = false;
      return;
    case v1::Frame::kMemInfo:
      ++events_;
      OnMemInfo(frame.mem_info());
      KeepPeaksOpen();
      FinishEvent(frame.mem_info().seq(), frame.mem_info().time_ns());
      return;
    case v1::Frame::kMark:
      ++events_;
      OnMark(frame.mark());
      KeepPeaksOpen();
      FinishEvent(frame.mark().seq(), frame.mark().time_ns());
      return;
    case v1::Frame::kDrops:
      OnDrops(frame.drops());
      break;
    case v1::Frame::kSnapshot:
      // A seek point changes nothing the per-event bookkeeping looks at.
      if (OnSnapshot(frame.snapshot())) {
        FinishEvent(frame.snapshot().seq(), frame.snapshot().time_ns());
      }
      return;
    case v1::Frame::kEnd:
      OnEnd(frame.end());
      break;
    case v1::Frame::kPacked:  // FrameReader returns a packed run's events, never the run
    case v1::Frame::BODY_NOT_SET:
      break;
  }
  // Frames that are not events still may have touched devices (reclassification).
  FinishEvent(last_seq_, last_time_ns_);
}

// Apply(frame)'s cases of the three common events, reading the decoded fields through views
// (no message built); the rest (map, handle, block sites: rare) through a frame as before.
void ProcessModel::Impl::Apply(const HotEvent& event) {
  switch (event.body) {
    case v1::Frame::kAlloc:
      ++frames_;
      ApplyAlloc(HotAllocView(event));
      return;
    case v1::Frame::kFree:
      ++frames_;
      ApplyFree(HotFreeView(event));
      return;
    case v1::Frame::kBlock:
      if (HotBlockView(event).op() < v1::BlockEvent::OP_SITE) [[likely]] {
        ++frames_;
        ApplyBlock(HotBlockView(event));
        return;
      }
      break;
    default:
      break;
  }
  Apply(*hot_frames_.Store(event));
}

void ProcessModel::Impl::FinishEvent(uint64_t seq, uint64_t time_ns) {
  if (seq != 0) SeenSeq(seq);
  last_time_ns_ = std::max(last_time_ns_, time_ns);
  ForEachTouched([&](DeviceState* d) {
    d->AfterEvent(seq, time_ns);
    d->touched = false;
  });
  touched_count_ = 0;
  touched_more_.clear();
}

void ProcessModel::Impl::OnHello(const v1::Hello& hello) {
  pid_ = hello.pid();
  host_ = hello.host();
  exe_ = hello.exe();
  attached_ = hello.attached() || hello.backend() == v1::Hello::BACKEND_INJECTED;
  imported_ = hello.backend() == v1::Hello::BACKEND_IMPORTED;
  release_stacks_off_ = hello.release_stacks_off();
  stack_depth_ = hello.stack_depth();
  if (attached_) history_complete_ = false;
  if (hello.has_rank()) rank_ = hello.rank();
  resumed_ = hello.resumed();
  exec_image_ = hello.exec_image();
  if (hello.has_world_size()) world_size_ = hello.world_size();
  if (hello.realtime_at_start_ns() != 0 && hello.monotonic_at_start_ns() != 0) {
    realtime_minus_monotonic_ns_ =
        static_cast<int64_t>(hello.realtime_at_start_ns() - hello.monotonic_at_start_ns());
  }
}

void ProcessModel::Impl::OnDevice(const v1::DeviceInfo& info) {
  DeviceState& d = Device(info.ordinal());
  d.uuid_hex = absl::BytesToHexString(info.uuid());
  d.name = info.name();
  if (info.total_bytes() > 0) d.info_total = info.total_bytes();
}

template <typename AllocEventT>
void ProcessModel::Impl::OnAlloc(const AllocEventT& e, bool from_snapshot) {
  if (e.result() != 0) return;  // nothing changed; failures come as FailedAlloc
  const MemoryKind kind = ResolveKind(e.kind(), e.api(), e.in_capture());
  PlaceAllocation(e.address(), e.size(), e.device(), e.stack_id(), e.pool(), kind);
  if (e.failed_release_result() != 0) {
    Record(e.device(), e, EventKind::kPutBack, e.failed_release_result());
  } else {
    Record(e.device(), e, EventKind::kAlloc);
  }
  // A put-back (its release failed after the agent shipped the FreeEvent) is no request the
  // driver granted: it says nothing of whether an earlier failure has been overcome.
  if (!from_snapshot && kind != v1::MEMORY_KIND_IPC_IMPORT && e.failed_release_result() == 0) {
    analyzer_.OnSuccess(e.device(), e.size(), e.seq());
  }
}

bool ProcessModel::Impl::PlaceAllocation(uint64_t address, uint64_t size, int device,
                                         uint64_t stack_id, uint64_t pool, MemoryKind kind) {
  switch (kind) {
    case v1::MEMORY_KIND_POOL:
    case v1::MEMORY_KIND_GRAPH:
    case v1::MEMORY_KIND_MANAGED:
    case v1::MEMORY_KIND_IPC_IMPORT: {
      auto old = allocations_.find(address);
      if (old != allocations_.end()) {
        if (old->second.pending_free) {
          CompletePoolFree(address);  // the address is reused: the stream passed the free
        } else {
          ++unmatched_;
          allocations_.erase(old);
        }
      }
      allocations_[address] = {device, kind, size, stack_id, pool, false};
      DeviceState& d = Device(device);
      if (kind == v1::MEMORY_KIND_POOL) {
        d.UpdatePool(pool, [&](PoolState& p) {
          p.used += size;
          ++p.blocks;
        });
        d.AddSite(stack_id, size);
      } else if (kind == v1::MEMORY_KIND_GRAPH) {
        d.graph_bytes += size;
        ++d.graph_blocks;
        d.AddSite(stack_id, size);
      } else if (kind == v1::MEMORY_KIND_MANAGED) {
        d.managed_bytes += size;
      } else {
        d.imported_bytes += size;
      }
      return true;
    }
    default:
      break;
  }
  // A driver allocation: a segment of its own. CanPlaceSegment's test written out, so that its
  // search also finds a segment at the same address and gives the insertion hint.
  auto next = segments_.lower_bound(address);
  const bool same_address = next != segments_.end() && next->first == address;
  const bool overlaps = !RangeFits(address, size) ||
                        (next != segments_.begin() &&
                         std::prev(next)->first + std::prev(next)->second.size > address) ||
                        [&] {
                          auto after = same_address ? std::next(next) : next;
                          return after != segments_.end() && after->first < address + size;
                        }();
  if (overlaps) {
    ++unmatched_;
    return false;
  }
  auto segment =
      std::make_unique<Segment>(SegmentKind::kDriverAllocation, address, size, device, stack_id);
  SegmentIndex::iterator it;
  if (same_address) {
    ++unmatched_;  // its free was lost
    EraseSegment(next);
    it = segments_.try_emplace(address).first;
  } else {
    it = segments_.emplace_hint(next, address, IndexedSegment{});
  }
  // Filled in place: an IndexedSegment built just before the insert was copied into the node
  // 16 bytes at once from its two 8-byte stores, which the CPU cannot forward (a stall that
  // held half of this function's perf samples).
  it->second.size = size;
  it->second.segment = segment.release();
  Segment& s = *it->second;
  s.set_via_caching_allocator(stacks_.PassesThroughCachingAllocator(stack_id));
  if (!s.via_caching_allocator()) unclassified_segments_.push_back(address);
  DeviceState& d = Device(device);
  d.driver_segment_bytes += size;
  d.Deposit(s.Contribution());
  if (s.coverage() != Coverage::kAnnotated) d.AddSite(stack_id, size);
  return true;
}

void ProcessModel::Impl::CompletePoolFree(uint64_t address) {
  auto it = allocations_.find(address);
  if (it == allocations_.end()) return;
  const LiveAllocation a = it->second;
  allocations_.erase(it);
  DeviceState& d = Device(a.device);
  d.UpdatePool(a.pool, [&](PoolState& p) {
    if (a.pending_free) {
      p.pending -= std::min(p.pending, a.size);
      p.pending_addresses.erase(address);
    } else {
      p.used -= std::min(p.used, a.size);
    }
    p.blocks -= std::min<uint64_t>(p.blocks, 1);
  });
  d.RemoveSite(a.stack_id, a.size);
}

template <typename FreeEventT>
void ProcessModel::Impl::OnFree(const FreeEventT& e) {
  if (e.result() != 0) return;
  const bool async = IsAsyncFree(e.api());
  int device = e.device();
  auto seg = segments_.find(e.address());
  if (seg != segments_.end() && seg->second->kind() == SegmentKind::kDriverAllocation) {
    device = seg->second->device();
    EraseSegment(seg);
  } else if (auto it = allocations_.find(e.address()); it != allocations_.end()) {
    LiveAllocation& a = it->second;
    device = a.device;
    DeviceState& d = Device(a.device);
    switch (a.kind) {
      case v1::MEMORY_KIND_POOL:
        if (async && !a.pending_free) {
          // The agent cannot see stream progress: pending until the next sample of this pool
          // or the address is handed out again (REPORT.md "Pools").
          a.pending_free = true;
          const uint64_t address = e.address();
          const uint64_t size = a.size;
          d.UpdatePool(a.pool, [&](PoolState& p) {
            p.used -= std::min(p.used, size);
            p.pending += size;
            p.pending_addresses.insert(address);
          });
        } else {
          CompletePoolFree(e.address());
        }
        break;
      case v1::MEMORY_KIND_GRAPH:
        d.graph_bytes -= std::min(d.graph_bytes, a.size);
        d.graph_blocks -= std::min<uint64_t>(d.graph_blocks, 1);
        d.RemoveSite(a.stack_id, a.size);
        allocations_.erase(it);
        break;
      case v1::MEMORY_KIND_MANAGED:
        d.managed_bytes -= std::min(d.managed_bytes, a.size);
        allocations_.erase(it);
        break;
      default:
        d.imported_bytes -= std::min(d.imported_bytes, a.size);
        allocations_.erase(it);
        break;
    }
  } else {
    ++unmatched_;  // allocated before the agent saw it, or the alloc was dropped
  }
  Record(device, e, async ? EventKind::kFreeAsync : EventKind::kFree);
}

void ProcessModel::Impl::OnMap(const v1::MapEvent& e) {
  if (e.result() != 0) return;
  int device = e.device();
  EventKind kind = EventKind::kMap;
  switch (e.op()) {
    case v1::MapEvent::OP_RESERVE:
      kind = EventKind::kReserve;
      Reserve(e.address(), e.size(), e.device(), e.stack_id());
      break;
    case v1::MapEvent::OP_FREE_RANGE: {
      kind = EventKind::kFreeRange;
      auto it = segments_.find(e.address());
      if (it != segments_.end() && it->second->kind() == SegmentKind::kVmmReservation &&
          !it->second->inferred()) {
        device = it->second->device();
        EraseSegment(it);
      } else if (int freed = -1; FreeInferredReservations(e.address(), e.size(), &freed)) {
        // An inferred reservation begins where its first known mapping does: the freed range
        // says where the reservation really was.
        device = freed;
      } else {
        ++unmatched_;
      }
      break;
    }
    case v1::MapEvent::OP_MAP:
      MapInto(e.address(), e.size(), e.offset(), e.handle(), e.device(), e.stack_id());
      if (Segment* s = SegmentContaining(e.address())) device = s->device();
      break;
    case v1::MapEvent::OP_UNMAP: {
      kind = EventKind::kUnmap;
      Segment* s = SegmentContaining(e.address());
      if (s == nullptr || s->kind() != SegmentKind::kVmmReservation) {
        ++unmatched_;
        break;
      }
      device = s->device();
      std::vector<std::pair<uint64_t, int>> changes;
      Change(*s, [&](Segment& seg) { changes = seg.Unmap(e.address(), e.address() + e.size()); });
      if (changes.empty()) ++unmatched_;
      for (const auto& [handle, delta] : changes) SetHandleMappings(handle, delta);
      break;
    }
    default:
      ++unmatched_;
      break;
  }
  Record(device, e, kind);
}

void ProcessModel::Impl::OnHandle(const v1::HandleEvent& e) {
  if (e.result() != 0) return;
  int device = e.device();
  EventKind kind = EventKind::kHandleCreate;
  auto it = handles_.find(e.handle());
  switch (e.op()) {
    case v1::HandleEvent::OP_CREATE:
    case v1::HandleEvent::OP_IMPORT: {
      const bool imported = e.op() == v1::HandleEvent::OP_IMPORT;
      kind = imported ? EventKind::kHandleImport : EventKind::kHandleCreate;
      if (it != handles_.end()) {
        ++unmatched_;  // the handle value was reused: its release was lost
        DepositHandle(it->second, -1);
        handles_.erase(it);
      }
      PhysicalHandle h;
      h.size = e.size();
      h.device = e.device();
      h.imported = imported;
      h.stack_id = e.stack_id();
      handles_.emplace(e.handle(), h);
      DepositHandle(h, +1);
      if (!imported) analyzer_.OnSuccess(e.device(), e.size(), e.seq());
      break;
    }
    case v1::HandleEvent::OP_RETAIN:
      kind = EventKind::kHandleRetain;
      if (it == handles_.end()) {
        ++unmatched_;
      } else {
        ++it->second.refs;
        device = it->second.device;
      }
      break;
    case v1::HandleEvent::OP_RELEASE:
      kind = EventKind::kHandleRelease;
      if (it == handles_.end()) {
        ++unmatched_;
        break;
      }
      device = it->second.device;
      --it->second.refs;
      // Released while still mapped: the memory stays until the last unmap.
      if (it->second.refs <= 0 && it->second.mappings == 0) {
        DepositHandle(it->second, -1);
        handles_.erase(it);
      }
      break;
    case v1::HandleEvent::OP_EXPORT:
      kind = EventKind::kHandleExport;
      if (it != handles_.end()) device = it->second.device;
      break;
    default:
      ++unmatched_;
      break;
  }
  Record(device, e, kind);
}

void ProcessModel::Impl::MarkSubAllocated(uint64_t segment_base) {
  auto it = segments_.find(segment_base);
  if (it == segments_.end()) return;  // not a segment (e.g. a pool allocation): nothing to carve
  Change(*it->second, [](Segment& seg) { seg.BecomeAnnotated(); });
}

Segment* ProcessModel::Impl::PlaceBlock(uint64_t address, const SubBlock& block, int device,
                                        uint64_t seq) {
  Segment* s = SegmentContaining(address);
  if (s == nullptr) {
    // Not inside any segment we know: keep and report it, never drop it.
    orphans_[address] = {seq, device, address, block.size, block.stack_id, block.allocator};
    ++orphans_total_;
    return nullptr;
  }
  BlockSite replaced;
  Segment::Placement placement = Segment::Placement::kRejected;
  // A rejected block changes nothing, so the contribution put back is the one taken out.
  ChangeBlocks(*s, [&](Segment& seg) { placement = seg.AllocBlock(address, block, &replaced); });
  if (placement == Segment::Placement::kRejected) {
    // Past its segment's end or over another block: placing it would count bytes twice.
    ++unmatched_;
    return s;
  }
  DeviceState& d = Device(s->device());
  if (placement == Segment::Placement::kReplaced) {
    ++unmatched_;
    d.RemoveSite(replaced.stack_id, replaced.size);
  }
  d.AddSite(block.stack_id, block.size);
  d.SettlePeakAfterBlock();
  return s;
}

template <typename BlockEventT>
void ProcessModel::Impl::OnBlock(const BlockEventT& e) {
  if (e.result() != 0) return;
  int device = e.device();
  EventKind kind = EventKind::kBlockAlloc;
  switch (e.op()) {
    case v1::BlockEvent::OP_ALLOC: {
      SubBlock b{e.size(), e.stack_id(), e.seq(), e.stream(), e.pool(), e.allocator(), false};
      if (!died_blocks_.empty()) [[unlikely]] {
        died_blocks_.erase(e.address());  // a free there is this block's from now on
      }
      if (const Segment* s = PlaceBlock(e.address(), b, e.device(), e.seq())) {
        device = s->device();
      }
      analyzer_.OnSuccess(device, e.size(), e.seq());
      break;
    }
    case v1::BlockEvent::OP_FREE:
    case v1::BlockEvent::OP_FREE_PENDING: {
      const bool pending = e.op() == v1::BlockEvent::OP_FREE_PENDING;
      kind = pending ? EventKind::kBlockFreePending : EventKind::kBlockFree;
      // A block that died with its segment: its free is late, not unmatched.
      auto died = [&] {
        auto it = died_blocks_.find(e.address());
        if (it == died_blocks_.end()) return false;
        if (!pending) died_blocks_.erase(it);
        return true;
      };
      Segment* s = SegmentContaining(e.address());
      if (s == nullptr) {
        auto o = orphans_.find(e.address());
        if (o != orphans_.end()) {
          if (!pending) orphans_.erase(o);
        } else if (!died()) {
          ++unmatched_;
        }
        break;
      }
      device = s->device();
      bool found = false;
      BlockSite freed;
      ChangeBlocks(*s, [&](Segment& seg) {
        found = pending ? seg.MarkPendingFree(e.address()) : seg.FreeBlock(e.address(), &freed);
      });
      if (!found) {
        if (!died()) ++unmatched_;
      } else if (!pending) {
        // Remembering the blocks live at the peak costs a hash insert per free: only for
        // streams that send sites after the fact.
        if (late_sites_) [[unlikely]] {
          Device(device).RemoveFreedBlockSite(e.address(), freed);
        } else {
          Device(device).RemoveSite(freed.stack_id, freed.size);
        }
      }
      break;
    }
    default:
      ++unmatched_;
      break;
  }
  Record(device, e, kind);
}

void ProcessModel::Impl::OnBlockSite(const v1::BlockEvent& e) {
  late_sites_ = true;
  if (e.op() == v1::BlockEvent::OP_SITE_FREED) {
    // Only the sites at the peak can change; a block that was not live there (or whose free
    // this model did not see) changes nothing, and is no mismatch either.
    if (auto d = devices_.find(e.device()); d != devices_.end()) {
      d->second.MoveFreedBlockSite(e.address(), e.size(), e.stack_id());
    }
    return;
  }
  if (e.op() != v1::BlockEvent::OP_SITE) {
    ++unmatched_;  // an op from a newer format
    return;
  }
  // Only the site moves; no figure changes, so no recent event either. A block that is no
  // longer here (freed before the adapter's update reached us) changes nothing.
  Segment* s = SegmentContaining(e.address());
  BlockSite before;
  if (s != nullptr && s->SetBlockSite(e.address(), e.stack_id(), &before)) {
    Device(s->device()).MoveSite(before.stack_id, e.stack_id(), before.size, before.placed_seq);
  } else if (auto o = orphans_.find(e.address()); o != orphans_.end()) {
    o->second.stack_id = e.stack_id();
  }
}

OomFigures ProcessModel::Impl::FiguresAt(int device, uint64_t requested, uint64_t stream,
                                         uint64_t pool, bool from_failure) {
  DeviceState& d = Device(device);
  OomFigures f;
  f.requested_bytes = requested;
  f.mem_info_from_failure = from_failure;
  if (auto t = d.total()) {
    f.device_total_bytes = Measured<uint64_t>::Known(*t);
  } else {
    f.device_total_bytes = Measured<uint64_t>::Unknown("no DeviceInfo or MemInfo total");
  }
  if (d.last_sample) {
    f.device_free_bytes = Measured<uint64_t>::Known(d.last_sample->free);
  } else {
    f.device_free_bytes = Measured<uint64_t>::Unknown("no MemInfo sample before the failure");
  }
  const DeviceMetrics m = d.Metrics();
  f.reserved_bytes = m.reserved;
  f.allocated_bytes = m.allocated;
  f.opaque_bytes = m.opaque;
  f.opaque_segments = d.opaque_segments();
  f.cached_bytes = m.cached;
  f.pending_free_bytes = m.pending;
  f.pool_free_bytes = m.pool_free;
  f.graph_bytes = d.graph_bytes;
  f.largest_free_range_bytes = m.largest_free;
  f.largest_free_range_if_pending_completed_bytes = m.largest_free;
  // Only failures look at individual segments: O(segments), off the per-event path.
  for (const auto& [begin, segment] : segments_) {
    const Segment& s = *segment;
    if (s.device() != device || s.coverage() != Coverage::kAnnotated) continue;
    if (s.kind() == SegmentKind::kVmmReservation) f.carved_reservation_bytes += s.backing_bytes();
    const auto sp = s.stream_and_pool();
    // A segment shared by several streams/pools (or without blocks yet) may serve anyone.
    if (!sp || (sp->first == stream && sp->second == pool)) {
      f.largest_compatible_free_range_bytes =
          std::max(f.largest_compatible_free_range_bytes, s.largest_free_bytes());
    }
    f.largest_free_range_if_pending_completed_bytes = std::max(
        f.largest_free_range_if_pending_completed_bytes, s.LargestFreeIfPendingCompleted());
  }
  if (f.device_total_bytes.known() && f.device_free_bytes.known()) {
    const uint64_t used = *f.device_total_bytes.value -
                          std::min(*f.device_total_bytes.value, *f.device_free_bytes.value);
    f.untracked_bytes = Measured<uint64_t>::Known(used - std::min(used, m.reserved));
  } else {
    f.untracked_bytes = Measured<uint64_t>::Unknown("no device free/total sample");
  }
  if (block_syncs_ > 0 && !blocks_fresh_) f.blocks_synced_at_seq = last_block_sync_seq_;
  return f;
}

void ProcessModel::Impl::OnFailed(const v1::FailedAlloc& e) {
  FailedAllocation f;
  f.seq = e.seq();
  f.time_ns = e.time_ns();
  f.api = e.api();
  f.api_name = ApiName(e.api());
  f.result = e.result();
  f.device = e.device();
  f.requested_bytes = e.size();
  f.stream = e.stream();
  f.pool = e.pool();
  f.stack_id = e.stack_id();
  f.from_sub_allocator = e.from_sub_allocator();
  f.is_oom = e.from_sub_allocator() || e.result() == kCudaOutOfMemory;
  DeviceState& d = Device(e.device());
  // The failure's own sample is the best one there is; it is also the device's latest.
  if (e.has_mem_info()) {
    d.last_sample = DeviceState::MemSample{e.device_free_bytes(), e.device_total_bytes(), e.seq(),
                                           d.ReservedNow()};
  }
  RecentEvent event{
      e.seq(),      e.time_ns(), EventKind::kFailedAlloc, e.api(), 0, e.size(), e.result(),
      e.stack_id(), {}};
  d.RecordEvent(event);
  OomPostMortem pm;
  if (f.is_oom) {
    pm.figures = FiguresAt(e.device(), e.size(), e.stream(), e.pool(), e.has_mem_info());
    pm.sites_at_failure = TopSites(stacks_.MergeSites(d.sites().All()), options_.top_sites);
    pm.sites_at_peak = TopSites(stacks_.MergeSites(d.sites().AllAtMark()), options_.top_sites);
    pm.peak_reserved_bytes = d.peak_reserved();
    pm.recent_events = d.RecentEvents();
    pm.approximate = drop_interval_open_;
    CaptureMap(d, e.device(), &pm);
  }
  analyzer_.OnFailure(f, std::move(pm));
}

void ProcessModel::Impl::CaptureMap(const DeviceState& d, int device, OomPostMortem* pm) {
  // Per event applied, on average, what copies of maps may cost (entries: segments + blocks).
  constexpr uint64_t kMapEntriesPerEvent = 64;
  const uint64_t entries = d.segment_count() + d.block_count();
  if (options_.max_postmortem_maps == 0) {
    pm->map_missing = "segment maps of failures are turned off (max_postmortem_maps = 0)";
  } else if (entries > options_.postmortem_map_max_entries) {
    pm->map_missing = absl::StrFormat(
        "the device held %d segments and blocks at the failure, more than a map copies (%d)",
        entries, options_.postmortem_map_max_entries);
  } else if (map_entries_copied_ + entries >
             kMapEntriesPerEvent * events_ + options_.postmortem_map_max_entries) {
    pm->map_missing = absl::StrFormat(
        "failures came too often to copy a map at each (at most %d segments and blocks per "
        "event on average)",
        kMapEntriesPerEvent);
  } else {
    std::size_t held = 0;
    auto map = std::make_shared<const std::vector<SegmentLayout>>(
        SegmentLayouts(device, options_.postmortem_map_segments, &held));
    map_entries_copied_ += entries;
    pm->segments_left_out = held - map->size();
    pm->segments_at_failure = std::move(map);
  }
}

void ProcessModel::Impl::OnMemInfo(const v1::MemInfo& e) {
  DeviceState& d = Device(e.device());
  if (e.total_bytes() > 0 || e.free_bytes() > 0) {
    d.last_sample =
        DeviceState::MemSample{e.free_bytes(), e.total_bytes(), e.seq(), d.ReservedNow()};
  }
  if (e.pool() != 0) {
    // A pool sample comes after the agent synchronized enough to read the pool: frees pending
    // in it are taken as done (REPORT.md "Pools").
    std::vector<uint64_t> pending;
    if (auto it = d.pools().find(e.pool()); it != d.pools().end()) {
      pending.assign(it->second.pending_addresses.begin(), it->second.pending_addresses.end());
    }
    for (uint64_t address : pending) CompletePoolFree(address);
    d.UpdatePool(e.pool(), [&](PoolState& p) {
      p.sampled_reserved = e.pool_reserved_bytes();
      p.sampled_used = e.pool_used_bytes();
    });
  }
  d.RecordEvent({e.seq(), e.time_ns(), EventKind::kMemInfo, 0, 0, e.free_bytes(), 0, 0, {}});
}

void ProcessModel::Impl::OnMark(const v1::Mark& e) {
  // Bounded: a program that marks every step for days keeps memory flat.
  if (marks_.size() < ModelSummary::kMaxMarks) {
    marks_.push_back({e.seq(), e.time_ns(), e.label()});
  } else {
    ++marks_left_out_;
  }
  // A sync a replacing snapshot already named (its mark applied after it) counts once, and
  // does not make blocks fresh that the snapshot's later state may have moved past.
  if (e.blocks_synced() && e.seq() > last_block_sync_seq_) {
    ++block_syncs_;
    last_block_sync_seq_ = e.seq();
    blocks_fresh_ = true;
  }
  // The rank the program set itself (an mp.spawn worker's init_process_group): it names the
  // process from now on, in place of its launcher's environment (Hello).
  if (e.has_rank()) {
    rank_ = e.rank();
    world_size_ = e.has_world_size() ? std::optional<uint32_t>(e.world_size()) : std::nullopt;
  }
  for (auto& [ordinal, d] : devices_) {
    d.RecordEvent(
        {e.seq(), e.time_ns(), EventKind::kMark, v1::API_fragscope_mark, 0, 0, 0, 0, e.label()});
  }
}

void ProcessModel::Impl::OnDrops(const v1::Drops& e) {
  // Frames carry both the increment and the running total; either may be all a writer filled.
  const uint64_t before = drops_;
  drops_ = std::max(drops_, snapshot_policy_.OnDrops(e));
  if (drops_ == before) return;
  if (!drop_interval_open_) {
    approximate_.push_back({last_good_seq_, std::nullopt, 0});
    drop_interval_open_ = true;
  }
  approximate_.back().dropped_events += drops_ - before;
  if (e.seq() != 0) last_seq_ = std::max(last_seq_, e.seq());
}

bool ProcessModel::Impl::OnSnapshot(const v1::Snapshot& snap) {
  // The header counts even when the snapshot is only a seek point (a STREAM_START one always
  // replaces). A full agent table matters for every snapshot that does replace (a wake, a
  // resync, a flight-recorder file).
  if (snap.entries_not_held() > 0) {
    if (live_entries_not_held_ == 0) not_held_since_seq_ = snap.seq();
    live_entries_not_held_ = std::max(live_entries_not_held_, snap.entries_not_held());
  }
  if (!snap.complete_history()) {
    history_complete_ = false;
  } else if (snap.reason() == v1::Snapshot::REASON_STREAM_START) {
    // A woken dormant agent kept its live table from the program's first CUDA call: although
    // the stream started late (Hello.attached), nothing before it is unknown.
    history_complete_ = true;
  }
  if (!snapshot_policy_.Replaces(snap)) return false;
  // At the head of the stream: what happened before it is not in this stream.
  if (events_ == 0 && !history_from_seq_) history_from_seq_ = snap.seq();
  if (drop_interval_open_) {
    approximate_.back().to_seq = snap.seq();
    drop_interval_open_ = false;
  } else if (snap.reason() == v1::Snapshot::REASON_RESYNC) {
    // A resync without a Drops frame before it still says events were lost.
    approximate_.push_back({last_good_seq_, snap.seq(), 0});
  }
  // Its blocks are a sync's (a dormant agent kept a snapshot diff's blocks without shipping its
  // marks): known at syncs only, and fresh only if nothing happened after that sync.
  if (snap.last_blocks_synced_seq() > last_block_sync_seq_) {
    ++block_syncs_;
    last_block_sync_seq_ = snap.last_blocks_synced_seq();
    blocks_fresh_ = snap.last_blocks_synced_seq() == snap.seq();
  } else if (block_syncs_ > 0) {
    blocks_fresh_ = blocks_fresh_ && snap.seq() <= last_block_sync_seq_;
  }
  // Replace the stream's live state with the snapshot's.
  DeleteSegments();
  last_segment_ = nullptr;
  if (segment_cache_ != nullptr) std::fill_n(segment_cache_.get(), kCacheSlots, CachedSegment{});
  unclassified_segments_.clear();
  allocations_.clear();
  handles_.clear();
  orphans_.clear();
  for (auto& [ordinal, d] : devices_) {
    d.ResetLive();
    Touch(&d);
  }
  // A sub-allocator's segment comes back annotated when the snapshot says so or when its site's
  // segments were carved before (carved_sites_), even with no block in it now.
  auto carved = [this](bool sub_allocated, uint64_t stack_id) {
    return sub_allocated || (stack_id != 0 && carved_sites_.contains(stack_id));
  };
  for (const v1::LiveReservation& r : snap.reservations()) {
    // A rejected reservation must not annotate a segment left at its address.
    if (Reserve(r.address(), r.size(), r.device(), r.stack_id()) != nullptr &&
        carved(r.sub_allocated(), r.stack_id())) {
      MarkSubAllocated(r.address());
    }
  }
  for (const v1::LiveHandle& lh : snap.handles()) {
    PhysicalHandle h;
    h.size = lh.size();
    h.device = lh.device();
    h.imported = lh.imported();
    h.refs = lh.released() ? 0 : 1;
    h.stack_id = lh.stack_id();
    handles_[lh.handle()] = h;
    DepositHandle(h, +1);
  }
  for (const v1::LiveMapping& m : snap.mappings()) {
    auto h = handles_.find(m.handle());
    const int device = h == handles_.end() ? -1 : h->second.device;
    MapInto(m.address(), m.size(), m.offset(), m.handle(), device, 0);
  }
  // Released handles that nothing maps any more are gone.
  std::vector<uint64_t> dead;
  for (const auto& [id, h] : handles_) {
    if (h.refs <= 0 && h.mappings == 0) dead.push_back(id);
  }
  for (uint64_t id : dead) {
    DepositHandle(handles_.at(id), -1);
    handles_.erase(id);
  }
  for (const v1::LiveAllocation& a : snap.allocations()) {
    const bool placed = PlaceAllocation(a.address(), a.size(), a.device(), a.stack_id(), a.pool(),
                                        ResolveKind(a.kind(), a.api(), false));
    if (placed && carved(a.sub_allocated(), a.stack_id())) MarkSubAllocated(a.address());
  }
  for (const v1::LiveBlock& b : snap.blocks()) {
    SubBlock block{b.size(), b.stack_id(),  snap.seq(),      b.stream(),
                   b.pool(), b.allocator(), b.pending_free()};
    PlaceBlock(b.address(), block, b.device(), snap.seq());
  }
  return true;
}

void ProcessModel::Impl::OnEnd(const v1::End& e) {
  stream_ended_ = true;
  if (e.exit_status() != -1) exit_status_ = e.exit_status();
  ended_by_exec_ = e.exec();
  drops_ = std::max(drops_, e.total_dropped());
  if (e.seq() != 0) SeenSeq(e.seq());
}

ModelSummary ProcessModel::Impl::Summarize() const {
  ModelSummary out;
  out.pid = pid_;
  out.host = host_;
  out.exe = exe_;
  out.attached = attached_;
  out.release_stacks = !release_stacks_off_;
  out.stack_depth = stack_depth_;
  out.imported = imported_;
  out.imported_history = imported_history_;
  out.history_complete = history_complete_;
  out.frames = frames_;
  out.events = events_;
  out.drops = drops_;
  out.last_seq = last_seq_;
  out.stream_ended = stream_ended_;
  out.exit_status = exit_status_;
  out.realtime_minus_monotonic_ns = realtime_minus_monotonic_ns_;
  out.marks = marks_;
  out.marks_left_out = marks_left_out_;
  out.rank = rank_;
  out.resumed = resumed_;
  out.exec_image = exec_image_;
  out.ended_by_exec = ended_by_exec_;
  out.world_size = world_size_;
  out.approximate_intervals = approximate_;
  out.unmatched_events = unmatched_;
  out.live_entries_not_held = live_entries_not_held_;
  out.not_held_since_seq = not_held_since_seq_;
  out.history_from_seq = history_from_seq_;
  out.block_syncs = block_syncs_;
  out.last_block_sync_seq = last_block_sync_seq_;
  out.blocks_known_at_end = block_syncs_ == 0 || blocks_fresh_;
  std::vector<uint64_t> stack_ids;
  for (const auto& [ordinal, d] : devices_) {
    DeviceSummary ds;
    d.FillSummary(&ds);
    ds.sites = TopSites(stacks_.MergeSites(d.sites().All()), options_.top_sites);
    ds.sites_at_peak = TopSites(stacks_.MergeSites(d.sites().AllAtMark()), options_.top_sites);
    if (!ds.untracked_bytes.known() && imported_) {
      ds.untracked_bytes.unknown_reason +=
          "; an imported allocator snapshot has no device total, and free bytes only at its OOMs";
    } else if (!ds.untracked_bytes.known() && !history_complete_) {
      ds.untracked_bytes.unknown_reason +=
          "; the agent started after the program, so memory from before is not known";
    }
    for (const SiteEntry& s : ds.sites) stack_ids.push_back(s.stack_id);
    for (const SiteEntry& s : ds.sites_at_peak) stack_ids.push_back(s.stack_id);
    out.devices.push_back(std::move(ds));
  }
  analyzer_.Collect(&out);
  for (const FailedAllocation& f : out.failed_allocations) {
    if (!f.CountsAsOom()) continue;
    for (DeviceSummary& ds : out.devices) {
      if (ds.ordinal == f.device) {
        ++ds.oom_count;
        break;
      }
    }
  }
  for (uint64_t id : analyzer_.ReferencedStacks()) stack_ids.push_back(id);
  for (const auto& [address, o] : orphans_) {
    out.orphan_blocks.push_back(o);
    stack_ids.push_back(o.stack_id);
  }
  std::sort(out.orphan_blocks.begin(), out.orphan_blocks.end(),
            [](const OrphanBlock& a, const OrphanBlock& b) { return a.address < b.address; });
  out.orphan_blocks_total = orphans_total_;
  for (uint64_t id : stack_ids) {
    if (id == 0 || out.stacks.count(id)) continue;
    if (const StackInfo* s = stacks_.Find(id)) out.stacks[id] = stacks_.Reported(*s);
  }
  out.modules = stacks_.modules();
  out.stored_symbols = stacks_.stored_symbols();
  return out;
}

std::vector<SegmentLayout> ProcessModel::Impl::SegmentLayouts(int device, std::size_t max_segments,
                                                              std::size_t* held_count) const {
  std::vector<const Segment*> held;
  for (const auto& [begin, s] : segments_) {
    if (s->device() == device && s->Contribution().counted) held.push_back(s.segment);
  }
  if (held_count != nullptr) *held_count = held.size();
  if (held.size() > max_segments) {
    // Keep the largest, then restore address order.
    std::stable_sort(held.begin(), held.end(), [](const Segment* a, const Segment* b) {
      return a->backing_bytes() > b->backing_bytes();
    });
    held.resize(max_segments);
    std::sort(held.begin(), held.end(),
              [](const Segment* a, const Segment* b) { return a->begin() < b->begin(); });
  }
  std::vector<SegmentLayout> out;
  out.reserve(held.size());
  for (const Segment* s : held) {
    SegmentLayout l;
    l.device = s->device();
    l.base = s->begin();
    l.size = s->size();
    l.coverage = s->coverage();
    l.vmm_reservation = s->kind() == SegmentKind::kVmmReservation;
    l.stack_id = s->stack_id();
    l.backing_bytes = s->backing_bytes();
    if (!l.vmm_reservation) {
      l.backed.push_back({s->begin(), s->size()});
    } else {
      for (const auto& [address, m] : s->mappings()) {
        if (m.imported) continue;
        if (!l.backed.empty() && l.backed.back().address + l.backed.back().size == address) {
          l.backed.back().size += m.size;
        } else {
          l.backed.push_back({address, m.size});
        }
      }
    }
    if (l.coverage == Coverage::kAnnotated) {
      s->ForEachBlock([&](uint64_t address, const SubBlock& b) {
        l.blocks.push_back({address, b.size, b.stack_id, b.stream, b.pool, b.pending_free});
      });
      s->ForEachFreeRange([&](uint64_t begin, uint64_t end) {
        l.free_ranges.push_back({begin, end - begin});
      });
    }
    out.push_back(std::move(l));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

ProcessModel::ProcessModel(ModelOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ProcessModel::~ProcessModel() = default;
ProcessModel::ProcessModel(ProcessModel&&) noexcept = default;
ProcessModel& ProcessModel::operator=(ProcessModel&&) noexcept = default;

void ProcessModel::Apply(const v1::Frame& frame) { impl_->Apply(frame); }
void ProcessModel::Apply(const HotEvent& event) { impl_->Apply(event); }
ModelSummary ProcessModel::Summarize() const { return impl_->Summarize(); }
const ModelOptions& ProcessModel::options() const { return impl_->options(); }
std::vector<SegmentLayout> ProcessModel::SegmentLayouts(int device,
                                                        std::size_t max_segments) const {
  return impl_->SegmentLayouts(device, max_segments);
}
std::optional<StackInfo> ProcessModel::FindStack(uint64_t id) const { return impl_->FindStack(id); }

std::vector<uint64_t> ProcessModel::StackPcs() const { return impl_->stack_index().AllPcs(); }

const std::vector<ModuleInfo>& ProcessModel::Modules() const {
  return impl_->stack_index().modules();
}

}  // namespace fragscope
