// Frame-pointer stack capture: sees its callers, honours the skipped range and the depth limit.
#include "recording/stack_capture.h"

#include "recording/stack_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

namespace fragscope::agent {
namespace {

// Distinct, non-inlined functions so their return addresses are recognisable. `hash`
// (optional) receives the walk's hash.
__attribute__((noinline)) int Level3(uint64_t* pcs, int max, uint64_t* hash = nullptr) {
  uint64_t ignored = 0;
  StackEnd end = StackEnd::kUnspecified;
  int n = CaptureStack(pcs, max, hash != nullptr ? hash : &ignored, &end);
  asm volatile("" ::: "memory");  // keep the call from being a tail call
  return n;
}
__attribute__((noinline)) int Level2(uint64_t* pcs, int max, uint64_t* hash = nullptr) {
  int n = Level3(pcs, max, hash);
  asm volatile("" ::: "memory");
  return n;
}
__attribute__((noinline)) int Level1(uint64_t* pcs, int max, uint64_t* hash = nullptr) {
  int n = Level2(pcs, max, hash);
  asm volatile("" ::: "memory");
  return n;
}

bool Inside(uint64_t pc, void* fn) {
  // Return addresses lie within a few hundred bytes after the function's start.
  uint64_t start = reinterpret_cast<uint64_t>(fn);
  return pc > start && pc < start + 512;
}

TEST(StackCaptureTest, SeesItsCallersInnermostFirst) {
  SetSkippedRange(0, 0);
  uint64_t pcs[32];
  int n = Level1(pcs, 32);
  ASSERT_GE(n, 3);
  EXPECT_TRUE(Inside(pcs[0], reinterpret_cast<void*>(&Level3)));
  EXPECT_TRUE(Inside(pcs[1], reinterpret_cast<void*>(&Level2)));
  EXPECT_TRUE(Inside(pcs[2], reinterpret_cast<void*>(&Level1)));
}

TEST(StackCaptureTest, DepthLimitAndZero) {
  SetSkippedRange(0, 0);
  uint64_t pcs[32];
  EXPECT_EQ(Level1(pcs, 2), 2);
  EXPECT_EQ(Level1(pcs, 0), 0);
}

TEST(StackCaptureTest, SkipsLeadingFramesInTheSkippedRange) {
  SetSkippedRange(0, 0);
  uint64_t all[32];
  int total = Level1(all, 32);
  ASSERT_GE(total, 3);
  SetSkippedRange(all[0], all[0] + 1);  // exactly Level3's return address
  uint64_t pcs[32];
  int n = Level1(pcs, 32);
  SetSkippedRange(0, 0);
  ASSERT_EQ(n, total - 1);
  EXPECT_EQ(pcs[0], all[1]);
}

TEST(StackCaptureTest, WorksOnOtherThreads) {
  SetSkippedRange(0, 0);
  int n = 0;
  uint64_t first = 0;
  std::thread t([&] {
    uint64_t pcs[32];
    n = Level1(pcs, 32);
    first = pcs[0];
  });
  t.join();
  ASSERT_GE(n, 3);
  EXPECT_TRUE(Inside(first, reinterpret_cast<void*>(&Level3)));
}

// The hash computed during the walk is the one the stack table computes from the frames, for
// every depth limit (each lane count and remainder), with and without skipped frames.
TEST(StackCaptureTest, HashDuringTheWalkIsHashStackOfTheFrames) {
  SetSkippedRange(0, 0);
  uint64_t all[64];
  const int total = Level1(all, 64);
  ASSERT_GE(total, 3);
  for (int max = 0; max <= 64; ++max) {
    uint64_t pcs[64];
    uint64_t hash = 12345;
    const int n = Level1(pcs, max, &hash);
    ASSERT_EQ(n, std::min(max, total)) << "max " << max;
    if (n == 0) {
      EXPECT_EQ(hash, 0u);
      continue;
    }
    EXPECT_EQ(hash, HashStack(pcs, n)) << "max " << max;
    EXPECT_NE(hash, 0u);
  }
  // Skipping the innermost frame (Level3's return address) hashes what is left.
  uint64_t first[64];
  ASSERT_GE(Level1(first, 64), 3);
  SetSkippedRange(first[0], first[0] + 1);
  uint64_t pcs[64];
  uint64_t hash = 0;
  const int n = Level1(pcs, 64, &hash);
  SetSkippedRange(0, 0);
  ASSERT_GE(n, 2);
  EXPECT_EQ(pcs[0], first[1]);
  EXPECT_EQ(hash, HashStack(pcs, n));
}

}  // namespace
}  // namespace fragscope::agent
