// Free address ranges inside one segment, with a size summary so the largest free range is
// O(1) and every update O(log n) (amortized) in the number of free ranges.
#ifndef FRAGSCOPE_MODEL_FREE_RANGE_SET_H_
#define FRAGSCOPE_MODEL_FREE_RANGE_SET_H_

#include <cstdint>

#include "absl/container/btree_map.h"
#include "fragscope/model/max_multiset.h"

namespace fragscope {

// Maximal free ranges [begin, end) (addresses in bytes): touching ranges are always merged, so
// the sizes are the runs a single request could use. Not thread-safe; owned by its segment.
class FreeRangeSet {
 public:
  // Marks [begin, end) free, merging with touching free ranges. Parts already free are fine.
  void Insert(uint64_t begin, uint64_t end);
  // Marks [begin, end) not free; returns how many bytes were free in it.
  uint64_t Erase(uint64_t begin, uint64_t end);

  uint64_t total_bytes() const { return total_; }
  uint64_t largest_bytes() const { return sizes_.Max(); }
  std::size_t count() const { return ranges_.size(); }
  bool empty() const { return ranges_.empty(); }

  // Size of the free run [begin, end) would be part of if it became free: itself plus the free
  // ranges touching it on either side. For "what if this pending free completed".
  uint64_t MergedSizeIfFreed(uint64_t begin, uint64_t end) const;

  // begin -> end, in address order.
  const absl::btree_map<uint64_t, uint64_t>& ranges() const { return ranges_; }

 private:
  // Drops the sizes of ranges that are gone once they outnumber the live ones (O(1) amortized).
  void TrimSizes();

  absl::btree_map<uint64_t, uint64_t> ranges_;
  MaxMultiset sizes_;  // of ranges_ (end - begin), for largest_bytes()
  uint64_t total_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_FREE_RANGE_SET_H_
