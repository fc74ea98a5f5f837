// The dormant agent's per-thread allocation logs: appends, cancels by a release on the same
// thread, folds into the live table (periodic, forced by a release that missed the table, and
// a wake's Close), logs of exited threads given back, and exactness under threads that free
// each other's allocations while folds and wakes run. Each test runs with membarrier (where the
// kernel has it) and with the locked-exchange protocol.
#include "recording/allocation_log.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace fragscope::agent {
namespace {

LoggedAllocation Logged(uint64_t address, uint64_t size, int32_t device = 0) {
  return LoggedAllocation::Make(address, size, /*stream=*/0x5000 + size, /*pool=*/kPoolDeferred,
                                Api::k_cudaMalloc, MemoryKind::kDevice, device);
}

// Runs `fn` on a thread of its own: a log belongs to a thread, and each test wants new ones.
template <typename Fn>
void OnNewThread(Fn&& fn) {
  std::thread t(std::forward<Fn>(fn));
  t.join();
}

// What a release does (recorder.cc PendingRelease): the newest entries of its own log, else
// the table, else all of its own log, else the other threads' logs, else (a fold may have
// taken it meanwhile) the table once no fold runs.
bool Release(AllocationLogs& logs, LiveTable& table, uint64_t address, uint64_t* size) {
  LoggedAllocation out;
  if (logs.TryCancel(address, &out)) {
    *size = out.size;
    return true;
  }
  LiveEntry found;
  if (table.Erase(LiveClass::kAllocation, address, &found)) {
    *size = found.size;
    return true;
  }
  if (logs.TryCancelAnywhere(address, &out) || logs.TryCancelElsewhere(address, &out)) {
    *size = out.size;
    return true;
  }
  logs.WaitForFolds();
  LiveEntry e;
  if (table.Erase(LiveClass::kAllocation, address, &e)) {
    *size = e.size;
    return true;
  }
  return false;
}

// What an allocation does (recorder.cc RecordAlloc): the log, else the table.
void Allocate(AllocationLogs& logs, LiveTable& table, uint64_t address, uint64_t size) {
  if (!logs.TryAppend(Logged(address, size))) {
    LiveEntry e = Logged(address, size).ToLiveEntry();
    ASSERT_TRUE(table.Insert(e));
  }
}

std::map<uint64_t, uint64_t> TableContents(LiveTable& table) {
  std::map<uint64_t, uint64_t> out;
  std::atomic<uint64_t> seq{~uint64_t{0} - 1};
  uint64_t at = 0;
  table.ForEachAt(seq, &at, [&](const LiveEntry& e) { out[e.address] = e.size; });
  return out;
}

class AllocationLogTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(table_.Init(1 << 14));
    ASSERT_TRUE(logs_.Init(/*open=*/true, /*allow_membarrier=*/GetParam()));
    if (!GetParam()) {
      EXPECT_FALSE(logs_.uses_membarrier());
    }
  }
  LiveTable table_;
  AllocationLogs logs_;
};

TEST_P(AllocationLogTest, AppendsStayInTheLogUntilAFoldPutsThemInTheTable) {
  OnNewThread([&] {
    ASSERT_TRUE(logs_.TryAppend(Logged(0x10000, 100, 1)));
    ASSERT_TRUE(logs_.TryAppend(Logged(0x20000, 200)));
    ASSERT_TRUE(logs_.TryAppend(Logged(0x30000, 300)));
  });
  EXPECT_EQ(logs_.CountUnfolded(), 3u);
  EXPECT_TRUE(logs_.HasUnfolded());
  EXPECT_EQ(table_.CountLive(), 0u);
  EXPECT_EQ(logs_.FoldAll(table_), 3u);
  EXPECT_EQ(logs_.CountUnfolded(), 0u);
  EXPECT_EQ(table_.CountLive(), 3u);
  LiveEntry e;
  ASSERT_TRUE(table_.Find(LiveClass::kAllocation, 0x10000, &e));
  EXPECT_EQ(e.size, 100u);
  EXPECT_EQ(e.device, 1);
  EXPECT_EQ(e.stream, 0x5000u + 100);
  EXPECT_EQ(e.pool, kPoolDeferred);  // the wake resolves it, as for a table entry
  EXPECT_EQ(e.api, Api::k_cudaMalloc);
  EXPECT_EQ(e.kind, MemoryKind::kDevice);
  EXPECT_EQ(e.seq, 0u);  // before any snapshot
  // The exited thread's log, folded, was given back.
  EXPECT_EQ(logs_.LogsInUse(), 0);
}

TEST_P(AllocationLogTest, AReleaseCancelsItsOwnRecentAllocations) {
  OnNewThread([&] {
    ASSERT_TRUE(logs_.TryAppend(Logged(0x10000, 100)));
    ASSERT_TRUE(logs_.TryAppend(Logged(0x20000, 200)));
    ASSERT_TRUE(logs_.TryAppend(Logged(0x30000, 300)));
    LoggedAllocation out;
    ASSERT_TRUE(logs_.TryCancel(0x20000, &out));  // an older one: marked
    EXPECT_EQ(out.size, 200u);
    ASSERT_TRUE(logs_.TryCancel(0x30000, &out));  // the newest: dropped
    EXPECT_EQ(out.size, 300u);
    EXPECT_FALSE(logs_.TryCancel(0x30000, &out));  // once only
    EXPECT_FALSE(logs_.TryCancel(0x40000, &out));  // never logged
    EXPECT_EQ(logs_.CountUnfolded(), 1u);
  });
  logs_.FoldAll(table_);
  EXPECT_EQ(TableContents(table_), (std::map<uint64_t, uint64_t>{{0x10000, 100}}));
}

TEST_P(AllocationLogTest, AReleaseFindsItsAllocationFurtherBackOrInAnotherThreadsLog) {
  constexpr int kOld = AllocationLogs::kCancelWindow + 4;
  std::atomic<bool> appended{false}, done{false};
  std::thread owner([&] {
    for (int i = 0; i < kOld; ++i) {
      ASSERT_TRUE(logs_.TryAppend(Logged(0x100000 + 0x1000 * i, 1000 + i)));
    }
    uint64_t size = 0;
    // Too old for the cancel window, not in the table: found further back in the log, without
    // a fold.
    LoggedAllocation out;
    EXPECT_FALSE(logs_.TryCancel(0x100000, &out));
    EXPECT_TRUE(Release(logs_, table_, 0x100000, &size));
    EXPECT_EQ(size, 1000u);
    EXPECT_EQ(logs_.CountUnfolded(), static_cast<size_t>(kOld - 1));
    EXPECT_EQ(table_.CountLive(), 0u);
    appended = true;
    while (!done) std::this_thread::yield();  // the log stays this thread's meanwhile
  });
  while (!appended) std::this_thread::yield();
  OnNewThread([&] {
    // Another thread's allocation: cancelled in that thread's log, nothing folded.
    uint64_t size = 0;
    EXPECT_TRUE(Release(logs_, table_, 0x101000, &size));
    EXPECT_EQ(size, 1001u);
    EXPECT_EQ(logs_.CountUnfolded(), static_cast<size_t>(kOld - 2));
    EXPECT_EQ(table_.CountLive(), 0u);
    uint64_t missing = 0;
    EXPECT_FALSE(Release(logs_, table_, 0xdead000, &missing));
  });
  done = true;
  owner.join();
  EXPECT_EQ(table_.CountLive() + logs_.CountUnfolded(), static_cast<size_t>(kOld - 2));
}

TEST_P(AllocationLogTest, AClosedGateSendsEveryoneToTheTable) {
  OnNewThread([&] { ASSERT_TRUE(logs_.TryAppend(Logged(0x10000, 100))); });
  logs_.Close(table_);  // a wake
  EXPECT_EQ(table_.CountLive(), 1u);
  EXPECT_FALSE(logs_.HasUnfolded());
  OnNewThread([&] {
    EXPECT_FALSE(logs_.TryAppend(Logged(0x20000, 200)));
    LoggedAllocation out;
    EXPECT_FALSE(logs_.TryCancel(0x10000, &out));
  });
  EXPECT_EQ(logs_.LogsInUse(), 0);  // a closed gate hands out no logs
  logs_.Open();                     // back to dormant
  OnNewThread([&] {
    EXPECT_TRUE(logs_.TryAppend(Logged(0x20000, 200)));
    LoggedAllocation out;
    EXPECT_TRUE(logs_.TryCancel(0x20000, &out));
  });
}

TEST_P(AllocationLogTest, AFullLogRefusesUntilFolded) {
  std::atomic<int> step{0};
  std::thread owner([&] {
    for (uint64_t i = 0; i < AllocationLogs::kCapacity; ++i) {
      ASSERT_TRUE(logs_.TryAppend(Logged(0x1000000 + 0x1000 * i, 1)));
    }
    EXPECT_FALSE(logs_.TryAppend(Logged(0x9000000, 1)));
    step = 1;
    while (step != 2) std::this_thread::yield();
    EXPECT_TRUE(logs_.TryAppend(Logged(0x9000000, 1)));
  });
  while (step != 1) std::this_thread::yield();
  EXPECT_EQ(logs_.FoldAll(table_), AllocationLogs::kCapacity);
  step = 2;
  owner.join();
  EXPECT_EQ(logs_.CountUnfolded(), 1u);
}

TEST_P(AllocationLogTest, LogsOfExitedThreadsAreFoldedAndReused) {
  for (int i = 0; i < AllocationLogs::kMaxLogs; ++i) {
    OnNewThread([&, i] { ASSERT_TRUE(logs_.TryAppend(Logged(0x1000000 + 0x1000 * i, i + 1))); });
  }
  EXPECT_EQ(logs_.LogsInUse(), AllocationLogs::kMaxLogs);
  // All taken, none folded yet: a new thread has no log and goes to the table.
  OnNewThread([&] { EXPECT_FALSE(logs_.TryAppend(Logged(0x9000000, 1))); });
  EXPECT_EQ(logs_.FoldAll(table_), static_cast<size_t>(AllocationLogs::kMaxLogs));
  EXPECT_EQ(logs_.LogsInUse(), 0);
  OnNewThread([&] { EXPECT_TRUE(logs_.TryAppend(Logged(0x9000000, 1))); });
  EXPECT_EQ(table_.CountLive(), static_cast<size_t>(AllocationLogs::kMaxLogs));
}

// A fork child (agent.cc ChildAfterFork) starts with no logs: the parent's threads, their
// entries and a fold a parent thread had in progress are not the child's. The parent's logs
// are untouched.
TEST_P(AllocationLogTest, AForkChildStartsWithEmptyLogs) {
  std::atomic<int> step{0};
  std::thread owner([&] {
    ASSERT_TRUE(logs_.TryAppend(Logged(0x10000, 100)));
    step = 1;
    while (step != 2) std::this_thread::yield();
  });
  while (step != 1) std::this_thread::yield();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Plain checks and _exit: no gtest machinery in the child.
    logs_.ResetAfterFork(/*open=*/true);
    int failed = 0;
    if (logs_.CountUnfolded() != 0 || logs_.LogsInUse() != 0) failed |= 1;
    if (!logs_.TryAppend(Logged(0x20000, 200))) failed |= 2;
    if (logs_.FoldAll(table_) != 1) failed |= 4;
    _exit(failed);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: logs kept, 2: no append, 4: fold";
  step = 2;
  owner.join();
  EXPECT_EQ(logs_.CountUnfolded(), 1u);
  EXPECT_EQ(logs_.FoldAll(table_), 1u);
}

// Threads allocate from a shared pool of addresses (so the same address moves between threads),
// free their own and each other's, while a folder folds, closes (a wake) and opens again. At the
// end, the table plus the logs hold exactly what the threads hold.
TEST_P(AllocationLogTest, ThreadsFreeingEachOthersAllocationsStayExact) {
  constexpr int kThreads = 4;
  constexpr int kOps = 20000;
  std::mutex mu;
  std::vector<uint64_t> free_addresses;
  std::map<uint64_t, uint64_t> live;  // the truth, under mu
  for (uint64_t i = 0; i < 512; ++i) free_addresses.push_back(0x7f0000000000 + (i << 12));
  std::atomic<bool> stop{false};
  std::atomic<int> lost{0};
  std::thread folder([&] {
    for (int round = 0; !stop; ++round) {
      if (round % 7 == 3) {
        logs_.Close(table_);
        std::this_thread::yield();
        logs_.Open();
      } else {
        logs_.FoldAll(table_);
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int op = 0; op < kOps; ++op) {
        const bool allocate = rng() % 2 == 0;
        uint64_t address = 0, size = 0;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (allocate && !free_addresses.empty()) {
            const size_t at = rng() % free_addresses.size();
            address = free_addresses[at];
            free_addresses[at] = free_addresses.back();
            free_addresses.pop_back();
            size = 1 + rng() % 100000;
          } else if (!allocate && !live.empty()) {
            auto it = live.begin();
            std::advance(it, static_cast<long>(rng() % std::min<size_t>(live.size(), 8)));
            address = it->first;
            size = it->second;
            live.erase(it);  // the program stops using it before the release
          }
        }
        if (address == 0) continue;
        if (allocate) {
          // The driver hands it out, then the hook records it, then the program may share it.
          Allocate(logs_, table_, address, size);
          std::lock_guard<std::mutex> lock(mu);
          live[address] = size;
        } else {
          uint64_t found = 0;
          if (!Release(logs_, table_, address, &found) || found != size) ++lost;
          std::lock_guard<std::mutex> lock(mu);
          free_addresses.push_back(address);  // the driver may hand it out again
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  stop = true;
  folder.join();
  EXPECT_EQ(lost.load(), 0);
  logs_.Close(table_);
  EXPECT_EQ(TableContents(table_), live);
  EXPECT_EQ(table_.overflows(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Protocols, AllocationLogTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Membarrier" : "LockedExchange");
                         });

}  // namespace
}  // namespace fragscope::agent
