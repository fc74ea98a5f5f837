// Many allocations and frees for the flight recorder test: `flight_app ITERATIONS [sites]`.
// Keeps a window of 64 live allocations (each iteration frees the oldest and allocates a new
// one, from one of four call sites), then makes one allocation fail (far beyond the device),
// frees half the window and exits with the rest still live. Prints "failed <error>" and "done".
// With `sites`, first a sub-allocator's block given a source-level site (annotate.h), live
// until exit: the newest file must still name that site, sent long before it began.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fragscope/annotate.h"

namespace {

constexpr int kWindow = 64;

__attribute__((noinline)) void* SiteA(size_t size) {
  void* p = nullptr;
  return cudaMalloc(&p, size) == cudaSuccess ? p : nullptr;
}
__attribute__((noinline)) void* SiteB(size_t size) {
  void* p = nullptr;
  return cudaMalloc(&p, size) == cudaSuccess ? p : nullptr;
}
__attribute__((noinline)) void* SiteC(size_t size) {
  void* p = nullptr;
  return cudaMalloc(&p, size) == cudaSuccess ? p : nullptr;
}
__attribute__((noinline)) void* SiteD(size_t size) {
  void* p = nullptr;
  return cudaMalloc(&p, size) == cudaSuccess ? p : nullptr;
}

void* Allocate(int i) {
  const size_t size = 512 * static_cast<size_t>(1 + (i * 7919) % 1024);
  switch (i % 4) {
    case 0:
      return SiteA(size);
    case 1:
      return SiteB(size);
    case 2:
      return SiteC(size);
    default:
      return SiteD(size);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 100000;
  if (argc > 2 && std::strcmp(argv[2], "sites") == 0) {
    void* arena = nullptr;
    if (cudaMalloc(&arena, size_t{8} << 20) != cudaSuccess) return 3;
    fragscope_annotate_block_alloc(arena, 4096, 0, nullptr, 0);
    const fragscope_source_frame frames[] = {{"make_weights", "model.py", 12}};
    fragscope_annotate_block_site(arena, 0, fragscope_annotate_source_stack(frames, 1));
  }
  void* window[kWindow] = {};
  for (int i = 0; i < iterations; ++i) {
    void*& slot = window[i % kWindow];
    if (slot != nullptr) cudaFree(slot);
    slot = Allocate(i);
  }
  void* huge = nullptr;
  const cudaError_t failed = cudaMalloc(&huge, size_t{1} << 50);
  std::printf("failed %d\n", static_cast<int>(failed));
  for (int i = 0; i < kWindow; i += 2) cudaFree(window[i]);
  std::printf("done\n");
  return 0;
}
