// Stack interning: one id per distinct stack, stable across threads, frames readable once.
#include "recording/stack_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>
#include <vector>

namespace fragscope::agent {
namespace {

TEST(StackTableTest, SameStackSameIdDifferentStackDifferentId) {
  StackTable table;
  ASSERT_TRUE(table.Init(1024, 32));
  uint64_t a[] = {1, 2, 3};
  uint64_t b[] = {1, 2, 4};
  uint32_t slot_a = 0, slot_a2 = 0, slot_b = 0;
  uint64_t id_a = table.Intern(a, 3, &slot_a);
  uint64_t id_a2 = table.Intern(a, 3, &slot_a2);
  uint64_t id_b = table.Intern(b, 3, &slot_b);
  EXPECT_NE(id_a, 0u);
  EXPECT_EQ(id_a, id_a2);
  EXPECT_EQ(slot_a, slot_a2);
  EXPECT_NE(id_a, id_b);
  uint64_t frames[StackTable::kMaxDepth];
  ASSERT_EQ(table.Frames(slot_b, id_b, frames), 3);
  EXPECT_EQ(frames[2], 4u);
  EXPECT_EQ(table.Frames(slot_b, id_a, frames), -1);  // wrong id for that slot
  // A prefix is a different stack.
  uint32_t slot_p = 0;
  EXPECT_NE(table.Intern(a, 2, &slot_p), id_a);
}

// How the capture ended travels with the frames; frames clamped to the table's depth are a
// stack cut by the depth limit, whatever the capture said.
TEST(StackTableTest, KeepsHowTheCaptureEnded) {
  StackTable table;
  ASSERT_TRUE(table.Init(64, 2));
  uint64_t a[] = {1, 2}, deep[] = {5, 6, 7};
  uint32_t slot_a = 0, slot_deep = 0;
  const uint64_t id_a = table.Intern(a, 2, &slot_a, StackEnd::kNoUnwindInfo);
  const uint64_t id_deep = table.Intern(deep, 3, &slot_deep, StackEnd::kOutermost);
  uint64_t frames[StackTable::kMaxDepth];
  StackEnd end = StackEnd::kUnspecified;
  ASSERT_EQ(table.Frames(slot_a, id_a, frames, &end), 2);
  EXPECT_EQ(end, StackEnd::kNoUnwindInfo);
  ASSERT_EQ(table.Frames(slot_deep, id_deep, frames, &end), 2);
  EXPECT_EQ(end, StackEnd::kDepthLimit);
  EXPECT_EQ(frames[1], 6u);
}

// The id is the hash alone (Intern compares ids, not frames), so stacks that differ a little
// must hash apart: every prefix, every swap of two frames (inside a lane and across lanes),
// every frame moved by one byte or one page, and many random stacks.
TEST(StackTableTest, HashStackSeparatesNearbyStacks) {
  std::vector<uint64_t> base(StackTable::kMaxDepth);
  for (size_t i = 0; i < base.size(); ++i) base[i] = 0x7f1234560000ull + i * 0x1a3;
  const int n = static_cast<int>(base.size());
  std::set<uint64_t> seen;
  size_t made = 0;
  auto add = [&](const std::vector<uint64_t>& pcs, int count) {
    const uint64_t h = HashStack(pcs.data(), count);
    EXPECT_NE(h, 0u);
    seen.insert(h);
    ++made;
  };
  for (int count = 1; count <= n; ++count) add(base, count);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      std::vector<uint64_t> swapped = base;
      std::swap(swapped[i], swapped[j]);
      add(swapped, n);
    }
    for (uint64_t delta : {uint64_t{1}, uint64_t{4096}}) {
      std::vector<uint64_t> moved = base;
      moved[i] += delta;
      add(moved, n);
    }
  }
  uint64_t x = 0x243f6a8885a308d3ull;  // xorshift: reproducible "random" stacks
  for (int k = 0; k < 100000; ++k) {
    std::vector<uint64_t> pcs(32);
    for (uint64_t& pc : pcs) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      pc = 0x7f0000000000ull + (x & 0xffffffffull);
    }
    add(pcs, 1 + k % 32);
  }
  EXPECT_EQ(seen.size(), made);
}

// A caller that hashed the frames during the walk finds the same slot as one that did not; a
// hash of more frames than the table keeps is not trusted (the table hashes what it keeps).
TEST(StackTableTest, InternWithTheCallersHashFindsTheSameSlot) {
  StackTable table;
  ASSERT_TRUE(table.Init(64, 8));
  uint64_t pcs[12] = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22};
  uint32_t slot_a = 0, slot_b = 0, slot_c = 0;
  const uint64_t id = table.Intern(pcs, 5, HashStack(pcs, 5), &slot_a);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(table.Intern(pcs, 5, &slot_b), id);
  EXPECT_EQ(slot_b, slot_a);
  const uint64_t long_id = table.Intern(pcs, 12, HashStack(pcs, 12), &slot_c);
  uint32_t slot_d = 0;
  EXPECT_EQ(table.Intern(pcs, 8, &slot_d), long_id);  // clamped to the table's 8 frames
  EXPECT_EQ(slot_d, slot_c);
}

TEST(StackTableTest, EmptyStackHasNoId) {
  StackTable table;
  ASSERT_TRUE(table.Init(64, 8));
  uint32_t slot = 0;
  EXPECT_EQ(table.Intern(nullptr, 0, &slot), 0u);
}

TEST(StackTableTest, DepthIsClamped) {
  StackTable table;
  ASSERT_TRUE(table.Init(64, 4));
  uint64_t pcs[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  uint32_t slot = 0;
  uint64_t id = table.Intern(pcs, 10, &slot);
  uint64_t frames[StackTable::kMaxDepth];
  EXPECT_EQ(table.Frames(slot, id, frames), 4);
  uint32_t slot4 = 0;
  EXPECT_EQ(table.Intern(pcs, 4, &slot4), id);
}

TEST(StackTableTest, SentFlagsAndReset) {
  StackTable table;
  ASSERT_TRUE(table.Init(64, 8));
  uint64_t pcs[] = {7, 8};
  uint32_t slot = 0;
  table.Intern(pcs, 2, &slot);
  EXPECT_FALSE(table.IsSent(slot));
  table.MarkSent(slot);
  EXPECT_TRUE(table.IsSent(slot));
  table.ResetSent();
  EXPECT_FALSE(table.IsSent(slot));
}

TEST(StackTableTest, FullTableReportsNoStackAndCounts) {
  StackTable table;
  ASSERT_TRUE(table.Init(64, 2));
  uint64_t interned = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    uint64_t pcs[] = {i, i * 3 + 1};
    uint32_t slot = 0;
    if (table.Intern(pcs, 2, &slot) != 0) ++interned;
  }
  EXPECT_EQ(interned, 64u);
  EXPECT_EQ(table.overflows(), 1000u - 64u);
}

TEST(StackTableTest, ConcurrentInternAgreesOnIds) {
  StackTable table;
  ASSERT_TRUE(table.Init(4096, 16));
  constexpr int kThreads = 8;
  constexpr int kStacks = 500;
  std::vector<std::vector<std::pair<uint64_t, uint32_t>>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round) {
        for (int s = 0; s < kStacks; ++s) {
          uint64_t pcs[] = {static_cast<uint64_t>(s), 0x1000, static_cast<uint64_t>(s) * 7};
          uint32_t slot = 0;
          uint64_t id = table.Intern(pcs, 3, &slot);
          if (round == 0) seen[t].push_back({id, slot});
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::set<uint64_t> ids;
  for (int s = 0; s < kStacks; ++s) {
    for (int t = 1; t < kThreads; ++t) ASSERT_EQ(seen[t][s], seen[0][s]);
    ids.insert(seen[0][s].first);
    uint64_t frames[StackTable::kMaxDepth];
    ASSERT_EQ(table.Frames(seen[0][s].second, seen[0][s].first, frames), 3);
    EXPECT_EQ(frames[2], static_cast<uint64_t>(s) * 7);
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kStacks));
}

}  // namespace
}  // namespace fragscope::agent
