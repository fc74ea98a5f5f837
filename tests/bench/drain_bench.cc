// The drain thread's cost per event, the two encodings side by side: pop a record from the
// agent's ring, encode it, and write the buffer into a Unix socket whenever it fills (a thread
// reads and drops it, as a collector would read it), as the drain does
// (interpose/src/shipping/drain.cc), either as a frame of its own per event (EncodeRecord, what
// agents before format 2.0 sent) or into packed runs (PackedEventRun, what the agent sends now).
// Everything is the agent's own code; what the drain does besides (stacks already sent, the device
// already described) costs nothing per event in steady state.
//
// Workloads: "pairs" (one thread's cudaMalloc/cudaFree of one size at one site, the hook
// benchmark's) and "varied" (random sizes, sites, addresses and messages, as the collector
// benchmark's trace). Counters: ns_per_event (CPU time of the draining thread: popping,
// encoding and the kernel's copy into the socket), bytes_per_event.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "recording/event_record.h"
#include "recording/ring_buffer.h"
#include "shipping/frame_encoder.h"
#include "shipping/packed_event_run.h"

namespace fragscope::bench {
namespace {

using agent::Api;
using agent::EventRecord;
using agent::RecordType;
using agent::WireWriter;

constexpr size_t kEvents = 1 << 16;       // records per refill of the ring
constexpr size_t kBufferBytes = 1 << 20;  // the drain's write buffer (kWriteBufferBytes)

std::vector<EventRecord> Records(bool varied) {
  std::mt19937_64 rng(42);
  std::vector<EventRecord> out(kEvents);
  uint64_t time = 1'000'000'000;
  for (size_t i = 0; i < kEvents; ++i) {
    EventRecord& r = out[i];
    std::memset(&r, 0, sizeof(r));
    r.seq = 1000 + i;
    r.tid = 4242;
    if (!varied) {
      const bool alloc = i % 2 == 0;
      r.type = alloc ? RecordType::kAlloc : RecordType::kFree;
      r.api = alloc ? Api::k_cudaMalloc : Api::k_cudaFree;
      time += 140;
      r.stack_id = alloc ? 17 : 18;
      r.address = 0x7f3a00000000;
      r.size = 4096;
      r.kind = alloc ? agent::MemoryKind::kDevice : agent::MemoryKind::kUnspecified;
    } else {
      const uint32_t pick = rng() % 10;
      time += 50 + rng() % 400;
      r.stack_id = 1 + rng() % 256;
      r.size = 512 * (1 + rng() % 2048);
      r.address = 0x7f0000000000 + (rng() % 16384) * 0x100000;
      const bool alloc = rng() % 2 == 0;
      if (pick < 7) {
        r.type = RecordType::kBlock;
        r.api = alloc ? Api::k_fragscope_block_alloc : Api::k_fragscope_block_free;
        r.op = alloc ? 1 : 2;
        r.pool = 1;  // the allocator id
      } else {
        r.type = alloc ? RecordType::kAlloc : RecordType::kFree;
        r.api = pick < 9 ? (alloc ? Api::k_cudaMalloc : Api::k_cudaFree)
                         : (alloc ? Api::k_cudaMallocAsync : Api::k_cudaFreeAsync);
        r.kind = alloc ? (pick < 9 ? agent::MemoryKind::kDevice : agent::MemoryKind::kPool)
                       : agent::MemoryKind::kUnspecified;
        if (pick == 9) r.pool = 0xabc000;
      }
      if (!alloc) r.stack_id = 0;
    }
    r.time_ns = time;
  }
  return out;
}

enum class Encoding { kNone, kFrames, kPacked };

void Drain(benchmark::State& state, bool varied, Encoding encoding) {
  const std::vector<EventRecord> records = Records(varied);
  agent::MpscRing<EventRecord> ring;
  if (!ring.Init(size_t{16} << 20)) std::abort();
  std::vector<uint8_t> buffer(kBufferBytes);
  WireWriter w(buffer.data(), buffer.size());
  agent::PackedEventRun run;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  std::thread collector([fd = sv[1]] {
    std::vector<char> sink(1 << 20);
    while (::read(fd, sink.data(), sink.size()) > 0) {
    }
  });
  uint64_t bytes = 0, events = 0;
  auto flush = [&] {
    run.Close(w);
    bytes += w.size();
    for (size_t done = 0; done < w.size();) {
      const ssize_t n = ::write(sv[0], w.data() + done, w.size() - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    w.Clear();
  };
  for (auto _ : state) {
    state.PauseTiming();
    for (const EventRecord& r : records) ring.TryPush(r);
    state.ResumeTiming();
    EventRecord r;
    while (ring.TryPop(&r)) {
      if (encoding == Encoding::kPacked) {
        if (!agent::AddPacked(run, w, r)) {
          flush();
          agent::AddPacked(run, w, r);
        }
      } else if (encoding == Encoding::kFrames) {
        if (!agent::EncodeRecord(w, r)) {
          flush();
          agent::EncodeRecord(w, r);
        }
      } else {
        benchmark::DoNotOptimize(r.seq);
      }
      ++events;
    }
    flush();
  }
  ::close(sv[0]);
  collector.join();
  ::close(sv[1]);
  state.counters["ns_per_event"] =
      benchmark::Counter(static_cast<double>(events) * 1e-9,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["bytes_per_event"] =
      events > 0 ? static_cast<double>(bytes) / static_cast<double>(events) : 0;
  state.SetItemsProcessed(static_cast<int64_t>(events));
}

// The floor under both: popping alone.
BENCHMARK_CAPTURE(Drain, pop_only, false, Encoding::kNone)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Drain, pairs_frames, false, Encoding::kFrames)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Drain, pairs_packed, false, Encoding::kPacked)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Drain, varied_frames, true, Encoding::kFrames)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Drain, varied_packed, true, Encoding::kPacked)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fragscope::bench

BENCHMARK_MAIN();
