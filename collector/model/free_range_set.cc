#include "fragscope/model/free_range_set.h"

#include <algorithm>

namespace fragscope {

// Both updates change entries in place where the start address stays (the common split and
// merge cases) and otherwise erase and insert with a hint: one search per call, where a
// remove-then-add of every touched range would search again for each.

void FreeRangeSet::TrimSizes() {
  if (!sizes_.Wasteful()) return;
  sizes_.Rebuild(ranges_, [](const auto& range) { return range.second - range.first; });
}

void FreeRangeSet::Insert(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  // The range starting at or before `begin` absorbs the new one when it reaches `begin`.
  auto next = ranges_.upper_bound(begin);
  auto prev = next;
  const bool extend_prev = next != ranges_.begin() && (--prev)->second >= begin;
  if (extend_prev) {
    begin = prev->first;
    end = std::max(end, prev->second);
  }
  // Ranges are disjoint and never touch, so those starting in (begin, end] are absorbed whole;
  // each may carry `end` further.
  auto stop = next;
  while (stop != ranges_.end() && stop->first <= end) {
    end = std::max(end, stop->second);
    ++stop;
  }
  for (auto it = next; it != stop; ++it) {
    sizes_.Erase(it->second - it->first);
    total_ -= it->second - it->first;
  }
  if (extend_prev) {
    sizes_.Erase(prev->second - prev->first);
    total_ -= prev->second - prev->first;
    prev->second = end;  // before the erase below, which invalidates `prev`
    if (next != stop) ranges_.erase(next, stop);
  } else {
    auto hint = next == stop ? next : ranges_.erase(next, stop);
    ranges_.emplace_hint(hint, begin, end);
  }
  sizes_.Insert(end - begin);
  total_ += end - begin;
  TrimSizes();
}

uint64_t FreeRangeSet::Erase(uint64_t begin, uint64_t end) {
  if (begin >= end) return 0;
  uint64_t removed = 0;
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second > begin) it = std::prev(it);
  while (it != ranges_.end() && it->first < end) {
    const uint64_t r_begin = it->first;
    const uint64_t r_end = it->second;
    removed += std::min(r_end, end) - std::max(r_begin, begin);
    sizes_.Erase(r_end - r_begin);
    total_ -= r_end - r_begin;
    // Keep what lies outside [begin, end): the part before keeps this entry's start, so it is
    // updated in place; the part after needs an entry of its own.
    if (r_begin < begin) {
      it->second = begin;
      sizes_.Insert(begin - r_begin);
      total_ += begin - r_begin;
      ++it;
    } else {
      it = ranges_.erase(it);
    }
    if (r_end > end) {
      ranges_.emplace_hint(it, end, r_end);
      sizes_.Insert(r_end - end);
      total_ += r_end - end;
      break;  // ranges are disjoint: nothing after r_end starts before `end`
    }
  }
  TrimSizes();
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
