// Segment: blocks and free ranges kept in one ordered map of extents, checked against a byte map
// under random block, pending-free, map and unmap events (overlapping, touching, zero-size,
// replacing, over unmapped bytes), and a few layouts written out.
#include "fragscope/model/segment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace fragscope {
namespace {

using Runs = std::vector<std::pair<uint64_t, uint64_t>>;

Runs FreeRanges(const Segment& s) {
  Runs runs;
  s.ForEachFreeRange([&](uint64_t begin, uint64_t end) { runs.emplace_back(begin, end); });
  return runs;
}

TEST(SegmentTest, BlockSplitsAndFreeMergesTheFreeRange) {
  Segment s(SegmentKind::kDriverAllocation, 1000, 100, 0, 0);
  BlockSite replaced;
  EXPECT_EQ(s.AllocBlock(1040, SubBlock{10}, &replaced), Segment::Placement::kPlaced);
  EXPECT_EQ(FreeRanges(s), (Runs{{1000, 1040}, {1050, 1100}}));
  EXPECT_EQ(s.largest_free_bytes(), 50u);
  EXPECT_EQ(s.AllocBlock(1000, SubBlock{40}, &replaced), Segment::Placement::kPlaced);
  EXPECT_EQ(FreeRanges(s), (Runs{{1050, 1100}}));
  EXPECT_EQ(s.AllocBlock(1045, SubBlock{10}, &replaced), Segment::Placement::kRejected);
  BlockSite freed;
  ASSERT_TRUE(s.FreeBlock(1040, &freed));
  EXPECT_EQ(freed.size, 10u);
  EXPECT_EQ(FreeRanges(s), (Runs{{1040, 1100}}));
  ASSERT_TRUE(s.FreeBlock(1000, &freed));
  EXPECT_EQ(FreeRanges(s), (Runs{{1000, 1100}}));
  EXPECT_EQ(s.block_count(), 0u);
  EXPECT_FALSE(s.FreeBlock(1000, &freed));
}

TEST(SegmentTest, ReservationFreesOnlyMappedBytes) {
  Segment s(SegmentKind::kVmmReservation, 1000, 100, 0, 0);
  s.Map(1000, Mapping{30, 1, 0, 30, false});
  s.Map(1060, Mapping{40, 2, 0, 40, false});
  BlockSite replaced;
  // A block over mapped and unmapped bytes: only the mapped ones come back free.
  EXPECT_EQ(s.AllocBlock(1020, SubBlock{50}, &replaced), Segment::Placement::kPlaced);
  EXPECT_EQ(FreeRanges(s), (Runs{{1000, 1020}, {1070, 1100}}));
  BlockSite freed;
  ASSERT_TRUE(s.FreeBlock(1020, &freed));
  EXPECT_EQ(FreeRanges(s), (Runs{{1000, 1030}, {1060, 1100}}));
  EXPECT_EQ(s.free_bytes(), 70u);
}

// Freeing most of many blocks gives their payload slots back (memory O(live blocks)); the
// blocks left keep their own stream and pool.
TEST(SegmentTest, FreedBlockSlotsAreGivenBackAndLiveBlocksKeepTheirData) {
  Segment s(SegmentKind::kDriverAllocation, 0, 4000, 0, 0);
  BlockSite replaced;
  for (uint64_t i = 0; i < 1000; ++i) {
    SubBlock b;
    b.size = 3;
    b.stack_id = i;
    b.stream = 1000 + i;
    b.pool = 2000 + i;
    ASSERT_EQ(s.AllocBlock(i * 4, b, &replaced), Segment::Placement::kPlaced);
  }
  BlockSite freed;
  for (uint64_t i = 0; i < 1000; ++i) {
    if (i % 10 != 0) {
      ASSERT_TRUE(s.FreeBlock(i * 4, &freed));
    }
  }
  std::vector<uint64_t> seen;
  s.ForEachBlock([&](uint64_t address, const SubBlock& b) {
    EXPECT_EQ(b.stack_id, address / 4);
    EXPECT_EQ(b.stream, 1000 + address / 4);
    EXPECT_EQ(b.pool, 2000 + address / 4);
    seen.push_back(address);
  });
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(s.block_count(), 100u);
}

// What the extents must add up to: the blocks as the events left them and the free bytes as
// "backed minus blocks", byte by byte.
class Reference {
 public:
  Reference(SegmentKind kind, uint64_t begin, uint64_t size)
      : begin_(begin), size_(size), mapped_(size, kind == SegmentKind::kDriverAllocation) {}

  bool CanPlace(uint64_t address, uint64_t size) const {
    if (address < begin_ || address - begin_ > size_ || size > size_ - (address - begin_)) {
      return false;
    }
    for (const auto& [a, b] : blocks_) {
      if (a == address) continue;
      if (a < address && a + b.size > address) return false;
      if (a > address && a < address + size) return false;
    }
    return true;
  }
  Segment::Placement Alloc(uint64_t address, const SubBlock& block) {
    if (!CanPlace(address, block.size)) return Segment::Placement::kRejected;
    annotated_ = true;
    const bool replaced = blocks_.erase(address) > 0;
    blocks_[address] = block;
    return replaced ? Segment::Placement::kReplaced : Segment::Placement::kPlaced;
  }
  bool Free(uint64_t address) { return blocks_.erase(address) > 0; }
  bool MarkPending(uint64_t address) {
    auto it = blocks_.find(address);
    if (it == blocks_.end()) return false;
    it->second.pending_free = true;
    return true;
  }
  void SetMapped(uint64_t begin, uint64_t end, bool mapped) {
    for (uint64_t a = begin; a < end; ++a) mapped_[a - begin_] = mapped;
  }
  void Annotate() { annotated_ = true; }

  Runs FreeRuns() const {
    Runs runs;
    if (!annotated_) return runs;
    std::vector<bool> used(size_, false);
    for (const auto& [a, b] : blocks_) {
      for (uint64_t i = a; i < a + b.size; ++i) used[i - begin_] = true;
    }
    for (uint64_t i = 0; i < size_; ++i) {
      if (!mapped_[i] || used[i]) continue;
      if (!runs.empty() && runs.back().second == begin_ + i) {
        ++runs.back().second;
      } else {
        runs.emplace_back(begin_ + i, begin_ + i + 1);
      }
    }
    return runs;
  }
  uint64_t LargestIfPendingCompleted() const {
    const Runs runs = FreeRuns();
    uint64_t largest = 0;
    for (const auto& [b, e] : runs) largest = std::max(largest, e - b);
    for (const auto& [a, b] : blocks_) {
      if (!b.pending_free || b.size == 0) continue;
      uint64_t run = b.size;
      for (const auto& [rb, re] : runs) {
        if (re == a || rb == a + b.size) run += re - rb;
      }
      largest = std::max(largest, run);
    }
    return largest;
  }
  const std::map<uint64_t, SubBlock>& blocks() const { return blocks_; }

 private:
  uint64_t begin_;
  uint64_t size_;
  std::vector<bool> mapped_;
  std::map<uint64_t, SubBlock> blocks_;
  bool annotated_ = false;
};

void ExpectSame(const Segment& s, const Reference& ref, uint32_t seed, int step) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " step " << step);
  const Runs runs = ref.FreeRuns();
  ASSERT_EQ(FreeRanges(s), runs);
  uint64_t total = 0;
  uint64_t largest = 0;
  for (const auto& [b, e] : runs) {
    total += e - b;
    largest = std::max(largest, e - b);
  }
  ASSERT_EQ(s.free_bytes(), total);
  ASSERT_EQ(s.largest_free_bytes(), largest);
  ASSERT_EQ(s.free_range_count(), runs.size());
  std::vector<std::pair<uint64_t, uint64_t>> got;
  s.ForEachBlock([&](uint64_t a, const SubBlock& b) { got.emplace_back(a, b.size); });
  std::vector<std::pair<uint64_t, uint64_t>> want;
  uint64_t live = 0;
  uint64_t pending = 0;
  for (const auto& [a, b] : ref.blocks()) {
    want.emplace_back(a, b.size);
    (b.pending_free ? pending : live) += b.size;
  }
  ASSERT_EQ(got, want);
  ASSERT_EQ(s.block_count(), want.size());
  if (s.coverage() == Coverage::kAnnotated) {
    const SegmentContribution c = s.Contribution();
    ASSERT_EQ(c.allocated, live);
    ASSERT_EQ(c.pending, pending);
    ASSERT_EQ(c.cached, total);
    ASSERT_EQ(c.largest_free, largest);
  }
  ASSERT_EQ(s.LargestFreeIfPendingCompleted(), ref.LargestIfPendingCompleted());
}

void RandomEvents(SegmentKind kind, uint32_t seed) {
  constexpr uint64_t kBegin = 4096;
  constexpr uint64_t kSize = 256;
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return rng() % n; };
  Segment s(kind, kBegin, kSize, 0, 0);
  Reference ref(kind, kBegin, kSize);
  // Mappings of a reservation: 8 slots of 32 bytes, mapped whole (a quarter of them imported,
  // which backs nothing of this process's) and unmapped by halves, so partial unmaps split them.
  std::vector<bool> half_mapped(16, false);
  for (int step = 0; step < 20000; ++step) {
    // Some addresses land just outside the segment, so enclosure is checked too.
    const uint64_t address = kBegin - 4 + pick(kSize + 8);
    switch (pick(kind == SegmentKind::kVmmReservation ? 10 : 7)) {
      case 0:
      case 1:
      case 2: {
        SubBlock b;
        b.size = pick(8) == 0 ? 0 : 1 + pick(step % 5 == 0 ? 64 : 12);
        b.stack_id = pick(4);
        b.stream = pick(2);
        b.pending_free = pick(10) == 0;
        BlockSite replaced;
        const Segment::Placement want = ref.Alloc(address, b);
        ASSERT_EQ(s.AllocBlock(address, b, &replaced), want) << "step " << step;
        break;
      }
      case 3:
      case 4: {
        // Mostly frees of blocks that exist.
        uint64_t a = address;
        if (!ref.blocks().empty() && pick(4) != 0) {
          a = std::next(ref.blocks().begin(), static_cast<long>(pick(ref.blocks().size())))->first;
        }
        BlockSite freed;
        const bool want = ref.Free(a);
        ASSERT_EQ(s.FreeBlock(a, &freed), want) << "step " << step;
        break;
      }
      case 5: {
        uint64_t a = address;
        if (!ref.blocks().empty()) {
          a = std::next(ref.blocks().begin(), static_cast<long>(pick(ref.blocks().size())))->first;
        }
        ASSERT_EQ(s.MarkPendingFree(a), ref.MarkPending(a));
        break;
      }
      case 6:
        if (pick(50) == 0) {
          s.BecomeAnnotated();
          ref.Annotate();
        }
        break;
      case 7:
      case 8: {
        const uint64_t slot = pick(8);
        const uint64_t begin = kBegin + slot * 32;
        if (!half_mapped[2 * slot] && !half_mapped[2 * slot + 1]) {
          ASSERT_FALSE(s.MappingOverlaps(begin, 32));
          const bool imported = pick(4) == 0;
          s.Map(begin, Mapping{32, 1 + slot, 0, 32, imported});
          ref.SetMapped(begin, begin + 32, !imported);
          half_mapped[2 * slot] = half_mapped[2 * slot + 1] = true;
        } else {
          const uint64_t half = half_mapped[2 * slot] ? 2 * slot : 2 * slot + 1;
          const uint64_t h_begin = kBegin + half * 16;
          s.Unmap(h_begin, h_begin + 16);
          ref.SetMapped(h_begin, h_begin + 16, false);
          half_mapped[half] = false;
        }
        break;
      }
      case 9:
        break;
    }
    ExpectSame(s, ref, seed, step);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(SegmentTest, DriverAllocationMatchesAByteMap) {
  for (uint32_t seed : {1u, 2u, 3u, 42u}) {
    RandomEvents(SegmentKind::kDriverAllocation, seed);
    if (HasFatalFailure()) return;
  }
}

TEST(SegmentTest, ReservationMatchesAByteMap) {
  for (uint32_t seed : {1u, 2u, 3u, 42u}) {
    RandomEvents(SegmentKind::kVmmReservation, seed);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace fragscope
