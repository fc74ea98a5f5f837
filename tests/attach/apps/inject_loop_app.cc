// A busy program for attach-by-injection tests: 4 threads allocate and free in a loop, half
// through the runtime and half through cuMemAlloc/cuMemFree pointers fetched with
// cudaGetDriverEntryPointByVersion before any attach (as PyTorch keeps them), while an attach
// patches and unpatches libcuda under them. Prints "running" once the threads run, stops on a
// "stop" line, then prints "done allocs=N frees=N errors=N" and exits 1 if any call failed.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

PFN_cuMemAlloc_v3020 g_alloc = nullptr;
PFN_cuMemFree_v3020 g_free = nullptr;
std::atomic<bool> g_stop{false};
std::atomic<long> g_allocs{0}, g_frees{0}, g_errors{0};

void Error(const char* what, int code) {
  if (++g_errors <= 10) std::fprintf(stderr, "%s failed: %d\n", what, code);
}

void Work(int index) {
  const size_t size = (static_cast<size_t>(index) + 1) * 4096;
  // The runtime makes the primary context current on this thread; the driver calls need it.
  if (cudaError_t r = cudaSetDevice(0); r != cudaSuccess) Error("cudaSetDevice", r);
  if (cudaError_t r = cudaFree(nullptr); r != cudaSuccess) Error("cudaFree(nullptr)", r);
  for (long i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    // Busy, but not faster than the agent's drain thread ships (no ring overflow on a slow
    // machine): about 16 pairs per millisecond per thread.
    if ((i & 15) == 15) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (((i + index) & 1) == 0) {
      void* p = nullptr;
      if (cudaError_t r = cudaMalloc(&p, size); r != cudaSuccess) {
        Error("cudaMalloc", r);
        continue;
      }
      ++g_allocs;
      if (CUresult r = g_free(reinterpret_cast<CUdeviceptr>(p)); r != CUDA_SUCCESS) {
        Error("cuMemFree (cached)", r);
      }
      ++g_frees;
    } else {
      CUdeviceptr p = 0;
      if (CUresult r = g_alloc(&p, size); r != CUDA_SUCCESS) {
        Error("cuMemAlloc (cached)", r);
        continue;
      }
      ++g_allocs;
      if (cudaError_t r = cudaFree(reinterpret_cast<void*>(p)); r != cudaSuccess) {
        Error("cudaFree", r);
      }
      ++g_frees;
    }
  }
}

}  // namespace

int main() {
  if (cudaFree(nullptr) != cudaSuccess) return 3;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuMemAlloc", reinterpret_cast<void**>(&g_alloc), 12000,
                                       cudaEnableDefault, &q) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuMemFree", reinterpret_cast<void**>(&g_free), 12000,
                                       cudaEnableDefault, &q) != cudaSuccess) {
    return 4;
  }
  void* before = nullptr;  // live across the attach, never freed
  if (cudaMalloc(&before, 4u << 20) != cudaSuccess) return 5;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(Work, i);
  std::printf("running\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line) && line != "stop") {
  }
  g_stop = true;
  for (std::thread& t : threads) t.join();
  std::printf("done allocs=%ld frees=%ld errors=%ld\n", g_allocs.load(), g_frees.load(),
              g_errors.load());
  return g_errors.load() == 0 ? 0 : 1;
}
