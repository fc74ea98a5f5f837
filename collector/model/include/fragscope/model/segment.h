// One segment: memory the driver handed to this process (a cudaMalloc range, or a VMM
// reservation with physical handles mapped into it), and the sub-allocator blocks inside it.
#ifndef FRAGSCOPE_MODEL_SEGMENT_H_
#define FRAGSCOPE_MODEL_SEGMENT_H_

#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "fragscope/model/free_range_set.h"

namespace fragscope {

// DESIGN.md "Collector model": who carves the segment and so what is known about its inside.
enum class Coverage {
  kExact,      // nobody carves it: one block filling the segment
  kAnnotated,  // a sub-allocator reports its blocks: blocks and free ranges known
  kOpaque,     // a caching allocator we cannot see carves it: used bytes unknown
};
const char* CoverageName(Coverage c);

enum class SegmentKind { kDriverAllocation, kVmmReservation };

// A block reported by a sub-allocator.
struct SubBlock {
  uint64_t size = 0;
  uint64_t stack_id = 0;
  uint64_t stream = 0;
  uint64_t pool = 0;
  uint64_t allocator = 0;
  bool pending_free = false;
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
  // Whether [address, address + size) lies inside the segment.
  bool Encloses(uint64_t address, uint64_t size) const {
    return address >= begin_ && address - begin_ <= size_ && size <= size_ - (address - begin_);
  }

  // Whether the allocation stack passes through a caching allocator (nullopt: stack not known
  // yet, treated as "no" until it is).
  std::optional<bool> via_caching_allocator() const { return via_caching_allocator_; }
  void set_via_caching_allocator(std::optional<bool> v) { via_caching_allocator_ = v; }
  Coverage coverage() const;

  // Physical bytes behind the segment: the whole range for a driver allocation; for a
  // reservation, the sizes of the distinct non-imported handles mapped into it (a handle mapped
  // twice counts once).
  uint64_t backing_bytes() const;
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
  Placement AllocBlock(uint64_t address, const SubBlock& block, SubBlock* replaced);
  // Return false when the event does not match the known blocks (free of an unknown address).
  bool FreeBlock(uint64_t address, SubBlock* freed);
  bool MarkPendingFree(uint64_t address);
  // Whether a block at [address, address + size) can be placed consistently: inside the
  // segment and overlapping no block but the one it replaces at the same address. Two blocks
  // sharing bytes would make freeing one free bytes the other still holds, so callers reject
  // such a block rather than place it.
  bool CanPlaceBlock(uint64_t address, uint64_t size) const {
    return Encloses(address, size) &&
           !OverlapsOther(blocks_, address, size, [](const SubBlock& b) { return b.size; });
  }
  const absl::btree_map<uint64_t, SubBlock>& blocks() const { return blocks_; }

  // The stream/pool the sub-allocator keeps this segment for (from its blocks); nullopt before
  // the first block, or when blocks of several streams/pools share it.
  std::optional<std::pair<uint64_t, uint64_t>> stream_and_pool() const;

  const FreeRangeSet& free_ranges() const { return free_; }
  // Largest free run if every pending free inside completed (pending blocks merged with the
  // free ranges touching them; adjacent pending blocks are not merged with each other, so this
  // is a lower bound).
  uint64_t LargestFreeIfPendingCompleted() const;

  SegmentContribution Contribution() const;

  // A sub-allocator declared that it carves this segment (an imported allocator snapshot):
  // annotated from now on, and every backed byte without a block is free. The first block does
  // the same implicitly.
  void BecomeAnnotated();

 private:
  // Marks the backed parts of [begin, end) free.
  void FreeBacked(uint64_t begin, uint64_t end);

  SegmentKind kind_;
  uint64_t begin_;
  uint64_t size_;
  int device_;
  uint64_t stack_id_;
  std::optional<bool> via_caching_allocator_;
  bool annotated_ = false;

  void AddMappingPiece(uint64_t address, const Mapping& m);
  void RemoveMappingPiece(absl::btree_map<uint64_t, Mapping>::iterator it);

  absl::btree_map<uint64_t, Mapping> mappings_;  // VA -> mapping (reservations only)
  uint64_t mapped_bytes_ = 0;
  absl::flat_hash_map<uint64_t, uint64_t> pieces_by_handle_;  // non-imported handles only
  uint64_t handle_bytes_ = 0;  // distinct non-imported handles mapped here

  absl::btree_map<uint64_t, SubBlock> blocks_;
  uint64_t live_block_bytes_ = 0;
  uint64_t pending_block_bytes_ = 0;
  uint64_t pending_blocks_ = 0;
  std::optional<std::pair<uint64_t, uint64_t>> stream_and_pool_;
  bool mixed_streams_ = false;
  FreeRangeSet free_;  // backed bytes minus blocks, annotated segments only
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_SEGMENT_H_
