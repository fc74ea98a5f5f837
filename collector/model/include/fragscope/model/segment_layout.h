// The inside of the segments a device holds, as plain values: what a segment map (HTML report)
// or a PyTorch snapshot export draws. Produced by ProcessModel::SegmentLayouts().
//
// Plain values, no references into the model: valid after the model changes, readable from any
// thread. Units: bytes for addresses and sizes.
#ifndef FRAGSCOPE_MODEL_SEGMENT_LAYOUT_H_
#define FRAGSCOPE_MODEL_SEGMENT_LAYOUT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "fragscope/model/segment.h"

namespace fragscope {

// A block a sub-allocator reported inside an annotated segment.
struct BlockLayout {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t stack_id = 0;  // 0: no stack recorded
  uint64_t stream = 0;
  uint64_t pool = 0;
  bool pending_free = false;  // freed, not reusable yet (cudaFreeAsync-style)
};

// A range of the segment's address space, [address, address + size).
struct AddressRange {
  uint64_t address = 0;
  uint64_t size = 0;
};

struct SegmentLayout {
  int device = -1;
  uint64_t base = 0;
  uint64_t size = 0;  // address-space size (a VMM reservation may be only partly mapped)
  Coverage coverage = Coverage::kExact;
  bool vmm_reservation = false;
  uint64_t stack_id = 0;       // the allocation (or reservation) stack
  uint64_t backing_bytes = 0;  // what the segment adds to `reserved`
  // Ranges backed by this process's memory, in address order: the whole range for a driver
  // allocation, the non-imported mappings (adjacent ones merged) for a reservation.
  std::vector<AddressRange> backed;
  // Annotated segments: the sub-allocator's blocks, in address order. Empty for exact segments
  // (one allocation filling `backed`) and opaque ones (inside unknown).
  std::vector<BlockLayout> blocks;
  // Annotated segments: the free ranges (backed bytes no block covers), in address order.
  std::vector<AddressRange> free_ranges;
};

// How the free bytes of some segments are cut up: what "not in one piece" means for a failure.
struct FreeRangeCensus {
  uint64_t ranges = 0;
  uint64_t bytes = 0;
  uint64_t segments = 0;            // segments looked at
  uint64_t segments_with_free = 0;  // of them, those with a free range
  // (size in bytes, how many ranges of exactly that size), largest first.
  std::vector<std::pair<uint64_t, uint64_t>> by_size;
};
// O(free ranges x log distinct sizes).
FreeRangeCensus CensusOfFreeRanges(const std::vector<SegmentLayout>& segments);

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_SEGMENT_LAYOUT_H_
