// The MPSC ring under concurrent producers: nothing lost or duplicated, order kept per producer,
// a full ring refuses pushes so every record is either delivered or counted as dropped.
#include "recording/ring_buffer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "recording/event_record.h"

namespace fragscope::agent {
namespace {

EventRecord Tagged(uint32_t producer, uint64_t n) {
  EventRecord r{};
  r.tid = producer;
  r.seq = n;
  return r;
}

TEST(MpscRingTest, CapacityIsAPowerOfTwoThatFits) {
  MpscRing<EventRecord> ring;
  ASSERT_TRUE(ring.Init(1 << 20));
  EXPECT_EQ(ring.capacity() & (ring.capacity() - 1), 0u);
  EXPECT_LE(ring.bytes(), size_t{1} << 20);
  EXPECT_GT(ring.bytes(), size_t{1} << 19);
  EXPECT_EQ(sizeof(MpscRing<EventRecord>::Slot), 128u);
}

TEST(MpscRingTest, FifoAndFullAndEmpty) {
  MpscRing<EventRecord> ring;
  ASSERT_TRUE(ring.Init(8 * 128));  // 8 slots
  ASSERT_EQ(ring.capacity(), 8u);
  EventRecord out;
  EXPECT_FALSE(ring.TryPop(&out));
  for (uint64_t i = 0; i < 8; ++i) {
    uint64_t position = 99;
    ASSERT_TRUE(ring.TryPush(Tagged(0, i), &position));
    EXPECT_EQ(position, i);
  }
  EXPECT_FALSE(ring.TryPush(Tagged(0, 8)));  // full
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(ring.TryPop(&out));
    EXPECT_EQ(out.seq, i);
  }
  EXPECT_FALSE(ring.TryPop(&out));
  EXPECT_EQ(ring.consumed(), 8u);
  // Wraps around.
  for (uint64_t lap = 0; lap < 5; ++lap) {
    for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(ring.TryPush(Tagged(0, i)));
    for (uint64_t i = 0; i < 6; ++i) {
      ASSERT_TRUE(ring.TryPop(&out));
      EXPECT_EQ(out.seq, i);
    }
  }
}

TEST(MpscRingTest, ResetEmpties) {
  MpscRing<EventRecord> ring;
  ASSERT_TRUE(ring.Init(16 * 128));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ring.TryPush(Tagged(0, i)));
  ring.Reset();
  EventRecord out;
  EXPECT_FALSE(ring.TryPop(&out));
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(ring.TryPush(Tagged(0, i)));
  EXPECT_FALSE(ring.TryPush(Tagged(0, 16)));
}

// 8 producers push 200k records each into a small ring while one consumer drains it. Every
// record is delivered exactly once or refused (and counted), and each producer's records arrive
// in the order pushed.
TEST(MpscRingTest, ManyProducersDeliverOrDropEverything) {
  constexpr uint32_t kProducers = 8;
  constexpr uint64_t kPerProducer = 200000;
  MpscRing<EventRecord> ring;
  ASSERT_TRUE(ring.Init(1024 * 128));
  std::atomic<uint64_t> dropped{0};
  std::atomic<uint32_t> running{kProducers};
  std::vector<std::vector<uint64_t>> received(kProducers);
  std::thread consumer([&] {
    EventRecord r;
    for (;;) {
      if (ring.TryPop(&r)) {
        received[r.tid].push_back(r.seq);
      } else if (running.load() == 0 && ring.size_approx() == 0) {
        if (!ring.TryPop(&r)) break;
        received[r.tid].push_back(r.seq);
      }
    }
  });
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        if (!ring.TryPush(Tagged(p, i))) dropped.fetch_add(1);
      }
      running.fetch_sub(1);
    });
  }
  for (std::thread& t : producers) t.join();
  consumer.join();
  uint64_t delivered = 0;
  for (uint32_t p = 0; p < kProducers; ++p) {
    delivered += received[p].size();
    for (size_t i = 1; i < received[p].size(); ++i) {
      ASSERT_LT(received[p][i - 1], received[p][i]) << "producer " << p;
    }
  }
  EXPECT_EQ(delivered + dropped.load(), kProducers * kPerProducer);
  EXPECT_EQ(ring.consumed(), delivered);
}

}  // namespace
}  // namespace fragscope::agent
