// The agent's event ring (interpose/src/recording/ring_buffer.h) on its own: N producer threads
// push EventRecords while one consumer thread pops them, as hooks and the drain thread do. The ring
// has the agent's default size (FRAGSCOPE_RING_MB=8).
//
// Counters: events_per_s = records through the ring per second of wall time, all producers
// together; drops / drop_fraction = pushes that found the ring full (the agent drops those).
// The consumer only copies records out (the real drain also encodes and writes them, which the
// hook benchmark's drop count covers); this measures the ring's own ceiling.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>

#include <benchmark/benchmark.h>

#include "recording/event_record.h"
#include "recording/ring_buffer.h"

namespace fragscope::bench {
namespace {

using agent::EventRecord;
using agent::MpscRing;

constexpr size_t kRingBytes = size_t{8} << 20;  // the agent's default FRAGSCOPE_RING_MB

struct RingRun {
  MpscRing<EventRecord> ring;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> popped{0};
  std::thread consumer;
};
RingRun* g_run = nullptr;

void ConsumerMain(RingRun* run) {
  EventRecord r;
  uint64_t n = 0;
  uint64_t checksum = 0;
  for (;;) {
    if (run->ring.TryPop(&r)) {
      ++n;
      checksum += r.seq;
      continue;
    }
    if (run->stop.load(std::memory_order_acquire)) break;
  }
  benchmark::DoNotOptimize(checksum);
  run->popped.store(n, std::memory_order_release);
}

void StartRun(const benchmark::State&) {
  g_run = new RingRun;
  if (!g_run->ring.Init(kRingBytes)) std::abort();
  g_run->consumer = std::thread(ConsumerMain, g_run);
}

void StopRun(const benchmark::State&) {
  g_run->stop.store(true, std::memory_order_release);
  g_run->consumer.join();
  delete g_run;
  g_run = nullptr;
}

// Producers flat out, a consumer draining concurrently. A push that finds the ring full is
// what the agent would drop (it never waits); here the producer counts it and retries, so the
// run measures the sustained rate of the pair and how often a producer at that rate meets a full
// ring.
void BM_RingPushPop(benchmark::State& state) {
  EventRecord record;
  std::memset(&record, 0, sizeof(record));
  record.type = agent::RecordType::kAlloc;
  record.size = 4096;
  uint64_t pushed = 0, full = 0;
  for (auto _ : state) {
    ++record.seq;
    record.address += 4096;
    while (!g_run->ring.TryPush(record)) {
      ++full;
      __builtin_ia32_pause();
    }
    ++pushed;
  }
  // Summed over the threads by the library: totals for the whole run.
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(pushed), benchmark::Counter::kIsRate);
  state.counters["drops"] = static_cast<double>(full);
  state.counters["drop_fraction"] =
      benchmark::Counter(static_cast<double>(full) / static_cast<double>(pushed + full) /
                         static_cast<double>(state.threads()));
}

// Setup/Teardown run once around all threads of a run; wall time, since producers and the
// consumer share the cores.
BENCHMARK(BM_RingPushPop)
    ->Setup(StartRun)
    ->Teardown(StopRun)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->UseRealTime();

// The producer's own cost: pushes into a ring with room, no consumer running (it is emptied
// between batches, off the clock). The most a hook thread can put in per second.
void BM_RingPushOnly(benchmark::State& state) {
  MpscRing<EventRecord> ring;
  if (!ring.Init(kRingBytes)) std::abort();
  EventRecord record;
  std::memset(&record, 0, sizeof(record));
  const size_t batch = ring.capacity();
  EventRecord out;
  for (auto _ : state) {
    for (size_t i = 0; i < batch; ++i) {
      ++record.seq;
      if (!ring.TryPush(record)) std::abort();
    }
    state.PauseTiming();
    while (ring.TryPop(&out)) {
    }
    state.ResumeTiming();
  }
  state.counters["events_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * batch), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RingPushOnly)->Unit(benchmark::kMicrosecond);

// The consumer's own cost: pops from a full ring, refilled between batches off the clock. With
// BM_RingPushOnly, the ceiling of each side when the other is not competing for the cache lines.
void BM_RingPopOnly(benchmark::State& state) {
  MpscRing<EventRecord> ring;
  if (!ring.Init(kRingBytes)) std::abort();
  EventRecord record;
  std::memset(&record, 0, sizeof(record));
  const size_t batch = ring.capacity();
  EventRecord out;
  uint64_t checksum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < batch; ++i) {
      ++record.seq;
      if (!ring.TryPush(record)) std::abort();
    }
    state.ResumeTiming();
    while (ring.TryPop(&out)) checksum += out.seq;
  }
  benchmark::DoNotOptimize(checksum);
  state.counters["events_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * batch), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RingPopOnly)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fragscope::bench

BENCHMARK_MAIN();
