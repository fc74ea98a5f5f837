// Segment's largest free range (the largest weight of its extent map, address_btree.h) against a
// brute-force reference over segments large enough that the map has inner nodes whose stored
// largest every change must keep: allocation that always splits the largest range (a bump
// allocator, a snapshot replayed in address order), ranges all of one size (every change can hit
// the top), frees that merge with the largest range, and random churn over driver allocations
// and reservations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "fragscope/model/segment.h"

namespace fragscope {
namespace {

using Runs = std::vector<std::pair<uint64_t, uint64_t>>;

// Blocks by address, and the mapped ranges of a reservation; free = mapped minus blocks.
class Reference {
 public:
  Reference(SegmentKind kind, uint64_t begin, uint64_t size) : begin_(begin), end_(begin + size) {
    if (kind == SegmentKind::kDriverAllocation) mapped_[begin] = end_;
  }
  void Alloc(uint64_t address, uint64_t size) { blocks_[address] = size; }
  void Free(uint64_t address) { blocks_.erase(address); }
  void Map(uint64_t begin, uint64_t end) { mapped_[begin] = end; }
  const std::map<uint64_t, uint64_t>& blocks() const { return blocks_; }

  Runs FreeRuns() const {
    Runs runs;
    for (const auto& [m_begin, m_end] : mapped_) {
      uint64_t cursor = m_begin;
      auto it = blocks_.upper_bound(m_begin);
      if (it != blocks_.begin()) {
        auto prev = std::prev(it);
        cursor = std::max(cursor, std::min(m_end, prev->first + prev->second));
      }
      for (; it != blocks_.end() && it->first < m_end; ++it) {
        if (it->first > cursor) runs.emplace_back(cursor, it->first);
        cursor = std::max(cursor, std::min(m_end, it->first + it->second));
      }
      if (cursor < m_end) runs.emplace_back(cursor, m_end);
    }
    // Touching runs of adjacent mappings are one range.
    Runs merged;
    for (const auto& r : runs) {
      if (!merged.empty() && merged.back().second == r.first) {
        merged.back().second = r.second;
      } else {
        merged.push_back(r);
      }
    }
    return merged;
  }

 private:
  uint64_t begin_;
  uint64_t end_;
  std::map<uint64_t, uint64_t> blocks_;  // address -> size
  std::map<uint64_t, uint64_t> mapped_;  // begin -> end
};

void ExpectSame(const Segment& s, const Reference& ref, int step) {
  const Runs runs = ref.FreeRuns();
  uint64_t largest = 0;
  uint64_t total = 0;
  for (const auto& [b, e] : runs) {
    largest = std::max(largest, e - b);
    total += e - b;
  }
  ASSERT_EQ(s.largest_free_bytes(), largest) << "step " << step;
  ASSERT_EQ(s.Contribution().largest_free, largest) << "step " << step;
  ASSERT_EQ(s.free_bytes(), total) << "step " << step;
  ASSERT_EQ(s.free_range_count(), runs.size()) << "step " << step;
}

void Alloc(Segment& s, Reference& ref, uint64_t address, uint64_t size) {
  BlockSite replaced;
  ASSERT_EQ(s.AllocBlock(address, SubBlock{size}, &replaced), Segment::Placement::kPlaced)
      << address;
  ref.Alloc(address, size);
}

void Free(Segment& s, Reference& ref, uint64_t address) {
  BlockSite freed;
  ASSERT_TRUE(s.FreeBlock(address, &freed)) << address;
  ref.Free(address);
}

// A bump allocator: each block is carved from the front of the last (largest) free range, so
// every allocation ends the life of the top range; then frees from the front grow one range
// that is the largest each time, and a second round of bumps fills it again.
TEST(SegmentLargestFreeTest, AllocationThatAlwaysSplitsTheLargestRange) {
  constexpr uint64_t kBegin = 1 << 20;
  constexpr uint64_t kSize = 200000;
  Segment s(SegmentKind::kDriverAllocation, kBegin, kSize, 0, 0);
  Reference ref(SegmentKind::kDriverAllocation, kBegin, kSize);
  s.BecomeAnnotated();
  std::mt19937_64 rng(3);
  std::vector<uint64_t> placed;
  int step = 0;
  for (int round = 0; round < 2; ++round) {
    uint64_t cursor = kBegin;
    while (true) {
      const uint64_t size = 1 + rng() % 300;
      if (cursor + size > kBegin + kSize) break;
      if (ref.blocks().count(cursor) == 0 &&
          s.CanPlaceBlock(cursor, size)) {  // round 2 fills the freed front only
        Alloc(s, ref, cursor, size);
        placed.push_back(cursor);
        ExpectSame(s, ref, step++);
        if (HasFatalFailure()) return;
      } else if (round == 1) {
        break;
      }
      cursor += size;
    }
    // Free the front half in address order: the range at the front grows and is the largest.
    std::sort(placed.begin(), placed.end());
    for (std::size_t i = 0; i < placed.size() / 2; ++i) {
      Free(s, ref, placed[i]);
      ExpectSame(s, ref, step++);
      if (HasFatalFailure()) return;
    }
    placed.erase(placed.begin(), placed.begin() + static_cast<long>(placed.size() / 2));
  }
}

// Every free range of one size: each change removes a range as large as the top.
TEST(SegmentLargestFreeTest, RangesAllOfOneSize) {
  constexpr uint64_t kBegin = 0x7f0000000000;
  constexpr uint64_t kSlots = 2000;
  Segment s(SegmentKind::kDriverAllocation, kBegin, kSlots * 20, 0, 0);
  Reference ref(SegmentKind::kDriverAllocation, kBegin, kSlots * 20);
  // Blocks of 10 at every 20 bytes: 2000 free ranges of 10.
  for (uint64_t i = 0; i < kSlots; ++i) {
    Alloc(s, ref, kBegin + i * 20, 10);
    if (HasFatalFailure()) return;
  }
  ExpectSame(s, ref, 0);
  std::mt19937_64 rng(11);
  for (int step = 0; step < 20000; ++step) {
    // Fill one gap with a block of 10 (the range dies, no piece is left) or free a block
    // (three ranges become one of 30, the largest, or of 20 at the segment's end).
    const uint64_t slot = rng() % kSlots;
    const uint64_t block = kBegin + slot * 20;
    const uint64_t gap = block + 10;
    if (ref.blocks().count(gap) == 0 && s.CanPlaceBlock(gap, 10) && rng() % 2) {
      Alloc(s, ref, gap, 10);
    } else if (ref.blocks().count(gap) != 0) {
      Free(s, ref, gap);
    } else if (ref.blocks().count(block) != 0) {
      Free(s, ref, block);
    } else {
      Alloc(s, ref, block, 10);
    }
    if (HasFatalFailure()) return;
    ExpectSame(s, ref, step);
    if (HasFatalFailure()) return;
  }
}

// Random churn of a few hundred blocks (extent leaves under inner nodes), with frees that merge
// with the largest range, over a driver allocation and over a reservation mapped in pieces.
void RandomChurn(SegmentKind kind, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  constexpr uint64_t kBegin = 0x10000;
  constexpr uint64_t kSize = 1 << 16;
  Segment s(kind, kBegin, kSize, 0, 0);
  Reference ref(kind, kBegin, kSize);
  if (kind == SegmentKind::kVmmReservation) {
    // Every other 4 KiB piece mapped: free ranges never cross the holes.
    for (uint64_t a = kBegin; a < kBegin + kSize; a += 8192) {
      s.Map(a, Mapping{4096, 1, 0, 4096, false});
      ref.Map(a, a + 4096);
    }
  }
  s.BecomeAnnotated();
  std::mt19937_64 rng(seed);
  for (int step = 0; step < 30000; ++step) {
    const bool grow = ref.blocks().size() < 300 || rng() % 2;
    if (grow) {
      const uint64_t size = 1 + rng() % (step % 7 == 0 ? 2000 : 200);
      const uint64_t address = kBegin + rng() % kSize;
      // Not over a block, nor at one's address (that would replace it).
      if (ref.blocks().count(address) != 0 || !s.CanPlaceBlock(address, size)) continue;
      Alloc(s, ref, address, size);
    } else {
      auto it = std::next(ref.blocks().begin(), static_cast<long>(rng() % ref.blocks().size()));
      Free(s, ref, it->first);
    }
    if (::testing::Test::HasFatalFailure()) return;
    ExpectSame(s, ref, step);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(SegmentLargestFreeTest, RandomChurnOverADriverAllocation) {
  for (uint32_t seed : {1u, 5u, 2024u}) {
    RandomChurn(SegmentKind::kDriverAllocation, seed);
    if (HasFatalFailure()) return;
  }
}

TEST(SegmentLargestFreeTest, RandomChurnOverAReservation) {
  for (uint32_t seed : {2u, 6u}) {
    RandomChurn(SegmentKind::kVmmReservation, seed);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace fragscope
