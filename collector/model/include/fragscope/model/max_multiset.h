// A multiset of unsigned values that only answers "what is the largest", for the per-segment
// and per-device largest-free-range summaries, which change on nearly every block event.
#ifndef FRAGSCOPE_MODEL_MAX_MULTISET_H_
#define FRAGSCOPE_MODEL_MAX_MULTISET_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fragscope {

// Two binary max-heaps: the values inserted, and the values erased but still in the first heap
// (lazy deletion). An erased value leaves the first heap only when it reaches the top, so
// Insert and Erase are a push (O(1) on average for values in random order, O(log n) at worst),
// Max is O(1), and pops are O(log n) amortized over the pushes. Cheaper than a balanced tree:
// no node allocation, no search, contiguous memory. When erased values outnumber live ones the
// heaps are rebuilt without them, so memory stays O(live values): by the owner from its own
// list of the live values (Rebuild, O(n)) when it has one, else from the heaps (O(n log n)).
//
// Erase of a value that is not in the set is tolerated (never a crash): it is dropped when it
// surfaces or at the next rebuild, and meanwhile may hide one equal live value.
// Not thread-safe.
class MaxMultiset {
 public:
  void Insert(uint64_t v) {
    values_.push_back(v);
    std::push_heap(values_.begin(), values_.end());
  }
  // Erase then Compact or Rebuild when Wasteful(). Without either, memory grows with erasures.
  void Erase(uint64_t v) {
    erased_.push_back(v);
    std::push_heap(erased_.begin(), erased_.end());
    Settle();
  }
  // Erase(from) then Insert(to), the same set afterwards (so the same Max()), cheaper when
  // `from` is the largest value: the top is then a live copy of it (Settle keeps the top live),
  // and it is overwritten in place, no erased entry left behind: O(1) when `to` is not smaller
  // (the heap order holds as it is), one pop and push otherwise. A segment whose largest free
  // range changes is often the one holding its device's largest (the range its blocks split).
  // Compact or Rebuild when Wasteful() afterwards, as after Erase.
  void Replace(uint64_t from, uint64_t to) {
    if (values_.empty() || values_.front() != from) {
      Erase(from);
      Insert(to);
      return;
    }
    if (to >= from) {
      // Still the largest; every erased value is below `from` (Settle), so below `to`: live.
      values_.front() = to;
      return;
    }
    std::pop_heap(values_.begin(), values_.end());
    values_.back() = to;
    std::push_heap(values_.begin(), values_.end());
    Settle();  // the new top may be a value waiting in erased_
  }
  // Whether erased values that still take space are more than twice the live ones (so memory
  // stays within 3x the live values, and each rebuild is paid for by as many erasures).
  bool Wasteful() const {
    // erased > 2 (values - erased), without a subtraction that a stray erasure could wrap.
    return erased_.size() > kSlack && 3 * erased_.size() > 2 * values_.size();
  }
  // Replaces the contents with `live` (exactly the live values, in any order). O(n).
  template <typename Range, typename ValueOf>
  void Rebuild(const Range& live, ValueOf value_of) {
    values_.clear();
    erased_.clear();
    for (const auto& item : live) values_.push_back(value_of(item));
    ShrinkIfOversized();
    std::make_heap(values_.begin(), values_.end());
  }
  // The same from a callback that calls push(value) once per live value: for owners whose live
  // values are not a range of their own (no temporary list). O(n).
  template <typename ForEachLive>
  void RebuildFrom(ForEachLive&& for_each_live) {
    values_.clear();
    erased_.clear();
    for_each_live([this](uint64_t v) { values_.push_back(v); });
    ShrinkIfOversized();
    std::make_heap(values_.begin(), values_.end());
  }
  // The same without an outside list: values minus erased, by sorting. O(n log n).
  void Compact();
  bool empty() const { return values_.empty(); }
  // The largest value, 0 when empty.
  uint64_t Max() const { return values_.empty() ? 0 : values_.front(); }
  void Clear() {
    values_.clear();
    erased_.clear();
  }

 private:
  static constexpr std::size_t kSlack = 16;

  // Restores "the top of values_ is live": a top that is also the top of erased_ was erased.
  void Settle() {
    while (!erased_.empty()) {
      if (values_.empty() || erased_.front() > values_.front()) {
        // Not in the set (a caller's bug): forget it rather than let it grow the heap.
        std::pop_heap(erased_.begin(), erased_.end());
        erased_.pop_back();
      } else if (erased_.front() == values_.front()) {
        std::pop_heap(values_.begin(), values_.end());
        values_.pop_back();
        std::pop_heap(erased_.begin(), erased_.end());
        erased_.pop_back();
      } else {
        return;
      }
    }
  }

  void ShrinkIfOversized() {
    if (values_.capacity() > 4 * values_.size() + kSlack) values_.shrink_to_fit();
    if (erased_.capacity() > 4 * values_.size() + kSlack) {
      erased_.clear();
      erased_.shrink_to_fit();
    }
  }

  std::vector<uint64_t> values_;
  std::vector<uint64_t> erased_;
};

inline void MaxMultiset::Compact() {
  std::sort(values_.begin(), values_.end());
  std::sort(erased_.begin(), erased_.end());
  std::size_t out = 0;
  std::size_t e = 0;
  for (std::size_t i = 0; i < values_.size(); ++i) {
    while (e < erased_.size() && erased_[e] < values_[i]) ++e;  // not in the set: dropped
    if (e < erased_.size() && erased_[e] == values_[i]) {
      ++e;
      continue;
    }
    values_[out++] = values_[i];
  }
  values_.resize(out);
  erased_.clear();
  ShrinkIfOversized();
  std::make_heap(values_.begin(), values_.end());
}

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_MAX_MULTISET_H_
