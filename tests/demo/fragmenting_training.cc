// The bundled demo: a training-like loop over a PyTorch-style caching allocator that runs out
// of memory twice, for two different reasons.
//
//  1. Fragmentation. Long-sequence steps fill the cache with 100 MiB segments. Then short
//     sequences keep a 60 MiB KV-cache block alive in every one of them, so each segment holds
//     a 40 MiB hole. A logits tensor larger than the device's free memory fails although the
//     holes plus that free memory add up to more than it needs: the bytes exist, not in one
//     piece.
//  2. Capacity. The job "scales up" and asks for a tensor bigger than the whole GPU can hold
//     next to the weights; no packing could have saved it.
//
// Sizes are derived from cudaMemGetInfo at start, so the story holds for any FAKECUDA_CAPACITY
// from 2 GiB up. Exit status 1 (the job died of the second OOM), like a crashed training run.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "caching_allocator.h"
#include "fragscope/annotate.h"

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

// Named so the report's allocation sites read like a model's code.
__attribute__((noinline)) void* LoadWeights(demo::CachingAllocator& a, std::size_t bytes) {
  return a.Allocate(bytes);
}
__attribute__((noinline)) void* ForwardActivation(demo::CachingAllocator& a, std::size_t bytes) {
  return a.Allocate(bytes);
}
__attribute__((noinline)) void* KvCacheBlock(demo::CachingAllocator& a, std::size_t bytes) {
  return a.Allocate(bytes);
}
__attribute__((noinline)) void* Logits(demo::CachingAllocator& a, std::size_t bytes) {
  return a.Allocate(bytes);
}
}  // namespace

int main() {
  if (cudaSetDevice(0) != cudaSuccess) {
    std::fprintf(stderr, "demo: no CUDA device\n");
    return 2;
  }
  std::size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  demo::CachingAllocator alloc(0);

  std::vector<void*> weights;
  const std::size_t weight_bytes = total_b / 4;
  for (int i = 0; i < 8; ++i) weights.push_back(LoadWeights(alloc, weight_bytes / 8));
  std::printf("loaded weights: %.2f GiB\n", static_cast<double>(weight_bytes) / kGiB);

  // Long sequences: as many 100 MiB activations as fit, leaving ~1/16 of the device free.
  cudaMemGetInfo(&free_b, &total_b);
  const std::size_t activation = 100 * kMiB;
  const std::size_t n = (free_b - total_b / 16) / activation;
  int step = 0;
  for (; step < 3; ++step) {
    char label[32];
    std::snprintf(label, sizeof(label), "step %d", step);
    fragscope_annotate_mark(label);
    std::vector<void*> acts;
    for (std::size_t i = 0; i < n; ++i) acts.push_back(ForwardActivation(alloc, activation));
    for (void* p : acts) alloc.Free(p);
    std::printf("step %d: long sequences, %zu activations, reserved %.2f GiB\n", step, n,
                static_cast<double>(alloc.reserved_bytes()) / kGiB);
  }

  // Short sequences: a 60 MiB KV-cache block lands in every cached 100 MiB segment.
  fragscope_annotate_mark("step 3");
  std::vector<void*> kv;
  for (std::size_t i = 0; i < n; ++i) kv.push_back(KvCacheBlock(alloc, 60 * kMiB));
  // Logits bigger than what the device has left, but smaller than the holes plus that: the
  // memory is there, just not in one piece.
  cudaMemGetInfo(&free_b, &total_b);
  const std::size_t holes = alloc.reserved_bytes() - alloc.allocated_bytes();
  const std::size_t logits_bytes = (free_b + holes / 2) / kMiB * kMiB;
  void* logits = Logits(alloc, logits_bytes);
  if (logits == nullptr) {
    std::printf("step 3: OOM (caught, batch skipped): %s\n", alloc.last_error().c_str());
  }
  for (void* p : kv) alloc.Free(p);
  alloc.EmptyCache();

  // Scale up: a tensor larger than what the GPU can hold beside the weights.
  fragscope_annotate_mark("step 4");
  void* huge = Logits(alloc, total_b - weight_bytes / 2);
  if (huge == nullptr) {
    std::fprintf(stderr, "step 4: torch.OutOfMemoryError: %s\n", alloc.last_error().c_str());
    return 1;
  }
  alloc.Free(huge);
  return 0;
}
