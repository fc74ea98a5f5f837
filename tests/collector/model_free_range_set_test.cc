// FreeRangeSet: the gap summary behind largest_free_range. Layouts are tiny and written out.
#include "fragscope/model/free_range_set.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "fragscope/model/max_multiset.h"

namespace fragscope {
namespace {

TEST(FreeRangeSetTest, InsertMergesTouchingRanges) {
  FreeRangeSet f;
  f.Insert(0, 10);
  f.Insert(20, 30);
  EXPECT_EQ(f.count(), 2u);
  EXPECT_EQ(f.total_bytes(), 20u);
  EXPECT_EQ(f.largest_bytes(), 10u);
  // [10, 20) touches both: one run [0, 30).
  f.Insert(10, 20);
  EXPECT_EQ(f.count(), 1u);
  EXPECT_EQ(f.total_bytes(), 30u);
  EXPECT_EQ(f.largest_bytes(), 30u);
  EXPECT_EQ(f.ranges().begin()->first, 0u);
  EXPECT_EQ(f.ranges().begin()->second, 30u);
}

TEST(FreeRangeSetTest, InsertOverlappingDoesNotDoubleCount) {
  FreeRangeSet f;
  f.Insert(0, 10);
  f.Insert(5, 15);  // 5 new bytes
  EXPECT_EQ(f.total_bytes(), 15u);
  EXPECT_EQ(f.count(), 1u);
}

TEST(FreeRangeSetTest, EraseSplitsAndReportsBytesRemoved) {
  FreeRangeSet f;
  f.Insert(0, 100);
  // Carving [40, 50) leaves [0, 40) and [50, 100).
  EXPECT_EQ(f.Erase(40, 50), 10u);
  EXPECT_EQ(f.count(), 2u);
  EXPECT_EQ(f.total_bytes(), 90u);
  EXPECT_EQ(f.largest_bytes(), 50u);
  // An erase spanning the hole and parts of both ranges removes 30 + 10 bytes.
  EXPECT_EQ(f.Erase(10, 60), 40u);
  EXPECT_EQ(f.total_bytes(), 50u);
  EXPECT_EQ(f.largest_bytes(), 40u);  // [60, 100)
  EXPECT_EQ(f.Erase(200, 300), 0u);
}

TEST(FreeRangeSetTest, LargestFollowsRemovalOfTheLargest) {
  FreeRangeSet f;
  f.Insert(0, 8);
  f.Insert(16, 48);  // 32
  f.Insert(64, 80);  // 16
  EXPECT_EQ(f.largest_bytes(), 32u);
  f.Erase(16, 48);
  EXPECT_EQ(f.largest_bytes(), 16u);
  f.Erase(64, 80);
  EXPECT_EQ(f.largest_bytes(), 8u);
  f.Erase(0, 8);
  EXPECT_EQ(f.largest_bytes(), 0u);
  EXPECT_TRUE(f.empty());
}

TEST(FreeRangeSetTest, MergedSizeIfFreedCountsBothNeighbours) {
  FreeRangeSet f;
  f.Insert(0, 10);
  f.Insert(20, 25);
  f.Insert(40, 50);
  // Freeing [10, 20) joins [0, 10) and [20, 25): 25 bytes. [30, 35) touches nothing: 5.
  EXPECT_EQ(f.MergedSizeIfFreed(10, 20), 25u);
  EXPECT_EQ(f.MergedSizeIfFreed(30, 35), 5u);
  EXPECT_EQ(f.MergedSizeIfFreed(35, 40), 15u);
  // The set itself is unchanged.
  EXPECT_EQ(f.total_bytes(), 25u);
}

// The updates change ranges in place and keep the largest size in a lazy heap: check them
// against a byte map over thousands of random inserts and erases (overlapping, touching,
// spanning several ranges), including long runs that make the heap rebuild itself.
TEST(FreeRangeSetTest, MatchesAByteMapUnderRandomUpdates) {
  constexpr uint64_t kSpace = 512;
  for (uint32_t seed : {1u, 2u, 3u, 42u}) {
    std::mt19937_64 rng(seed);
    FreeRangeSet f;
    std::vector<bool> free_byte(kSpace, false);
    for (int step = 0; step < 20000; ++step) {
      const uint64_t begin = rng() % kSpace;
      const uint64_t end = std::min(kSpace, begin + rng() % (step % 7 == 0 ? 128 : 12));
      uint64_t expect_removed = 0;
      if (rng() % 2) {
        f.Insert(begin, end);
        for (uint64_t i = begin; i < end; ++i) free_byte[i] = true;
      } else {
        for (uint64_t i = begin; i < end; ++i) expect_removed += free_byte[i] ? 1 : 0;
        ASSERT_EQ(f.Erase(begin, end), expect_removed) << "seed " << seed << " step " << step;
        for (uint64_t i = begin; i < end; ++i) free_byte[i] = false;
      }
      // Maximal runs of the byte map.
      std::vector<std::pair<uint64_t, uint64_t>> runs;
      for (uint64_t i = 0; i < kSpace; ++i) {
        if (!free_byte[i]) continue;
        if (!runs.empty() && runs.back().second == i) {
          ++runs.back().second;
        } else {
          runs.push_back({i, i + 1});
        }
      }
      uint64_t total = 0;
      uint64_t largest = 0;
      for (const auto& [b, e] : runs) {
        total += e - b;
        largest = std::max(largest, e - b);
      }
      const std::vector<std::pair<uint64_t, uint64_t>> got(f.ranges().begin(), f.ranges().end());
      ASSERT_EQ(got, runs) << "seed " << seed << " step " << step;
      ASSERT_EQ(f.total_bytes(), total);
      ASSERT_EQ(f.largest_bytes(), largest) << "seed " << seed << " step " << step;
      ASSERT_EQ(f.count(), runs.size());
    }
  }
}

TEST(MaxMultisetTest, MatchesAMultisetAndStaysSmall) {
  std::mt19937_64 rng(7);
  MaxMultiset m;
  std::multiset<uint64_t> ref;
  for (int step = 0; step < 50000; ++step) {
    if (ref.empty() || rng() % 3 != 0 || (step / 5000) % 2 == 1) {
      // Phases of mostly erasures (odd thousands) grow the erased heap and force rebuilds.
      if ((step / 5000) % 2 == 1 && !ref.empty() && rng() % 4 != 0) {
        auto it = std::next(ref.begin(), static_cast<long>(rng() % ref.size()));
        m.Erase(*it);
        ref.erase(it);
        if (m.Wasteful()) m.Compact();
      } else {
        const uint64_t v = rng() % 1000;
        m.Insert(v);
        ref.insert(v);
      }
    } else {
      auto it = std::next(ref.begin(), static_cast<long>(rng() % ref.size()));
      m.Erase(*it);
      ref.erase(it);
      if (m.Wasteful()) m.Compact();
    }
    ASSERT_EQ(m.Max(), ref.empty() ? 0u : *ref.rbegin()) << "step " << step;
    ASSERT_EQ(m.empty(), ref.empty());
  }
  m.Clear();
  EXPECT_EQ(m.Max(), 0u);
  EXPECT_TRUE(m.empty());
}

// An erasure of a value that is not there (a caller's bug) must not crash or grow without end.
TEST(MaxMultisetTest, ToleratesErasingAbsentValues) {
  MaxMultiset m;
  m.Insert(5);
  m.Erase(9);  // larger than everything: dropped at once
  EXPECT_EQ(m.Max(), 5u);
  for (int i = 0; i < 1000; ++i) {
    m.Erase(1);  // smaller than the top: waits in the erased heap until compacted
    if (m.Wasteful()) m.Compact();
  }
  EXPECT_EQ(m.Max(), 5u);
  m.Erase(5);
  EXPECT_EQ(m.Max(), 0u);
}

}  // namespace
}  // namespace fragscope
