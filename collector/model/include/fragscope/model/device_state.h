// Per-device aggregates of the collector model: the sums behind every metric, kept up to date
// as segments, handles and pools change, so a metric is O(1) to read.
#ifndef FRAGSCOPE_MODEL_DEVICE_STATE_H_
#define FRAGSCOPE_MODEL_DEVICE_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fragscope/model/max_multiset.h"
#include "fragscope/model/model_options.h"
#include "fragscope/model/model_summary.h"
#include "fragscope/model/segment.h"
#include "fragscope/model/site_table.h"
#include "fragscope/model/timeline.h"

namespace fragscope {

// One memory pool's live state. Bytes.
struct PoolState {
  std::optional<uint64_t> sampled_reserved;  // cudaMemPoolAttrReservedMemCurrent
  std::optional<uint64_t> sampled_used;      // cudaMemPoolAttrUsedMemCurrent
  uint64_t used = 0;                         // live async blocks
  uint64_t pending = 0;  // freed with cudaFreeAsync, not known to be reusable yet
  uint64_t blocks = 0;
  absl::flat_hash_set<uint64_t> pending_addresses;
  // The pool's share of `reserved`: never less than what its live and pending blocks occupy.
  uint64_t effective_reserved() const {
    const uint64_t floor = used + pending;
    return sampled_reserved && *sampled_reserved > floor ? *sampled_reserved : floor;
  }
};

// The metrics of one device at one moment (collector/REPORT.md, "Metrics"), computed in O(1).
struct DeviceMetrics {
  uint64_t reserved = 0;
  uint64_t allocated = 0;
  uint64_t opaque = 0;
  uint64_t cached = 0;
  uint64_t pending = 0;  // annotated pending + pool pending
  uint64_t largest_free = 0;
  Measured<double> fragmentation;
  uint64_t stranded = 0;
  Measured<uint64_t> untracked;
  uint64_t pool_free = 0;
};

// Not thread-safe; owned by the ProcessModel. Segments themselves live in the model's address
// index (UVA: one VA space for all devices); this holds what they add up to.
class DeviceState {
 public:
  DeviceState(int ordinal, const ModelOptions& options);

  int ordinal() const { return ordinal_; }
  // Touched by the event being applied (the model's bookkeeping: AfterEvent is due).
  bool touched = false;

  // Identity and samples.
  std::string uuid_hex;
  std::string name;
  std::optional<uint64_t> info_total;  // DeviceInfo.total_bytes
  struct MemSample {
    uint64_t free = 0;
    uint64_t total = 0;
    uint64_t seq = 0;
    // This process's reserved bytes when the sample was taken: untracked compares the sample
    // with these, not with later figures (a stale sample against a later, smaller reserved
    // would call the process's own freed memory "untracked").
    uint64_t reserved_at_sample = 0;
  };
  std::optional<MemSample> last_sample;
  // Reserved bytes now (all kinds), for stamping samples.
  uint64_t ReservedNow() const {
    return driver_segment_bytes + handle_bytes + pool_reserved_ + graph_bytes;
  }
  std::optional<uint64_t> total() const;

  // Segment contributions: every change to a segment is Retract(before) + Deposit(after), or
  // Replace(before, after) when the segment stays on this device (cheaper: the largest-free
  // summary is only touched when the segment's largest free range changed).
  void Deposit(const SegmentContribution& c);
  void Retract(const SegmentContribution& c);
  void Replace(const SegmentContribution& before, const SegmentContribution& after);

  // Buckets (bytes).
  uint64_t driver_segment_bytes = 0;  // physical bytes of driver-allocation segments
  uint64_t handle_bytes = 0;          // live, non-imported VMM handles on this device
  uint64_t unmapped_handle_bytes = 0;
  uint64_t imported_bytes = 0;
  uint64_t graph_bytes = 0;
  uint64_t managed_bytes = 0;
  uint64_t graph_blocks = 0;

  // Pools: every change goes through UpdatePool so the totals stay right.
  PoolState& pool(uint64_t id);
  template <typename F>
  void UpdatePool(uint64_t id, F&& change) {
    PoolState& p = pool(id);
    RetractPool(p);
    change(p);
    DepositPool(p);
  }
  const absl::flat_hash_map<uint64_t, PoolState>& pools() const { return pools_; }

  // Sites: every change goes through here so the copy at peak is taken before it is lost.
  void AddSite(uint64_t stack_id, uint64_t bytes);
  void RemoveSite(uint64_t stack_id, uint64_t bytes);
  // A live block of `bytes` placed at `placed_seq` (0: not known) is `to`'s, not `from`'s (its
  // site learned after the fact). When it was placed at or before the moment of the sites at
  // peak (see SettlePeakAfterBlock), it was live there too: the sites at peak move with it.
  void MoveSite(uint64_t from, uint64_t to, uint64_t bytes, uint64_t placed_seq);
  // Live now, and at the peak of reserved (SiteTable::AllAtMark).
  const SiteTable& sites() const { return sites_; }
  // The event being applied placed a block. When the events just before it on this device set
  // the peak of reserved and then changed no allocation (typically the segment, or the handles
  // and mappings, a sub-allocator took for this very block; samples, marks and sites between),
  // AfterEvent takes the sites at the peak after this event instead, with reserved unchanged: taken
  // at the driver call, they would list a fresh segment whole under the sub-allocator's own frame,
  // or leave out the block that made reserved grow.
  void SettlePeakAfterBlock() { settle_peak_ = true; }
  // The event being applied leaves the peak open to that settling (SettlePeakAfterBlock): a
  // mapping or handle event, a MemInfo sample, a mark, a site update. Any other event closes
  // it.
  void KeepPeakOpen() { quiet_event_ = true; }
  // A block at `address` freed now (Segment::FreeBlock's `freed`), in a stream whose sites are
  // learned after the fact: its site loses it (RemoveSite), and when it was live at the moment
  // of the sites at peak it is remembered until the next mark, so that a site learned for it
  // after its free (BlockEvent.OP_SITE_FREED) still moves its bytes there. Memory: at most the
  // blocks live at that moment.
  void RemoveFreedBlockSite(uint64_t address, const BlockSite& freed) {
    sites_.Remove(freed.stack_id, freed.size);
    if (freed.placed_seq != 0 && freed.placed_seq <= peak_sites_seq_) {
      freed_since_mark_[address] = freed;
    }
  }
  // OP_SITE_FREED: the block of `size` bytes (0: any) freed at `address` was `site`'s. True
  // when it was live at the moment of the sites at peak (and freed since): its bytes there
  // move to `site`.
  bool MoveFreedBlockSite(uint64_t address, uint64_t size, uint64_t site);

  // `with_reasons` = false skips formatting the unknown reasons (the per-event path); the
  // values are the same.
  DeviceMetrics Metrics(bool with_reasons = true) const;
  uint64_t opaque_segments() const { return opaque_segments_; }
  // Segments and blocks held now (an exact segment counts as its one block).
  uint64_t segment_count() const { return segments_; }
  uint64_t block_count() const { return seg_blocks_; }

  // After each event that touched the device: peaks, max fragmentation, timeline.
  void AfterEvent(uint64_t seq, uint64_t time_ns);
  uint64_t peak_reserved() const { return peak_reserved_; }

  void RecordEvent(const RecentEvent& e);
  // The same without building a RecentEvent first (the per-event path): fills the ring's slot
  // in place, label empty.
  void RecordEvent(uint64_t seq, uint64_t time_ns, EventKind kind, int api, uint64_t address,
                   uint64_t size, int result, uint64_t stack_id) {
    RecentEvent* slot = NextRecentSlot();
    if (slot == nullptr) return;
    slot->seq = seq;
    slot->time_ns = time_ns;
    slot->kind = kind;
    slot->api = api;
    slot->address = address;
    slot->size = size;
    slot->result = result;
    slot->stack_id = stack_id;
    slot->label.clear();
  }
  // Oldest first.
  std::vector<RecentEvent> RecentEvents() const;

  // Forgets all live state (segments, handles, pools' blocks, sites) before a Snapshot rebuilds
  // it. Keeps identity, samples, peaks, timeline and recent events.
  void ResetLive();

  // Everything but `sites` and `sites_at_peak`, which need the stream's stacks (ProcessModel).
  void FillSummary(DeviceSummary* out) const;

 private:
  // A new peak of reserved, or an event after one (peak_open_); resets settle_peak_ and
  // quiet_event_. Out of line, so that AfterEvent's common path saves no registers.
  [[gnu::noinline]] void UpdatePeak(uint64_t seq, uint64_t reserved);
  void MarkSites();  // sites_.Mark(); what the previous mark kept is let go

  void RetractPool(const PoolState& p);
  void DepositPool(const PoolState& p);
  // The ring slot the next recent event goes in, or nullptr when recent events are off.
  RecentEvent* NextRecentSlot() {
    const std::size_t capacity = options_->recent_events;
    if (recent_.size() == capacity) [[likely]] {
      if (capacity == 0) return nullptr;
      RecentEvent* slot = &recent_[recent_head_];
      recent_head_ = recent_head_ + 1 == capacity ? 0 : recent_head_ + 1;
      return slot;
    }
    return &recent_.emplace_back();
  }
  // The fragmentation ratio when it is reportable (collector/REPORT.md: cached at or above the floor and
  // no opaque segment), else nullopt.
  std::optional<double> FragmentationValue(uint64_t cached, uint64_t largest_free) const {
    if (opaque_segments_ != 0 || cached == 0 || cached < options_->fragmentation_floor_bytes) {
      return std::nullopt;
    }
    return 1.0 - static_cast<double>(largest_free) / static_cast<double>(cached);
  }

  int ordinal_;
  const ModelOptions* options_;

  // Sums of segment contributions.
  uint64_t seg_allocated_ = 0;
  uint64_t seg_opaque_ = 0;
  uint64_t seg_exact_ = 0;  // allocated in exact segments
  uint64_t seg_cached_ = 0;
  uint64_t seg_pending_ = 0;
  uint64_t segments_ = 0;
  uint64_t exact_segments_ = 0;
  uint64_t annotated_segments_ = 0;
  uint64_t opaque_segments_ = 0;
  uint64_t seg_blocks_ = 0;
  uint64_t free_ranges_ = 0;
  MaxMultiset largest_free_by_segment_;  // one per annotated segment

  absl::flat_hash_map<uint64_t, PoolState> pools_;
  uint64_t pool_reserved_ = 0;
  uint64_t pool_used_ = 0;
  uint64_t pool_pending_ = 0;
  uint64_t pool_blocks_ = 0;

  SiteTable sites_;  // marked at each new peak reserved: sites at peak

  uint64_t peak_reserved_ = 0;
  uint64_t peak_reserved_seq_ = 0;
  uint64_t peak_sites_seq_ = 0;  // the moment of sites_'s mark: peak_reserved_seq_ or just after
  bool peak_open_ = false;       // the next block placed may settle the sites at the peak
  bool settle_peak_ = false;     // SettlePeakAfterBlock, for the event being applied
  bool quiet_event_ = false;     // KeepPeakOpen, for the event being applied
  // Blocks live at the mark and freed since, by address (RemoveFreedBlockSite).
  absl::flat_hash_map<uint64_t, BlockSite> freed_since_mark_;
  uint64_t peak_allocated_ = 0;
  std::optional<double> max_fragmentation_;
  Timeline timeline_;
  // The last options_->recent_events events, a ring: once full, recent_head_ is the oldest and
  // the next to be overwritten (no allocation per event, unlike a deque's push/pop).
  std::vector<RecentEvent> recent_;
  std::size_t recent_head_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_DEVICE_STATE_H_
