// The decode budget (decode_budget.h): readers that share one take turns parsing big frames, so
// a process serving many streams holds about one big frame's parse memory at a time, and no
// frame is refused for its size. Waits are observed through waiting() (a taker is known to be
// blocked once it counts itself there), never through sleeps: nothing here depends on timing.
#include "fragscope/trace/decode_budget.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "fragscope.pb.h"
#include "fragscope/trace/arena_frame_reader.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/frame_writer.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

// Waits (bounded, generously) until `n` takers are blocked in Take.
void AwaitWaiting(const DecodeBudget& budget, int n) {
  for (int i = 0; i < 60000 && budget.waiting() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(budget.waiting(), n) << "a taker never blocked";
}

TEST(DecodeBudget, ASecondTakerWaitsUntilTheFirstGivesBack) {
  DecodeBudget budget(100);
  DecodeBudget::Lease first = budget.Take(80);
  EXPECT_EQ(budget.held(), 80u);
  std::atomic<bool> second_took{false};
  std::thread second([&] {
    DecodeBudget::Lease lease = budget.Take(80);
    second_took = true;
  });
  AwaitWaiting(budget, 1);
  EXPECT_FALSE(second_took);  // blocked: 80 + 80 is over 100
  first.Release();
  second.join();
  EXPECT_TRUE(second_took);
  EXPECT_EQ(budget.held(), 0u);
  EXPECT_EQ(budget.peak_held(), 80u);  // never both at once
  EXPECT_EQ(budget.waits(), 1u);
}

TEST(DecodeBudget, TakesThatFitTogetherDoNotWait) {
  DecodeBudget budget(100);
  DecodeBudget::Lease a = budget.Take(40);
  DecodeBudget::Lease b = budget.Take(60);
  EXPECT_EQ(budget.held(), 100u);
  EXPECT_EQ(budget.waits(), 0u);
  a = DecodeBudget::Lease();  // moving over a lease gives it back
  EXPECT_EQ(budget.held(), 60u);
}

// The budget bounds how many big frames are parsed at once, not how big one may be: a frame
// that costs more than the whole budget is parsed, alone.
TEST(DecodeBudget, AFrameBiggerThanTheBudgetIsTakenAlone) {
  DecodeBudget budget(100);
  DecodeBudget::Lease big = budget.Take(500);
  EXPECT_EQ(budget.held(), 500u);
  std::atomic<bool> small_took{false};
  std::thread small([&] {
    DecodeBudget::Lease lease = budget.Take(1);
    small_took = true;
  });
  AwaitWaiting(budget, 1);
  EXPECT_FALSE(small_took);
  big.Release();
  small.join();
  EXPECT_TRUE(small_took);
}

// Arrival order: a small taker that would fit does not overtake a big one waiting before it,
// so a big frame is never starved by a run of smaller ones.
TEST(DecodeBudget, TakersAreServedInArrivalOrder) {
  DecodeBudget budget(100);
  DecodeBudget::Lease first = budget.Take(60);
  std::atomic<bool> big_took{false}, small_took{false};
  std::thread big([&] {
    DecodeBudget::Lease lease = budget.Take(60);
    big_took = true;
  });
  AwaitWaiting(budget, 1);
  std::thread small([&] {
    DecodeBudget::Lease lease = budget.Take(10);  // fits beside `first`, but comes later
    small_took = true;
  });
  AwaitWaiting(budget, 2);  // waits behind `big`
  EXPECT_FALSE(big_took);
  EXPECT_FALSE(small_took);
  first.Release();
  big.join();
  small.join();
  EXPECT_TRUE(big_took);
  EXPECT_TRUE(small_took);
  EXPECT_EQ(budget.waits(), 2u);
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/fragscope-budget-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

constexpr int kBigEntries = 20000;  // ~2 MiB to parse: over DecodeBudget::kUnbudgetedBytes

// Hello, a Snapshot of kBigEntries allocations, End.
std::string WriteTrace(const TempDir& dir, const std::string& name, uint64_t* snapshot_bytes) {
  const std::string path = dir.File(name);
  auto writer = FrameWriter::CreateFile(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  v1::Frame hello;
  hello.mutable_hello()->set_pid(7);
  v1::Frame snapshot;
  for (int i = 0; i < kBigEntries; ++i) {
    v1::LiveAllocation* a = snapshot.mutable_snapshot()->add_allocations();
    a->set_address(0x7f0000000000ull + (static_cast<uint64_t>(i) << 21));
    a->set_size(uint64_t{1} << 20);
  }
  *snapshot_bytes = snapshot.ByteSizeLong();
  v1::Frame end;
  end.mutable_end()->set_seq(1);
  EXPECT_TRUE(writer->Write(hello).ok());
  EXPECT_TRUE(writer->Write(snapshot).ok());
  EXPECT_TRUE(writer->Write(end).ok());
  EXPECT_TRUE(writer->Close().ok());
  return path;
}

// Two streams, a budget of one big frame: the second reader's big frame waits until the first
// reader has moved past its own (its next Next gives the cost back), and small frames pass
// without asking.
TEST(DecodeBudget, ReadersTakeTurnsWithBigFrames) {
  TempDir dir;
  uint64_t snapshot_bytes = 0;
  const std::string a_path = WriteTrace(dir, "a.fst", &snapshot_bytes);
  const std::string b_path = WriteTrace(dir, "b.fst", &snapshot_bytes);
  // Each allocation is one repeated entry (its fields are not repeated).
  const uint64_t cost = DecodeBudget::FrameCost(kBigEntries, snapshot_bytes);
  ASSERT_GE(cost, DecodeBudget::kUnbudgetedBytes);
  DecodeBudget budget(cost);

  auto a = FrameReader::OpenFile(a_path);
  ASSERT_TRUE(a.ok()) << a.status();
  a->set_decode_budget(&budget);
  ArenaFrameReader a_frames(*a);
  const v1::Frame* frame = nullptr;
  ASSERT_EQ(a_frames.Next(&frame), FrameReader::Result::kFrame);
  ASSERT_TRUE(frame->has_hello());
  EXPECT_EQ(budget.held(), 0u);  // a small frame takes nothing
  // The whole file is in the read buffer, but the big frame may wait for the budget: a caller
  // that holds a lock is told to drop it.
  EXPECT_FALSE(a->NextFrameBuffered());
  ASSERT_EQ(a_frames.Next(&frame), FrameReader::Result::kFrame);
  ASSERT_EQ(frame->snapshot().allocations_size(), kBigEntries);
  EXPECT_EQ(budget.held(), cost);  // held while the caller has the frame

  std::atomic<bool> b_has_snapshot{false};
  std::thread b_thread([&] {
    auto b = FrameReader::OpenFile(b_path);
    ASSERT_TRUE(b.ok()) << b.status();
    b->set_decode_budget(&budget);
    ArenaFrameReader b_frames(*b);
    const v1::Frame* f = nullptr;
    ASSERT_EQ(b_frames.Next(&f), FrameReader::Result::kFrame);
    ASSERT_EQ(b_frames.Next(&f), FrameReader::Result::kFrame);
    EXPECT_EQ(f->snapshot().allocations_size(), kBigEntries);
    b_has_snapshot = true;
    ASSERT_EQ(b_frames.Next(&f), FrameReader::Result::kFrame);
    EXPECT_TRUE(f->has_end());
  });
  AwaitWaiting(budget, 1);
  EXPECT_FALSE(b_has_snapshot);  // held up while `a` still has its snapshot
  ASSERT_EQ(a_frames.Next(&frame), FrameReader::Result::kFrame);  // End: `a` let go
  EXPECT_TRUE(frame->has_end());
  b_thread.join();
  EXPECT_TRUE(b_has_snapshot);
  EXPECT_EQ(budget.held(), 0u);
  EXPECT_LE(budget.peak_held(), budget.capacity());
  EXPECT_EQ(budget.waits(), 1u);
}

}  // namespace
}  // namespace fragscope
