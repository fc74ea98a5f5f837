// A varied workload for the trace-size and collector figures: the mix the collector benchmark's
// synthetic trace has (collector_bench.cc), made by real calls through the agent.
//
//   varied_workload N [THREADS]   # about N events in all, split over THREADS threads (default 1)
//
// Per event, at random: 70 % a sub-allocator block allocated or freed (fragscope_block_* in 64
// cudaMalloc'd 256 MiB segments, 256 slots of 1 MiB each, sizes 512 B to 1 MiB), 20 % a
// cudaMalloc or cudaFree of 2 to 16 MiB (1024 slots), 10 % a cudaMallocAsync or cudaFreeAsync
// of 512 B to 1 MiB (1024 slots). Each call is made 0 to 15 frames deeper than the last, so
// allocations come from 16 different call stacks. Every thread keeps its own slots.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "call_depth.h"
#include "fragscope/annotate.h"

namespace {

constexpr int kSegments = 64;
constexpr size_t kSegmentBytes = size_t{256} << 20;
constexpr int kBlocksPerSegment = 256;
constexpr int kCudaSlots = 1024;

bool Run(long events, unsigned seed) {
  std::mt19937_64 rng(seed);
  bool ok = true;
  std::vector<char*> segments(kSegments);
  for (char*& s : segments) {
    void* p = nullptr;
    ok &= cudaMalloc(&p, kSegmentBytes) == cudaSuccess;
    s = static_cast<char*>(p);
  }
  if (!ok) return false;
  std::vector<bool> block_live(kSegments * kBlocksPerSegment);
  std::vector<void*> device(kCudaSlots), pool(kCudaSlots);
  for (long i = 0; i < events; ++i) {
    const uint64_t r = rng();
    const int depth = static_cast<int>(r % 16);
    auto call = [&] {
      const uint32_t pick = static_cast<uint32_t>((r >> 8) % 10);
      if (pick < 7) {
        const size_t slot = (r >> 16) % block_live.size();
        char* at = segments[slot / kBlocksPerSegment] + (slot % kBlocksPerSegment) * (1 << 20);
        if (block_live[slot]) {
          fragscope_annotate_block_free(at, 0, nullptr);
        } else {
          fragscope_annotate_block_alloc(at, 512 * (1 + (r >> 32) % 2048), 0, nullptr, 0);
        }
        block_live[slot] = !block_live[slot];
      } else {
        std::vector<void*>& slots = pick < 9 ? device : pool;
        void*& p = slots[(r >> 16) % kCudaSlots];
        if (p != nullptr) {
          ok &= (pick < 9 ? cudaFree(p) : cudaFreeAsync(p, nullptr)) == cudaSuccess;
          p = nullptr;
        } else if (pick < 9) {
          ok &= cudaMalloc(&p, (size_t{2} << 20) * (1 + (r >> 32) % 8)) == cudaSuccess;
        } else {
          ok &= cudaMallocAsync(&p, 512 * (1 + (r >> 32) % 2048), nullptr) == cudaSuccess;
        }
      }
    };
    fragscope::bench::AtDepth(depth, call);
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s N [THREADS]\n", argv[0]);
    return 2;
  }
  const long n = std::atol(argv[1]);
  const int threads = argc == 3 ? std::atoi(argv[2]) : 1;
  if (n <= 0 || threads <= 0) {
    std::fprintf(stderr, "varied_workload: N and THREADS must be positive\n");
    return 2;
  }
  std::vector<std::thread> workers;
  std::vector<char> ok(threads, 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] { ok[t] = Run(n / threads, 42 + t); });
  }
  for (std::thread& w : workers) w.join();
  for (char o : ok) {
    if (!o) {
      std::fprintf(stderr, "varied_workload: a CUDA call failed\n");
      return 1;
    }
  }
  return 0;
}
