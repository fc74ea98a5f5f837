// The agent's live table: insert/erase/update by (class, key), snapshots filtered by seq, and
// concurrent writers with a concurrent scanner.
#include "recording/live_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace fragscope::agent {
namespace {

LiveEntry Alloc(uint64_t address, uint64_t size, uint64_t seq) {
  LiveEntry e{};
  e.cls = LiveClass::kAllocation;
  e.address = address;
  e.size = size;
  e.device = 0;
  e.seq = seq;
  return e;
}

TEST(LiveTableTest, InsertFindEraseByClassAndKey) {
  LiveTable t;
  ASSERT_TRUE(t.Init(256));
  ASSERT_TRUE(t.Insert(Alloc(0x1000, 64, 1)));
  LiveEntry block = Alloc(0x1000, 16, 2);
  block.cls = LiveClass::kBlock;  // same address, other class
  ASSERT_TRUE(t.Insert(block));
  EXPECT_EQ(t.CountLive(), 2u);
  LiveEntry out;
  ASSERT_TRUE(t.Find(LiveClass::kAllocation, 0x1000, &out));
  EXPECT_EQ(out.size, 64u);
  ASSERT_TRUE(t.Find(LiveClass::kBlock, 0x1000, &out));
  EXPECT_EQ(out.size, 16u);
  ASSERT_TRUE(t.Erase(LiveClass::kAllocation, 0x1000, &out));
  EXPECT_EQ(out.seq, 1u);
  EXPECT_FALSE(t.Erase(LiveClass::kAllocation, 0x1000, &out));
  EXPECT_FALSE(t.Find(LiveClass::kAllocation, 0x1000, &out));
  EXPECT_TRUE(t.Find(LiveClass::kBlock, 0x1000, &out));
  EXPECT_EQ(t.CountLive(), 1u);
}

// Signal handlers that allocate, on two threads, each over its own thread's claim: each
// waits for the slot the other's interrupted code holds. Waiting without bound hung a stress
// run forever; a waiter that holds a slot gives up and passes the busy slot over.
TEST(LiveTableTest, HandlersOverClaimsOnTwoThreadsDoNotWaitForEachOther) {
  LiveTable t;
  ASSERT_TRUE(t.Init(256));
  constexpr uint64_t kA = 0x7f0000100000, kB = 0x7f0000900000;
  ASSERT_TRUE(t.Insert(Alloc(kA, 1, 1)));
  ASSERT_TRUE(t.Insert(Alloc(kB, 2, 2)));
  std::atomic<int> holding{0};
  std::atomic<int> finished{0};
  std::atomic<int> erased{0};
  // Update holds its key's slot busy while fn runs, as the interrupted code of a handler does.
  auto handler_over_claim = [&](uint64_t own, uint64_t other) {
    t.Update(LiveClass::kAllocation, own, [&](LiveEntry&) {
      holding.fetch_add(1);
      while (holding.load() < 2) std::this_thread::yield();
      LiveEntry out;
      if (t.Erase(LiveClass::kAllocation, other, &out)) erased.fetch_add(1);
      return true;
    });
    finished.fetch_add(1);
  };
  std::thread a(handler_over_claim, kA, kB);
  std::thread b(handler_over_claim, kB, kA);
  // A watchdog, not a timing assertion: without the bound the threads never finish.
  for (int i = 0; i < 3000 && finished.load() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (finished.load() < 2) {
    ADD_FAILURE() << "the two handlers wait for each other's slot forever";
    std::_Exit(1);  // the threads cannot be joined
  }
  a.join();
  b.join();
  // The first to give up passes the other's slot over and lets its own go; the other, still
  // waiting, may then find its entry. Never both.
  EXPECT_LE(erased.load(), 1);
  EXPECT_EQ(t.CountLive(), 2u - static_cast<size_t>(erased.load()));
  LiveEntry out;
  const uint64_t left = t.Find(LiveClass::kAllocation, kA, &out) ? kA : kB;
  ASSERT_TRUE(t.Find(LiveClass::kAllocation, left, &out));
  // Outside a handler, a release still waits for a busy slot and finds its entry.
  EXPECT_TRUE(t.Erase(LiveClass::kAllocation, left, &out));
}

TEST(LiveTableTest, InsertReplacesAnExistingKey) {
  LiveTable t;
  ASSERT_TRUE(t.Init(64));
  ASSERT_TRUE(t.Insert(Alloc(0x2000, 1, 1)));
  ASSERT_TRUE(t.Insert(Alloc(0x2000, 2, 2)));
  EXPECT_EQ(t.CountLive(), 1u);
  LiveEntry out;
  ASSERT_TRUE(t.Find(LiveClass::kAllocation, 0x2000, &out));
  EXPECT_EQ(out.size, 2u);
}

TEST(LiveTableTest, UpdateChangesInPlace) {
  LiveTable t;
  ASSERT_TRUE(t.Init(64));
  LiveEntry h = Alloc(0x77, 100, 1);
  h.cls = LiveClass::kHandle;
  h.refs = 1;
  ASSERT_TRUE(t.Insert(h));
  EXPECT_TRUE(t.Update(LiveClass::kHandle, 0x77, [](LiveEntry& e) {
    e.maps += 2;
    return true;
  }));
  EXPECT_FALSE(t.Update(LiveClass::kHandle, 0x78, [](LiveEntry&) { return true; }));
  LiveEntry out;
  ASSERT_TRUE(t.Find(LiveClass::kHandle, 0x77, &out));
  EXPECT_EQ(out.maps, 2);
  EXPECT_EQ(out.refs, 1);
}

TEST(LiveTableTest, ForEachSkipsEntriesNewerThanTheSnapshotSeq) {
  LiveTable t;
  ASSERT_TRUE(t.Init(64));
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(t.Insert(Alloc(i * 0x100, i, i)));
  uint64_t total = 0;
  std::atomic<uint64_t> seq{6};
  uint64_t at = 0;
  size_t n = t.ForEachAt(seq, &at, [&](const LiveEntry& e) { total += e.size; });
  EXPECT_EQ(at, 6u);
  EXPECT_EQ(n, 6u);
  EXPECT_EQ(total, 21u);  // 1+..+6
}

// An entry removed by the event at seq R is still live in a snapshot at any S < R.
TEST(LiveTableTest, RemovalCountsFromItsOwnSeq) {
  LiveTable t;
  ASSERT_TRUE(t.Init(64));
  ASSERT_TRUE(t.Insert(Alloc(0x100, 1, 2)));
  ASSERT_TRUE(t.Insert(Alloc(0x200, 2, 3)));
  size_t index = 0;
  LiveEntry removed;
  ASSERT_TRUE(t.Erase(LiveClass::kAllocation, 0x100, &removed, &index));
  t.SetRemovedSeq(index, 5);
  ASSERT_TRUE(t.Erase(LiveClass::kAllocation, 0x200, nullptr));  // no seq: gone for good
  EXPECT_EQ(t.CountLive(), 0u);
  uint64_t at = 0;
  std::atomic<uint64_t> before{4};
  std::vector<uint64_t> seen;
  t.ForEachAt(before, &at, [&](const LiveEntry& e) { seen.push_back(e.address); });
  EXPECT_EQ(seen, std::vector<uint64_t>{0x100});
  std::atomic<uint64_t> after{5};
  seen.clear();
  t.ForEachAt(after, &at, [&](const LiveEntry& e) { seen.push_back(e.address); });
  EXPECT_TRUE(seen.empty());
  std::atomic<uint64_t> too_early{1};
  seen.clear();
  t.ForEachAt(too_early, &at, [&](const LiveEntry& e) { seen.push_back(e.address); });
  EXPECT_TRUE(seen.empty());
}

TEST(LiveTableTest, SetSeqStampsAPendingEntry) {
  LiveTable t;
  ASSERT_TRUE(t.Init(64));
  LiveEntry e = Alloc(0x500, 5, kSeqPending);
  size_t index = 0;
  ASSERT_TRUE(t.Insert(e, &index));
  t.SetSeq(index, 3);
  std::atomic<uint64_t> seq{3};
  uint64_t at = 0;
  size_t n = t.ForEachAt(seq, &at, [](const LiveEntry& x) { EXPECT_EQ(x.seq, 3u); });
  EXPECT_EQ(n, 1u);
}

TEST(LiveTableTest, ClearEmptiesAndFullTableIsCounted) {
  LiveTable t;
  ASSERT_TRUE(t.Init(64));
  size_t inserted = 0;
  for (uint64_t i = 1; i <= 100; ++i) inserted += t.Insert(Alloc(i * 64, 1, i)) ? 1 : 0;
  EXPECT_EQ(inserted, 64u);
  EXPECT_EQ(t.overflows(), 36u);
  EXPECT_EQ(t.live_at_first_overflow(), 64u);  // what a "table full" warning reports
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(t.Erase(LiveClass::kAllocation, i * 64, nullptr));
  const LiveTable::Occupancy o = t.Count();
  EXPECT_EQ(o.live, 54u);
  EXPECT_EQ(o.tombstones, 10u);
  EXPECT_EQ(o.busy, 0u);
  EXPECT_EQ(o.slots, 64u);
  EXPECT_EQ(t.live_at_first_overflow(), 64u);  // the load when it happened, not now
  t.Clear();
  EXPECT_EQ(t.CountLive(), 0u);
  EXPECT_EQ(t.Count().tombstones, 0u);
  EXPECT_EQ(t.live_at_first_overflow(), 0u);
  std::atomic<uint64_t> seq{1000};
  uint64_t at = 0;
  EXPECT_EQ(t.ForEachAt(seq, &at, [](const LiveEntry&) {}), 0u);
  EXPECT_TRUE(t.Insert(Alloc(0x40, 1, 1)));
}

// An address freed and allocated again many times while a snapshot scan runs (a scan takes
// milliseconds; a program reuses its few addresses thousands of times meanwhile). The scan
// needs only the tombstones of entries live at its seq; the others must stay reusable, or every
// reuse takes a slot further down the probe chain until inserts fail.
TEST(LiveTableTest, ReuseDuringAScanDoesNotRunOutOfProbes) {
  LiveTable t;
  ASSERT_TRUE(t.Init(4096));
  ASSERT_TRUE(t.Insert(Alloc(0x1000, 1, 1)));
  ASSERT_TRUE(t.Insert(Alloc(0x2000, 2, 2)));
  std::atomic<uint64_t> seq{2};
  uint64_t at = 0;
  std::vector<uint64_t> seen;
  bool churned = false;
  t.ForEachAt(seq, &at, [&](const LiveEntry& e) {
    seen.push_back(e.address);
    if (churned) return;
    churned = true;
    // Live at the scan's seq, removed during it: its tombstone is what the scan needs.
    size_t index = 0;
    ASSERT_TRUE(t.Erase(LiveClass::kAllocation, 0x1000, nullptr, &index));
    t.SetRemovedSeq(index, 3);
    uint64_t s = 3;
    for (int i = 0; i < 1000; ++i) {
      ASSERT_TRUE(t.Insert(Alloc(0x3000, 3, kSeqPending), &index)) << "reuse " << i;
      t.SetSeq(index, ++s);
      ASSERT_TRUE(t.Erase(LiveClass::kAllocation, 0x3000, nullptr, &index));
      t.SetRemovedSeq(index, ++s);
    }
  });
  EXPECT_EQ(t.overflows(), 0u);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<uint64_t>{0x1000, 0x2000}));
}

// Addresses handed out in ascending order (a bump pointer, consecutive VMM pages) take
// neighbouring slots, so the hook's insert finds its line already in cache (live_table.h).
TEST(LiveTableTest, ConsecutivePagesTakeNeighbouringSlots) {
  LiveTable t;
  ASSERT_TRUE(t.Init(1 << 16));
  const uint64_t window = uint64_t{0x7f12} << 16;  // one 64 KiB window
  size_t first = 0;
  for (uint64_t page = 0; page < 16; ++page) {
    size_t index = 0;
    ASSERT_TRUE(t.Insert(Alloc(window + page * 4096, 4096, page + 1), &index));
    if (page == 0) first = index;
    EXPECT_EQ(index, (first + page) % t.slots()) << "page " << page;
  }
}

// 256-byte allocations side by side put 256 live keys in one 64 KiB window, more than its run
// of slots: they spill over the table instead of lengthening the neighbours' chains, so many
// such windows fit without a lost insert, and each key is found and erased again.
TEST(LiveTableTest, DenseWindowsSpillWithoutOverflow) {
  LiveTable t;
  ASSERT_TRUE(t.Init(1 << 14));
  constexpr uint64_t kKeys = 6000;  // 24 full windows, 37 % of the slots
  const uint64_t base = uint64_t{1} << 40;
  for (uint64_t k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(t.Insert(Alloc(base + k * 256, 256, k + 1))) << "key " << k;
  }
  EXPECT_EQ(t.overflows(), 0u);
  EXPECT_EQ(t.CountLive(), kKeys);
  LiveEntry out;
  for (uint64_t k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(t.Find(LiveClass::kAllocation, base + k * 256, &out)) << "key " << k;
    EXPECT_EQ(out.seq, k + 1);
  }
  for (uint64_t k = 0; k < kKeys; k += 2) {
    ASSERT_TRUE(t.Erase(LiveClass::kAllocation, base + k * 256, nullptr)) << "key " << k;
  }
  EXPECT_EQ(t.CountLive(), kKeys / 2);
  EXPECT_FALSE(t.Find(LiveClass::kAllocation, base, &out));
  ASSERT_TRUE(t.Find(LiveClass::kAllocation, base + 256, &out));
}

// Writers churn disjoint key ranges while a scanner snapshots repeatedly: every entry a scan
// returns is one that was inserted whole (no torn reads), and the final state is exact.
TEST(LiveTableTest, ConcurrentWritersAndScanner) {
  LiveTable t;
  ASSERT_TRUE(t.Init(1 << 14));
  constexpr int kWriters = 6;
  constexpr uint64_t kKeys = 500;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> torn{0};
  std::atomic<uint64_t> seq{~uint64_t{0} - 1};
  std::thread scanner([&] {
    uint64_t at = 0;
    while (!done.load()) {
      t.ForEachAt(seq, &at, [&](const LiveEntry& e) {
        // Each writer stores size == address / 16 and seq == address.
        if (e.size != e.address / 16 || e.seq != e.address) torn.fetch_add(1);
      });
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int round = 0; round < 200; ++round) {
        for (uint64_t k = 0; k < kKeys; ++k) {
          uint64_t address = (static_cast<uint64_t>(w) << 32) + (k + 1) * 256;
          ASSERT_TRUE(t.Insert(Alloc(address, address / 16, address)));
        }
        // The last round keeps every other key; the others free everything (a live key is
        // never inserted again, as in a program).
        for (uint64_t k = 0; k < kKeys; k += (round == 199 ? 2 : 1)) {
          uint64_t address = (static_cast<uint64_t>(w) << 32) + (k + 1) * 256;
          t.Erase(LiveClass::kAllocation, address, nullptr);
        }
      }
    });
  }
  for (std::thread& th : writers) th.join();
  done.store(true);
  scanner.join();
  EXPECT_EQ(torn.load(), 0u);
  // The last round erased every other key: kKeys / 2 remain per writer.
  EXPECT_EQ(t.CountLive(), kWriters * kKeys / 2);
  uint64_t at = 0;
  EXPECT_EQ(t.ForEachAt(seq, &at, [](const LiveEntry&) {}), kWriters * kKeys / 2);
}

// The live table's maximum load (live_table.h, kMaxInsertProbes): no insert is refused below
// 98 % of the slots live. Keys as allocators hand them out, ascending: 2 MiB apart (segments,
// VMM granules), 4 KiB apart (a window's run filled exactly: full runs used to lie side by side
// in clusters longer than the chain's bound, refused at 44 % of 2^18 slots), and 512 B apart
// (more keys than a window's run: most spill; refused at 50 %). Every key inserted is then found
// and an absent one is not, however far down its chain the insert went.
constexpr double kMinLoadAtFirstRefusal = 0.98;

struct FillResult {
  size_t accepted = 0;  // inserts before the first refusal
  double load = 0;      // live / slots at the first refusal
};

// Inserts distinct keys base, base + stride, ... until the first refusal (or slots() + 1 keys).
FillResult FillUntilRefused(LiveTable& t, uint64_t base, uint64_t stride, uint64_t* seq) {
  FillResult r;
  for (uint64_t k = 0; k <= t.slots(); ++k) {
    if (!t.Insert(Alloc(base + k * stride, 1, ++*seq))) break;
    ++r.accepted;
  }
  r.load = static_cast<double>(t.CountLive()) / static_cast<double>(t.slots());
  return r;
}

TEST(LiveTableTest, AcceptsInsertsUpToItsLoadLimit) {
  const uint64_t base = uint64_t{0x7f3a} << 32;
  for (size_t slots : {size_t{4096}, size_t{1} << 18}) {
    for (uint64_t stride : {uint64_t{2} << 20, uint64_t{4096}, uint64_t{512}}) {
      SCOPED_TRACE(testing::Message() << slots << " slots, keys " << stride << " B apart");
      LiveTable t;
      ASSERT_TRUE(t.Init(slots));
      uint64_t seq = 0;
      const FillResult r = FillUntilRefused(t, base, stride, &seq);
      EXPECT_GE(r.load, kMinLoadAtFirstRefusal) << "first refusal after " << r.accepted;
      EXPECT_EQ(t.overflows(), 1u);
      EXPECT_EQ(t.live_at_first_overflow(), t.CountLive());
      LiveEntry out;
      for (uint64_t k = 0; k < r.accepted; ++k) {
        ASSERT_TRUE(t.Find(LiveClass::kAllocation, base + k * stride, &out)) << "key " << k;
        ASSERT_EQ(out.seq, k + 1);
      }
      EXPECT_FALSE(t.Find(LiveClass::kAllocation, base - stride, &out));
      EXPECT_FALSE(t.Erase(LiveClass::kAllocation, base + r.accepted * stride, nullptr));
    }
  }
}

// The same under an allocator's churn: the live set held near 90 % of the slots while addresses
// are freed and handed out again or new (tombstones take the empty slots), then filled with new
// addresses until the first refusal. Nothing may be refused during the churn, and the first
// refusal comes at the same maximum load. (Before, 2^18 slots with 512-byte keys refused at
// 50 % on the way up; 4096 slots refused at 84 %.)
TEST(LiveTableTest, AcceptsInsertsUpToItsLoadLimitUnderChurn) {
  const uint64_t base = uint64_t{0x7f3a} << 32;
  for (size_t slots : {size_t{4096}, size_t{1} << 18}) {
    for (uint64_t stride : {uint64_t{2} << 20, uint64_t{512}}) {
      SCOPED_TRACE(testing::Message() << slots << " slots, keys " << stride << " B apart");
      LiveTable t;
      ASSERT_TRUE(t.Init(slots));
      std::mt19937_64 random(slots ^ stride);  // the same sequence everywhere
      std::vector<uint64_t> live, freed;
      uint64_t next = base, seq = 0;
      const size_t target = t.slots() * 9 / 10;
      for (size_t op = 0; op < 3 * t.slots(); ++op) {
        if (live.size() < target) {
          uint64_t address = next;
          if (!freed.empty() && random() % 2 == 0) {  // a freed address handed out again
            const size_t k = random() % freed.size();
            address = freed[k];
            freed[k] = freed.back();
            freed.pop_back();
          } else {
            next += stride;
          }
          ASSERT_TRUE(t.Insert(Alloc(address, 1, ++seq)))
              << "refused during churn at " << live.size() << " live, operation " << op;
          live.push_back(address);
        } else {
          const size_t k = random() % live.size();
          ASSERT_TRUE(t.Erase(LiveClass::kAllocation, live[k], nullptr));
          freed.push_back(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      EXPECT_EQ(t.overflows(), 0u);
      EXPECT_EQ(t.CountLive(), live.size());
      EXPECT_GT(t.Count().tombstones, 0u);
      const FillResult r = FillUntilRefused(t, next, stride, &seq);
      EXPECT_GE(r.load, kMinLoadAtFirstRefusal) << "first refusal after " << r.accepted;
      LiveEntry out;
      for (uint64_t address : live) {
        ASSERT_TRUE(t.Find(LiveClass::kAllocation, address, &out)) << address;
      }
      for (size_t k = 0; k < freed.size(); k += 97) {
        EXPECT_FALSE(t.Find(LiveClass::kAllocation, freed[k], &out)) << freed[k];
      }
    }
  }
}

LiveEntry Deferred(uint64_t address, uint64_t seq) {
  LiveEntry e = Alloc(address, 4096, seq);
  e.device = kDeviceDeferred;
  return e;
}

TEST(LiveTableTest, SetResolvedAndSetErasedResolvedFillADeferredEntry) {
  LiveTable t;
  ASSERT_TRUE(t.Init(256));
  size_t index = 0;
  LiveEntry pooled = Deferred(0x10000, 1);
  pooled.pool = kPoolDeferred;
  ASSERT_TRUE(t.Insert(pooled, &index));
  t.SetResolved(index, 3, 0xabc0);
  LiveEntry e;
  ASSERT_TRUE(t.Find(LiveClass::kAllocation, 0x10000, &e));
  EXPECT_EQ(e.device, 3);
  EXPECT_EQ(e.pool, 0xabc0u);
  EXPECT_EQ(e.size, 4096u);

  // Released after a snapshot point: the tombstone's fields are what the remover set.
  ASSERT_TRUE(t.Insert(Deferred(0x20000, 2)));
  ASSERT_TRUE(t.Erase(LiveClass::kAllocation, 0x20000, nullptr, &index));
  t.SetErasedResolved(index, 5, 0);
  t.SetRemovedSeq(index, 10);
  std::atomic<uint64_t> seq{9};
  uint64_t at = 0;
  std::map<uint64_t, std::pair<int, uint64_t>> fields;
  t.ForEachAt(seq, &at, [&](const LiveEntry& x) { fields[x.address] = {x.device, x.pool}; });
  EXPECT_EQ(fields, (std::map<uint64_t, std::pair<int, uint64_t>>{{0x10000, {3, 0xabc0}},
                                                                  {0x20000, {5, 0}}}));
}

TEST(LiveTableTest, ResolveDeferredFillsOnlyDeferredLiveEntries) {
  LiveTable t;
  ASSERT_TRUE(t.Init(256));
  ASSERT_TRUE(t.Insert(Deferred(uint64_t{1} << 20, 1)));
  ASSERT_TRUE(t.Insert(Deferred(uint64_t{2} << 20, 2)));
  ASSERT_TRUE(t.Insert(Alloc(uint64_t{3} << 20, 64, 3)));  // device 0, read at the call
  ASSERT_TRUE(t.Insert(Deferred(uint64_t{4} << 20, 4)));
  ASSERT_TRUE(t.Erase(LiveClass::kAllocation, uint64_t{4} << 20, nullptr));
  LiveEntry pool_only = Alloc(uint64_t{5} << 20, 64, 5);  // device read, pool deferred
  pool_only.pool = kPoolDeferred;
  ASSERT_TRUE(t.Insert(pool_only));
  int asked = 0;
  size_t set = t.ResolveDeferred([&](LiveEntry& e) {
    ++asked;
    if (e.device == kDeviceDeferred) e.device = static_cast<int32_t>(e.address >> 20);
    if (e.pool == kPoolDeferred) e.pool = 0x900d;
  });
  EXPECT_EQ(set, 3u);
  EXPECT_EQ(asked, 3);
  for (uint64_t mib : {1, 2, 3, 5}) {
    LiveEntry e;
    ASSERT_TRUE(t.Find(LiveClass::kAllocation, mib << 20, &e));
    EXPECT_EQ(e.device, mib >= 3 ? 0 : static_cast<int>(mib)) << mib;
    EXPECT_EQ(e.pool, mib == 5 ? 0x900du : 0u) << mib;
  }
  EXPECT_EQ(t.ResolveDeferred([](LiveEntry& e) { e.device = 7; }), 0u);  // none left
}

// A program frees an address and gets it again on another device while a wake reads the
// devices of dormant allocations. A device read for the old allocation must never land on
// the new one: here "the driver" (truth) moves each address to another device only after the
// entry is erased, as a real release erases before the real call.
TEST(LiveTableTest, ResolvedDeviceIsTheAllocationsWhileAddressesMoveBetweenDevices) {
  LiveTable t;
  ASSERT_TRUE(t.Init(1 << 12));
  constexpr int kWriters = 3;
  constexpr uint64_t kKeys = 64;
  std::vector<std::atomic<int32_t>> truth(kWriters * kKeys);
  for (auto& d : truth) d.store(0);
  auto address_of = [](size_t i) { return (uint64_t{1} << 32) + (i + 1) * 4096; };
  std::atomic<bool> done{false};
  std::atomic<uint64_t> wrong{0}, resolved{0};
  std::thread resolver([&] {
    while (!done.load()) {
      resolved += t.ResolveDeferred([&](LiveEntry& e) {
        const size_t i = (e.address - (uint64_t{1} << 32)) / 4096 - 1;
        const int32_t device = truth[i].load();
        // A driver call takes a while to return: the window in which the address may move.
        for (int spin = 0; spin < 200; ++spin) std::atomic_signal_fence(std::memory_order_seq_cst);
        std::this_thread::yield();
        e.device = device;
      });
    }
  });
  // At least 3000 rounds, and on until the resolver has run at all: on a loaded 2-core machine
  // the writers could otherwise finish before it was ever scheduled (bounded at 20 s).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto more_rounds = [&](int round) {
    return round < 3000 || (resolved.load() == 0 && std::chrono::steady_clock::now() < give_up);
  };
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int round = 0; more_rounds(round); ++round) {
        for (uint64_t k = 0; k < kKeys; ++k) {
          const size_t i = static_cast<size_t>(w) * kKeys + k;
          ASSERT_TRUE(t.Insert(Deferred(address_of(i), 1)));
        }
        for (uint64_t k = 0; k < kKeys; ++k) {
          const size_t i = static_cast<size_t>(w) * kKeys + k;
          const int32_t device = truth[i].load();
          LiveEntry out;
          ASSERT_TRUE(t.Erase(LiveClass::kAllocation, address_of(i), &out));
          if (out.device != kDeviceDeferred && out.device != device) wrong.fetch_add(1);
          truth[i].store((device + 1) % 4);  // the driver's next allocation there
        }
      }
    });
  }
  for (std::thread& th : writers) th.join();
  done.store(true);
  resolver.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(resolved.load(), 0u);  // the race was run, not avoided
}

}  // namespace
}  // namespace fragscope::agent
