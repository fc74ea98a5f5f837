// The workload of the heaptrack comparison: N allocate/free pairs, each `depth` frames deep.
//
//   depth_workload malloc N DEPTH   # malloc(4096) + free: what heaptrack records
//   depth_workload cuda N DEPTH     # cudaMalloc(4096) + cudaFree: what fragscope records
//
// scripts/bench times the whole process with and without the tool (heaptrack, or
// LD_PRELOAD=libfragscope.so) and divides the difference by 2N events, so whatever the tool does
// after the loop (flushing, heaptrack's interpreter) is counted too.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "call_depth.h"

int main(int argc, char** argv) {
  if (argc != 4 || (std::strcmp(argv[1], "malloc") != 0 && std::strcmp(argv[1], "cuda") != 0)) {
    std::fprintf(stderr, "usage: %s malloc|cuda N DEPTH\n", argv[0]);
    return 2;
  }
  const bool cuda = std::strcmp(argv[1], "cuda") == 0;
  const long n = std::atol(argv[2]);
  const int depth = std::atoi(argv[3]);
  bool ok = true;
  auto pair = [&] {
    void* p = nullptr;
    if (cuda) {
      ok &= cudaMalloc(&p, 4096) == cudaSuccess;
      ok &= cudaFree(p) == cudaSuccess;
    } else {
      p = std::malloc(4096);
      // The compiler may not drop a malloc/free pair whose pointer escapes.
      asm volatile("" : : "r"(p) : "memory");
      ok &= p != nullptr;
      std::free(p);
    }
  };
  for (long i = 0; i < n; ++i) fragscope::bench::AtDepth(depth, pair);
  if (!ok) {
    std::fprintf(stderr, "depth_workload: an allocation failed\n");
    return 1;
  }
  return 0;
}
