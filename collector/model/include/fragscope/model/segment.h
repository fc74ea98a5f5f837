// One segment: memory the driver handed to this process (a cudaMalloc range, or a VMM
// reservation with physical handles mapped into it), and the sub-allocator blocks inside it.
#ifndef FRAGSCOPE_MODEL_SEGMENT_H_
#define FRAGSCOPE_MODEL_SEGMENT_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "fragscope/model/address_btree.h"

namespace fragscope {

// collector/REPORT.md, "Segments and coverage": who carves the segment and so what is known about its inside.
enum class Coverage {
  kExact,      // nobody carves it: one block filling the segment
  kAnnotated,  // a sub-allocator reports its blocks: blocks and free ranges known
  kOpaque,     // a caching allocator we cannot see carves it: used bytes unknown
};
const char* CoverageName(Coverage c);

enum class SegmentKind { kDriverAllocation, kVmmReservation };

// A block reported by a sub-allocator. The site and seq side by side: a free reads both (one
// cache line of Segment's block data, not two).
struct SubBlock {
  uint64_t size = 0;
  uint64_t stack_id = 0;
  uint64_t seq = 0;  // the event (or snapshot) that placed it; 0: not known
  uint64_t stream = 0;
  uint64_t pool = 0;
  uint64_t allocator = 0;
  bool pending_free = false;
};

// What the model needs of a block that leaves its segment: its bytes and its allocation site.
struct BlockSite {
  uint64_t size = 0;
  uint64_t stack_id = 0;
  uint64_t placed_seq = 0;  // SubBlock::seq
};

// Physical memory of `handle` (from `offset`) mapped at a VA range of a reservation.
struct Mapping {
  uint64_t size = 0;
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t handle_size = 0;  // physical bytes of the whole handle
  bool imported = false;     // another process's memory: not this segment's backing
};

// What a segment adds to its device's figures (bytes). See Segment::Contribution.
struct SegmentContribution {
  Coverage coverage = Coverage::kExact;
  bool counted = false;  // a segment only counts once it has backing memory
  uint64_t backing = 0;
  uint64_t allocated = 0;
  uint64_t opaque = 0;
  uint64_t cached = 0;
  uint64_t pending = 0;
  uint64_t largest_free = 0;
  uint64_t blocks = 0;
  uint64_t free_ranges = 0;
};

// Whether [address, address + size) ends inside the 64-bit address space. A range that wraps
// would make every end-begin difference and every sum of sizes meaningless.
inline bool RangeFits(uint64_t address, uint64_t size) {
  return size <= std::numeric_limits<uint64_t>::max() - address;
}

// Whether [address, address + size) overlaps an entry of `ranges` (begin -> value, entries
// pairwise disjoint, `size_of(value)` their sizes) other than the one starting at `address`:
// that one is the entry an event replaces when its free was lost, so callers decide about it.
// A zero-size range overlaps an entry whose inside it lies in, so the entries stay disjoint in
// the sense the lookup of the predecessor relies on. O(log n).
template <typename Map, typename SizeOf>
bool OverlapsOther(const Map& ranges, uint64_t address, uint64_t size, SizeOf size_of) {
  auto it = ranges.lower_bound(address);
  if (it != ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + size_of(prev->second) > address) return true;
  }
  if (it != ranges.end() && it->first == address) ++it;
  return it != ranges.end() && it->first < address + size;
}

// Not thread-safe; owned by the ProcessModel's segment index. Addresses and sizes in bytes.
class Segment {
 public:
  Segment(SegmentKind kind, uint64_t begin, uint64_t size, int device, uint64_t stack_id);

  SegmentKind kind() const { return kind_; }
  uint64_t begin() const { return begin_; }
  uint64_t end() const { return begin_ + size_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }
  void set_device(int device) { device_ = device; }
  uint64_t stack_id() const { return stack_id_; }
  // A reservation nobody saw made (it predates the agent's attach): its extent is only what
  // its mappings prove, a lower bound the model widens as touching memory gets mapped.
  bool inferred() const { return inferred_; }
  void set_inferred(bool inferred) { inferred_ = inferred; }
  // Whether [address, address + size) lies inside the segment.
  bool Encloses(uint64_t address, uint64_t size) const {
    return address >= begin_ && address - begin_ <= size_ && size <= size_ - (address - begin_);
  }

  // Whether the allocation stack passes through a caching allocator (nullopt: stack not known
  // yet, treated as "no" until it is).
  std::optional<bool> via_caching_allocator() const { return via_caching_allocator_; }
  void set_via_caching_allocator(std::optional<bool> v) { via_caching_allocator_ = v; }
  Coverage coverage() const {
    if (annotated_) return Coverage::kAnnotated;
    return via_caching_allocator_.value_or(false) ? Coverage::kOpaque : Coverage::kExact;
  }

  // Physical bytes behind the segment: the whole range for a driver allocation; for a
  // reservation, the sizes of the distinct non-imported handles mapped into it (a handle mapped
  // twice counts once).
  uint64_t backing_bytes() const {
    return kind_ == SegmentKind::kDriverAllocation ? size_ : handle_bytes_;
  }
  // Non-imported VA bytes mapped in a reservation (what annotated blocks can be placed in).
  uint64_t mapped_bytes() const { return mapped_bytes_; }

  // VMM only. Map adds a mapping; Unmap removes [begin, end) from every mapping it touches
  // (partial unmaps keep the rest) and returns (handle, change in that handle's mapping count).
  // Map expects a range inside the segment that overlaps no other mapping (Encloses,
  // MappingOverlaps): the mapped bytes and free ranges are sums over disjoint mappings.
  void Map(uint64_t address, const Mapping& mapping);
  std::vector<std::pair<uint64_t, int>> Unmap(uint64_t begin, uint64_t end);
  // Whether a mapping of [address, address + size) would overlap another mapping (one at the
  // same address is the caller's to replace).
  bool MappingOverlaps(uint64_t address, uint64_t size) const {
    return OverlapsOther(mappings_, address, size, [](const Mapping& m) { return m.size; });
  }
  const absl::btree_map<uint64_t, Mapping>& mappings() const { return mappings_; }

  // Blocks. The first block makes the segment annotated for good.
  //
  // AllocBlock places a block only where CanPlaceBlock would accept it (one search serves the
  // check and the insertion) and otherwise changes nothing: kRejected. kReplaced: a block at
  // the same address was still there (its free was lost); it is forgotten and returned in
  // `replaced`.
  enum class Placement { kRejected, kPlaced, kReplaced };
  Placement AllocBlock(uint64_t address, const SubBlock& block, BlockSite* replaced);
  // Return false when the event does not match the known blocks (free of an unknown address).
  // The size, site and placing seq of the freed block come back (the seq is where the rest of
  // the block is, one more load; the model needs it to know whether it was live at the peak).
  bool FreeBlock(uint64_t address, BlockSite* freed);
  bool MarkPendingFree(uint64_t address);
  // The block at `address` was allocated at `stack_id` (learned after the fact): returns its
  // size, former site and placing seq in `before`, or false when no block starts there.
  // Figures unchanged.
  bool SetBlockSite(uint64_t address, uint64_t stack_id, BlockSite* before);
  // Whether a block at [address, address + size) can be placed consistently: inside the
  // segment and overlapping no block but the one it replaces at the same address. Two blocks
  // sharing bytes would make freeing one free bytes the other still holds, so callers reject
  // such a block rather than place it. A zero-size block overlaps a block whose inside it lies
  // in. O(log n).
  bool CanPlaceBlock(uint64_t address, uint64_t size) const;
  // The blocks, in address order: f(address, const SubBlock&). O(blocks + free ranges).
  template <typename F>
  void ForEachBlock(F&& f) const;
  std::size_t block_count() const { return block_count_; }

  // The stream/pool the sub-allocator keeps this segment for (from its blocks); nullopt before
  // the first block, or when blocks of several streams/pools share it.
  std::optional<std::pair<uint64_t, uint64_t>> stream_and_pool() const;

  // Free ranges: the backed bytes no block covers, as maximal runs (touching free bytes are
  // always one range), annotated segments only. f(begin, end) in address order.
  template <typename F>
  void ForEachFreeRange(F&& f) const;
  uint64_t free_bytes() const { return free_total_; }
  uint64_t largest_free_bytes() const {  // O(1)
    return std::max(head_free_, extents_.max_weight());
  }
  std::size_t free_range_count() const { return free_count_; }
  // Largest free run if every pending free inside completed (pending blocks merged with the
  // free ranges touching them; adjacent pending blocks are not merged with each other, so this
  // is a lower bound).
  uint64_t LargestFreeIfPendingCompleted() const;

  // Whether Contribution() stays annotated and counted whatever blocks are placed or freed:
  // annotated for good, and counted without blocks (a driver allocation, or a reservation with
  // memory mapped). Block events on such a segment only move the annotated figures
  // (AnnotatedContribution), which is most events of a sub-allocator's stream.
  bool StaysAnnotatedAndCounted() const {
    return annotated_ && (kind_ == SegmentKind::kDriverAllocation || mapped_bytes_ > 0);
  }
  // Contribution() of a segment for which StaysAnnotatedAndCounted(), without the tests.
  [[gnu::always_inline]] SegmentContribution AnnotatedContribution() const {
    SegmentContribution c;
    c.coverage = Coverage::kAnnotated;
    c.counted = true;
    c.backing = backing_bytes();
    SetAnnotatedFigures(c);
    return c;
  }

  // Inline: every event that changes a segment takes it twice (before and after).
  [[gnu::always_inline]] SegmentContribution Contribution() const {
    SegmentContribution c;
    c.coverage = coverage();
    c.backing = backing_bytes();
    // A reservation with nothing mapped is address space, not a segment (yet).
    c.counted = kind_ == SegmentKind::kDriverAllocation || mapped_bytes_ > 0 || block_count_ > 0;
    switch (c.coverage) {
      case Coverage::kExact:
        c.allocated = c.backing;
        c.blocks = c.backing > 0 ? 1 : 0;
        break;
      case Coverage::kOpaque:
        c.opaque = c.backing;
        break;
      case Coverage::kAnnotated:
        SetAnnotatedFigures(c);
        break;
    }
    return c;
  }

  // A sub-allocator declared that it carves this segment (an imported allocator snapshot):
  // annotated from now on, and every backed byte without a block is free. The first block does
  // the same implicitly.
  void BecomeAnnotated();

 private:
  SegmentKind kind_;
  uint64_t begin_;
  uint64_t size_;
  int device_;
  uint64_t stack_id_;
  std::optional<bool> via_caching_allocator_;
  bool annotated_ = false;
  bool inferred_ = false;

  // The figures of an annotated segment's contribution (Contribution, AnnotatedContribution).
  [[gnu::always_inline]] void SetAnnotatedFigures(SegmentContribution& c) const {
    c.allocated = live_block_bytes_;
    c.pending = pending_block_bytes_;
    c.cached = free_total_;
    c.largest_free = largest_free_bytes();
    c.blocks = block_count_;
    c.free_ranges = free_count_;
  }

  void AddMappingPiece(uint64_t address, const Mapping& m);
  void RemoveMappingPiece(absl::btree_map<uint64_t, Mapping>::iterator it);

  absl::btree_map<uint64_t, Mapping> mappings_;  // VA -> mapping (reservations only)
  uint64_t mapped_bytes_ = 0;
  absl::flat_hash_map<uint64_t, uint64_t> pieces_by_handle_;  // non-imported handles only
  uint64_t handle_bytes_ = 0;  // distinct non-imported handles mapped here

  // The inside of an annotated segment: one ordered map of what is not free, blocks and holes
  // (VA of a reservation that no non-imported mapping backs), each extent weighted with the
  // size of the free run after it, up to the next extent or the segment's end; head_free_ is
  // the run before the first. The map keeps the largest weight (address_btree.h), so the
  // largest free run is max(head_free_, that), with no structure of its own (a heap of the
  // runs, stale entries left in until they reached the top, took a sixth of the replay's
  // mispredicted branches and a tenth of its cache misses; tests/bench/RESULTS.md). Free runs are
  // the gaps between neighbours, so touching free bytes are always one run, and a block event
  // inserts or erases one entry (a map of blocks and free ranges as entries of their own took two
  // inserts per allocation and two erases per free: with the node moves, 40 % of a block event's
  // instructions). Extents never overlap. Zero-size blocks own no bytes and may lie inside a free
  // run, so they live apart in zero_blocks_ (rare). A block's size and pending state sit in its map
  // entry (what the searches and the figures read); the rest of it in block_data_ (its site and seq
  // read by a free, the stream and pool by layouts): values of 16 bytes, which an insert or erase
  // shifts in place (with the site in the entry too a search in absl's B-tree, keys and values side
  // by side, scanned a fifth more lines: 3 M-event replay, 10 alternating rounds, x1.02;
  // tests/bench/RESULTS.md). The map keeps its keys apart (address_btree.h), so a search reads
  // keys only.
  // Not annotated: no extents, head_free_ 0.
  static constexpr uint32_t kHole = std::numeric_limits<uint32_t>::max();
  struct Extent {
    uint64_t size = 0;
    uint32_t block = kHole;  // index into block_data_, or kHole
    bool pending_free = false;
    bool is_hole() const { return block == kHole; }
  };
  static Extent HoleExtent(uint64_t size) { return Extent{size, kHole, false}; }
  static Extent BlockExtent(const SubBlock& b, uint32_t data) {
    return Extent{b.size, data, b.pending_free};
  }
  // Weight: the free run after the extent (bytes).
  using ExtentMap = AddressBtree<Extent, 32, 32, /*kWeighted=*/true>;

  // The free run that ends at `next` (an extent, or end()): where it starts, its size, and who
  // holds that size (the extent before `next`, as its weight, or head_free_).
  struct Gap {
    uint64_t begin = 0;
    uint64_t size = 0;
    ExtentMap::iterator holder;  // extents_.end() for head_free_
  };
  Gap GapBefore(ExtentMap::iterator next) {
    if (next == extents_.begin()) return Gap{begin_, head_free_, extents_.end()};
    auto prev = std::prev(next);
    return Gap{prev->first + prev->second.size, prev.weight(), prev};
  }
  // Resizes that run (before any insert or erase, which moves entries).
  void SetGapSize(const Gap& gap, uint64_t size) {
    if (gap.holder == extents_.end()) {
      head_free_ = size;
    } else {
      extents_.set_weight(gap.holder, size);
    }
  }
  // Puts `e` at [address, address + e.size) inside the free run that ends at `next` (the
  // caller knows the range lies in it: `next` is extents_.upper_bound(address) and no extent
  // overlaps the range). The run's bytes before and after become the two runs around `e`.
  void PlaceInGap(uint64_t address, const Extent& e, ExtentMap::iterator next);
  // Takes out one extent: its bytes and the runs on both sides become one free run. Returns the
  // extent after it.
  ExtentMap::iterator RemoveExtent(ExtentMap::iterator it);
  // Makes [begin, end) backed: holes overlapping it shrink to the parts outside.
  void ClearHoles(uint64_t begin, uint64_t end);
  // Makes the free bytes of [begin, end) unbacked (holes over them).
  void HoleOverFree(uint64_t begin, uint64_t end);
  // f(begin, end) for the parts of [begin, end) no non-imported mapping backs (reservations).
  template <typename F>
  void ForEachUnbacked(uint64_t begin, uint64_t end, F&& f) const;
  // The block that starts at `address` (its data) and, for one with bytes, its extent
  // (*extent = nullptr for a zero-size block); nullptr when no block starts there.
  SubBlock* BlockAt(uint64_t address, Extent** extent);

  // The general (slower) paths: the first block, a replaced block, zero-size blocks, blocks
  // over holes or over more than one free run.
  Placement AllocBlockSlow(uint64_t address, const SubBlock& block, BlockSite* replaced);
  // A block slot in block_data_ (reused after frees). Slots of freed blocks are given back
  // (CompactBlockData) once they outnumber the live ones twice over, so block_data_ stays
  // O(live blocks), at O(1) amortized per free.
  uint32_t NewBlockData(const SubBlock& block);
  void ReleaseBlockData(uint32_t index) {
    spare_block_data_.push_back(index);
    if (spare_block_data_.size() > 2 * block_count_ + 64) CompactBlockData();
  }
  void CompactBlockData();
  void AccountPlaced(const SubBlock& block);
  void AccountRemoved(uint64_t size, bool pending_free);
  // Free-run bookkeeping of one run appearing or going (a run whose size changes goes and
  // appears again).
  void CountFreeAdded(uint64_t size) {
    if (size == 0) return;
    free_total_ += size;
    ++free_count_;
  }
  void CountFreeRemoved(uint64_t size) {
    if (size == 0) return;
    free_total_ -= size;
    --free_count_;
  }

  ExtentMap extents_;
  uint64_t head_free_ = 0;
  std::vector<SubBlock> block_data_;
  std::vector<uint32_t> spare_block_data_;
  absl::btree_map<uint64_t, SubBlock> zero_blocks_;
  std::size_t block_count_ = 0;
  uint64_t live_block_bytes_ = 0;
  uint64_t pending_block_bytes_ = 0;
  uint64_t pending_blocks_ = 0;
  std::optional<std::pair<uint64_t, uint64_t>> stream_and_pool_;
  bool mixed_streams_ = false;
  uint64_t free_total_ = 0;
  std::size_t free_count_ = 0;
};

template <typename F>
void Segment::ForEachBlock(F&& f) const {
  // Two address-ordered sequences, merged (an address holds at most one block).
  auto zero = zero_blocks_.begin();
  for (const auto& [address, extent] : extents_) {
    if (extent.is_hole()) continue;
    for (; zero != zero_blocks_.end() && zero->first < address; ++zero)
      f(zero->first, zero->second);
    f(address, block_data_[extent.block]);
  }
  for (; zero != zero_blocks_.end(); ++zero) f(zero->first, zero->second);
}

template <typename F>
void Segment::ForEachFreeRange(F&& f) const {
  if (head_free_ > 0) f(begin_, begin_ + head_free_);
  for (auto it = extents_.begin(); it != extents_.end(); ++it) {
    const uint64_t end = it->first + it->second.size;
    if (it.weight() > 0) f(end, end + it.weight());
  }
}

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_SEGMENT_H_
