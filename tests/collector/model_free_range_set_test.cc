// FreeRangeSet: the gap summary behind largest_free_range. Layouts are tiny and written out.
#include "fragscope/model/free_range_set.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fragscope
