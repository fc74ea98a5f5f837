#include "fragscope/model/free_range_set.h"

#include <algorithm>

namespace fragscope {

void FreeRangeSet::Add(uint64_t begin, uint64_t end) {
  ranges_.emplace(begin, end);
  sizes_.insert(end - begin);
  total_ += end - begin;
}

void FreeRangeSet::Remove(absl::btree_map<uint64_t, uint64_t>::iterator it) {
  const uint64_t size = it->second - it->first;
  sizes_.erase(sizes_.find(size));
  total_ -= size;
  ranges_.erase(it);
}

void FreeRangeSet::Insert(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  // Absorb every range that overlaps or touches [begin, end): the one starting at or before
  // `begin` (if it reaches `begin`) and all starting inside [begin, end].
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second >= begin) {
      begin = prev->first;
      end = std::max(end, prev->second);
      Remove(prev);
    }
  }
  // btree iterators do not survive an erase: look the next one up again each time.
  for (it = ranges_.lower_bound(begin); it != ranges_.end() && it->first <= end;
       it = ranges_.lower_bound(begin)) {
    end = std::max(end, it->second);
    Remove(it);
  }
  Add(begin, end);
}

uint64_t FreeRangeSet::Erase(uint64_t begin, uint64_t end) {
  if (begin >= end) return 0;
  uint64_t removed = 0;
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second > begin) it = std::prev(it);
  while (it != ranges_.end() && it->first < end) {
    const uint64_t r_begin = it->first;
    const uint64_t r_end = it->second;
    Remove(it);
    removed += std::min(r_end, end) - std::max(r_begin, begin);
    // Keep what lies outside [begin, end).
    if (r_begin < begin) Add(r_begin, begin);
    if (r_end > end) Add(end, r_end);
    // Ranges are disjoint: the next candidate starts at or after r_end (re-found because btree
    // iterators do not survive an insert or erase).
    it = ranges_.lower_bound(r_end);
  }
  return removed;
}

uint64_t FreeRangeSet::MergedSizeIfFreed(uint64_t begin, uint64_t end) const {
  if (begin >= end) return 0;
  uint64_t lo = begin;
  uint64_t hi = end;
  // A free range ending exactly at `begin` (or overlapping it) extends the run downwards.
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second >= begin) lo = std::min(lo, prev->first);
  }
  // Free ranges starting inside or right at the end extend it upwards.
  for (it = ranges_.lower_bound(begin); it != ranges_.end() && it->first <= hi; ++it) {
    hi = std::max(hi, it->second);
  }
  return hi - lo;
}

}  // namespace fragscope
