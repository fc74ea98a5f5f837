// The largest of a changing set of (value, key) items whose owner can tell, for any item, whether
// it is still live: the per-segment largest free range, where an item is a free range (its size
// and its start address) and the segment's own map says whether that range still exists.
#ifndef FRAGSCOPE_MODEL_VALIDATED_MAX_HEAP_H_
#define FRAGSCOPE_MODEL_VALIDATED_MAX_HEAP_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fragscope {

// A binary max-heap of items that are never erased one by one: an item that stops being live
// (a free range that a block split, or that merged into a larger one) stays in the heap, stale,
// until it reaches the top, where the owner's liveness test drops it (Settle). A range leaving
// the segment costs nothing here, where a multiset with deletion paid for a second heap or a
// tree erase on every change; the liveness test runs only when the top itself may have gone,
// which for a range picked at random is once in as many changes as there are ranges.
//
// Guarantees, given that the owner pushes every item when it becomes live and calls Settle
// after every change that may have ended the top item's life:
// - Max() is the largest live value (0 when nothing is live), O(1);
// - Push is O(1) on average for values in random order, O(log n) at worst; Settle is O(log n)
//   per stale item it drops, each item dropped at most once;
// - memory stays O(live items): once the heap holds more than kGrowth times the live items
//   (Wasteful), the owner rebuilds it from its live items (Rebuild, O(n)).
// An item pushed twice while live (a range split and merged back to the same start and size) is
// harmless: both copies are live or stale together, and Max() is the same.
// Not thread-safe.
class ValidatedMaxHeap {
 public:
  struct Item {
    uint64_t value = 0;
    uint64_t key = 0;
    // By value alone: which of two equal values is on top changes no Max().
    bool operator<(const Item& o) const { return value < o.value; }
  };

  void Push(uint64_t value, uint64_t key) {
    items_.push_back({value, key});
    std::push_heap(items_.begin(), items_.end());
  }
  // The largest value in the heap, 0 when empty. The largest live value once settled.
  uint64_t Max() const { return items_.empty() ? 0 : items_.front().value; }
  // Drops the top item when it is (value, key), for an owner that knows that item just went.
  bool PopIfTop(uint64_t value, uint64_t key) {
    if (items_.empty() || items_.front().value != value || items_.front().key != key) {
      return false;
    }
    std::pop_heap(items_.begin(), items_.end());
    items_.pop_back();
    return true;
  }
  // Drops stale items from the top until the top is live: is_live(value, key).
  template <typename IsLive>
  void Settle(IsLive&& is_live) {
    while (!items_.empty() && !is_live(items_.front().value, items_.front().key)) {
      std::pop_heap(items_.begin(), items_.end());
      items_.pop_back();
    }
  }
  // Whether the heap holds more than kGrowth times `live` items (plus some slack, so small
  // heaps are not rebuilt all the time): each rebuild is then paid for by as many pushes.
  bool Wasteful(std::size_t live) const { return items_.size() > kGrowth * live + kSlack; }
  // Replaces the contents with the items for_each_live passes to push(value, key), exactly the
  // live ones. O(n).
  template <typename ForEachLive>
  void Rebuild(ForEachLive&& for_each_live) {
    items_.clear();
    for_each_live([this](uint64_t value, uint64_t key) { items_.push_back({value, key}); });
    if (items_.capacity() > 4 * items_.size() + kSlack) items_.shrink_to_fit();
    std::make_heap(items_.begin(), items_.end());
  }
  std::size_t size() const { return items_.size(); }  // live and stale items
  void Clear() { items_.clear(); }

 private:
  static constexpr std::size_t kGrowth = 3;
  static constexpr std::size_t kSlack = 16;

  std::vector<Item> items_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_VALIDATED_MAX_HEAP_H_
