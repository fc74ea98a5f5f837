// A long-running program for attach tests: three phases of allocations, each ended by printing
// "ready N" and waiting for a line on stdin, so a test can wake (or detach) the agent between
// them. Before phase 1 it fetches cuMemAlloc/cuMemFree through cudaGetDriverEntryPoint and
// keeps the pointers in statics, as PyTorch does, so an attach must catch calls through them.
// Everything still live at exit is leaked on purpose (FAKECUDA_LIVE_DUMP is the ground truth).
// ATTACH_APP_NOT_DUMPABLE=1 makes it non-dumpable (prctl), so that only CAP_SYS_PTRACE may trace
// it. ATTACH_APP_SECOND_DEVICE=1 (with FAKECUDA_DEVICES=2) also allocates on device 1 in phases
// 1 (one of them stream-ordered) and 3, and frees one of those in phase 2 while device 0 is
// current. ATTACH_APP_SYNCED_BLOCKS=1 reports, at the end of phase 1, a 1 MiB block inside the
// 4 MiB allocation as a snapshot diff does (late, its source-level site, then
// fragscope_blocks_synced). ATTACH_APP_RANK=R:N says, before phase 1, that the process is rank R
// of N (fragscope_set_rank, as the PyTorch adapter does after init_process_group).
// ATTACH_APP_THREADS=N runs N threads in phase 1 that allocate, free some of their own at once
// and some of the next thread's (a dormant agent's per-thread logs: cancels, cross-thread
// releases, logs of exited threads), and exit before the wake. ATTACH_APP_FAILED_FREE=1 starts
// phase 1 with an allocation and its cudaFree (with FAKECUDA_FAIL_CALLS=cuMemFree:1, the free
// fails and the allocation stays).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <sys/prctl.h>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "fragscope/annotate.h"

namespace {

PFN_cuMemAlloc_v3020 g_alloc = nullptr;  // cached before any attach
PFN_cuMemFree_v3020 g_free = nullptr;

void* Malloc(size_t size) {
  void* p = nullptr;
  cudaError_t r = cudaMalloc(&p, size);
  std::printf("cudaMalloc %p %zu %d\n", p, size, static_cast<int>(r));
  return p;
}

CUdeviceptr DriverAlloc(size_t size) {
  CUdeviceptr p = 0;
  CUresult r = g_alloc(&p, size);
  std::printf("cuMemAlloc %#llx %zu %d\n", static_cast<unsigned long long>(p), size,
              static_cast<int>(r));
  return p;
}

// ATTACH_APP_THREADS: thread t allocates kPerThread blocks (sizes unique to t), frees every
// third one at once (its own log's newest entry), then, once every thread has allocated, frees
// the even-numbered survivors of thread t+1 (another thread's log) and exits.
void ThreadPhase(int threads) {
  constexpr int kPerThread = 40;
  std::vector<std::vector<void*>> kept(threads);
  std::barrier allocated(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int j = 0; j < kPerThread; ++j) {
        void* p = nullptr;
        const size_t size = (size_t{1} << 16) * (t + 1) + 4096 * (j + 1);
        if (cudaMalloc(&p, size) != cudaSuccess) continue;
        if (j % 3 == 0) {
          cudaFree(p);
        } else {
          kept[t].push_back(p);
        }
      }
      allocated.arrive_and_wait();
      std::vector<void*>& next = kept[(t + 1) % threads];
      for (size_t j = 0; j < next.size(); j += 2) cudaFree(next[j]);
    });
  }
  for (std::thread& w : workers) w.join();
}

bool WaitForLine(int phase) {
  std::printf("ready %d\n", phase);
  std::fflush(stdout);
  std::string line;
  return static_cast<bool>(std::getline(std::cin, line));
}

}  // namespace

int main() {
  constexpr size_t kMiB = size_t{1} << 20;
  if (cudaFree(nullptr) != cudaSuccess) return 3;
  // A process that only CAP_SYS_PTRACE may trace (as set-uid programs and some sandboxes are).
  if (std::getenv("ATTACH_APP_NOT_DUMPABLE") != nullptr) prctl(PR_SET_DUMPABLE, 0);
  cudaDriverEntryPointQueryResult q;
  // ByVersion, as PyTorch does (the unversioned call is deprecated in CUDA 13).
  if (cudaGetDriverEntryPointByVersion("cuMemAlloc", reinterpret_cast<void**>(&g_alloc), 12000,
                                       cudaEnableDefault, &q) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuMemFree", reinterpret_cast<void**>(&g_free), 12000,
                                       cudaEnableDefault, &q) != cudaSuccess) {
    return 4;
  }
  if (const char* rank = std::getenv("ATTACH_APP_RANK")) {
    int r = -1, n = -1;
    if (std::sscanf(rank, "%d:%d", &r, &n) != 2) return 6;
    fragscope_annotate_rank(r, n);
  }
  // Phase 1: before any attach.
  if (std::getenv("ATTACH_APP_FAILED_FREE") != nullptr) {
    void* f = Malloc(kMiB / 2 + 4096);
    std::printf("cudaFree %p %d\n", f, static_cast<int>(cudaFree(f)));
  }
  void* a[4];
  for (int i = 0; i < 4; ++i) a[i] = Malloc((i + 1) * kMiB);
  CUdeviceptr d1 = DriverAlloc(3 * kMiB + 512);
  cudaFree(a[1]);
  const bool second_device = std::getenv("ATTACH_APP_SECOND_DEVICE") != nullptr;
  void* b1 = nullptr;
  if (second_device) {
    if (cudaSetDevice(1) != cudaSuccess) return 5;
    b1 = Malloc(2 * kMiB + 4096);
    Malloc(6 * kMiB);
    // Stream-ordered, from device 1's default pool (printed: a dormant agent reads the pool
    // at the wake).
    cudaMemPool_t pool = nullptr;
    void* c = nullptr;
    cudaDeviceGetDefaultMemPool(&pool, 1);
    cudaError_t r = cudaMallocAsync(&c, 3 * kMiB / 2, nullptr);
    std::printf("cudaMallocAsync %p %zu %d pool %p\n", c, 3 * kMiB / 2, static_cast<int>(r),
                static_cast<void*>(pool));
    cudaStreamSynchronize(nullptr);
    cudaSetDevice(0);
  }
  if (std::getenv("ATTACH_APP_SYNCED_BLOCKS") != nullptr) {
    fragscope_annotate_block_alloc_late(a[3], kMiB, 0, nullptr, 0);
    // Its source-level site, learned while dormant (an adapter's Python frames).
    const fragscope_source_frame frames[] = {{"load_weights", "train.py", 3}};
    fragscope_annotate_block_site(a[3], 0, fragscope_annotate_source_stack(frames, 1));
    fragscope_annotate_blocks_synced("test sync");
  }
  if (const char* threads = std::getenv("ATTACH_APP_THREADS")) ThreadPhase(std::atoi(threads));
  if (!WaitForLine(1)) return 0;
  // Phase 2: the attached part.
  Malloc(5 * kMiB);
  DriverAlloc(7 * kMiB);
  g_free(d1);
  cudaFree(a[0]);
  if (second_device) cudaFree(b1);  // device 0 is current
  void* huge = nullptr;
  cudaError_t r = cudaMalloc(&huge, size_t{1} << 50);  // an OOM the stream must carry
  std::printf("oom %d\n", static_cast<int>(r));
  if (!WaitForLine(2)) return 0;
  // Phase 3: after a detach, if the test detached.
  Malloc(11 * kMiB);
  DriverAlloc(13 * kMiB);
  if (second_device) {
    cudaSetDevice(1);
    Malloc(9 * kMiB);
    cudaSetDevice(0);
  }
  WaitForLine(3);
  return 0;
}
