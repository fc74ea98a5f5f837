// libfragscope_bench_passthrough.so: the least an interposer in fragscope's place can cost, for
// the hook benchmark's percentage rows (scripts/bench, mode "passthrough").
//
// It sits where the agent sits, at both layers, and does nothing there:
// - cudaMalloc, cudaFree, cudaMallocAsync and cudaFreeAsync are exported and jump on to the
//   runtime's own (looked up once with dlsym(RTLD_NEXT)).
// - The runtime reaches the driver through cuGetProcAddress_v2, which it looks up with dlsym on
//   its libcuda handle; this library answers that lookup (it exports dlsym), and the
//   cuGetProcAddress it hands out answers cuMemAlloc, cuMemFree and its own name with
//   functions here that jump on to the driver's. So a cudaMalloc+cudaFree pair runs four
//   pass-through hooks, as it runs four hooks of the agent.
// A dormant agent's figure minus this one's is what keeping the live table costs; this one is
// what any interposer of these calls costs on the benchmark.
//
// Built a second time with FRAGSCOPE_BENCH_MINIMAL_LOG as libfragscope_bench_minlog.so (mode
// "minimal-log"): its cudaMalloc and cudaFree also keep a per-thread log of live allocations
// with nothing else around it, the least an agent that keeps an exact live table can do on
// this benchmark (it must call, not jump, to see each result). It cannot be woken, folded or
// shared between threads, so it is a lower bound for the dormant agent, not a design.
//
// Benchmark only, never installed. Not thread-safe while the runtime initializes (the
// benchmark initializes it on its main thread before timing). dlsym lookups other than
// cuGetProcAddress_v2 on a handle go on to libc's dlsym as a tail call, so that RTLD_NEXT keeps
// its caller; no program this library is preloaded into makes one that would tell.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using DlsymFn = void* (*)(void*, const char*);

[[noreturn]] void Die(const char* what) {
  const char* why = dlerror();
  std::fprintf(stderr, "libfragscope_bench_passthrough: %s: %s\n", what,
               why != nullptr ? why : "not found");
  std::abort();
}

DlsymFn LibcDlsym() {
  static DlsymFn fn = [] {
    void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (p == nullptr) Die("libc's dlsym");
    return reinterpret_cast<DlsymFn>(p);
  }();
  return fn;
}

// nullptr in a process without a CUDA runtime (a tool that inherited LD_PRELOAD, such as perf or
// valgrind's launcher): it never calls these.
template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(LibcDlsym()(RTLD_NEXT, name));
}

// Runtime layer: resolved at load, so each hook is one indirect jump.
cudaError_t (*g_malloc)(void**, size_t);
cudaError_t (*g_free)(void*);
cudaError_t (*g_malloc_async)(void**, size_t, cudaStream_t);
cudaError_t (*g_free_async)(void*, cudaStream_t);

[[gnu::constructor]] void Init() {
  g_malloc = Next<decltype(g_malloc)>("cudaMalloc");
  g_free = Next<decltype(g_free)>("cudaFree");
  g_malloc_async = Next<decltype(g_malloc_async)>("cudaMallocAsync");
  g_free_async = Next<decltype(g_free_async)>("cudaFreeAsync");
}

// Driver layer: the real functions as cuGetProcAddress returned them.
PFN_cuGetProcAddress_v12000 g_get_proc_address;
PFN_cuMemAlloc_v3020 g_mem_alloc;
PFN_cuMemFree_v3020 g_mem_free;
std::atomic<int> g_wrapped{0};  // lookups answered with a hook here

#ifdef FRAGSCOPE_BENCH_MINIMAL_LOG
// A per-thread log of (address, size) with no synchronization at all: a lower bound for the
// dormant agent's allocation log (interpose/src/recording/allocation_log.h), which a wake must also
// be able to fold from another thread. An allocation the log cannot take is simply not kept here.
struct MinimalLog {
  static constexpr uint32_t kCapacity = 1024;
  struct Entry {
    uint64_t address;
    uint64_t size;
  };
  uint32_t count;
  Entry entries[kCapacity];
};
thread_local constinit MinimalLog t_min_log __attribute__((tls_model("initial-exec"))) = {};
#endif

CUresult MemAlloc(CUdeviceptr* ptr, size_t size) { return g_mem_alloc(ptr, size); }
CUresult MemFree(CUdeviceptr ptr) { return g_mem_free(ptr); }

CUresult GetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status) {
  const CUresult r = g_get_proc_address(symbol, pfn, version, flags, status);
  if (r != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return r;
  if (std::strcmp(symbol, "cuMemAlloc") == 0 && version >= 3020) {
    g_mem_alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(*pfn);
    *pfn = reinterpret_cast<void*>(&MemAlloc);
  } else if (std::strcmp(symbol, "cuMemFree") == 0 && version >= 3020) {
    g_mem_free = reinterpret_cast<PFN_cuMemFree_v3020>(*pfn);
    *pfn = reinterpret_cast<void*>(&MemFree);
  } else if (std::strcmp(symbol, "cuGetProcAddress") == 0 && version >= 12000) {
    *pfn = reinterpret_cast<void*>(&GetProcAddress);  // later lookups come here too
  } else {
    return r;
  }
  g_wrapped.fetch_add(1, std::memory_order_relaxed);
  return r;
}

}  // namespace

extern "C" {

#ifndef FRAGSCOPE_BENCH_MINIMAL_LOG
__attribute__((visibility("default"))) cudaError_t cudaMalloc(void** ptr, size_t size) {
  return g_malloc(ptr, size);
}
__attribute__((visibility("default"))) cudaError_t cudaFree(void* ptr) { return g_free(ptr); }
#else
// libfragscope_bench_minlog.so: the least work any agent that keeps an exact live table can do
// at the runtime layer (see MinimalLog above). It must see the allocation's result, so it
// calls rather than jumps; a release must see its result too (a failed cudaFree leaves the
// allocation live), so it takes the entry back only after a successful call.
__attribute__((visibility("default"))) cudaError_t cudaMalloc(void** ptr, size_t size) {
  const cudaError_t r = g_malloc(ptr, size);
  if (__builtin_expect(r == cudaSuccess && ptr != nullptr, 1)) {
    MinimalLog& log = t_min_log;
    if (__builtin_expect(log.count < MinimalLog::kCapacity, 1)) {
      log.entries[log.count] = {reinterpret_cast<uint64_t>(*ptr), size};
      ++log.count;
    }
  }
  return r;
}
__attribute__((visibility("default"))) cudaError_t cudaFree(void* ptr) {
  const cudaError_t r = g_free(ptr);
  MinimalLog& log = t_min_log;
  if (__builtin_expect(r == cudaSuccess && log.count > 0 &&
                           log.entries[log.count - 1].address == reinterpret_cast<uint64_t>(ptr),
                       1)) {
    --log.count;
  }
  return r;
}
#endif
__attribute__((visibility("default"))) cudaError_t cudaMallocAsync(void** ptr, size_t size,
                                                                   cudaStream_t stream) {
  return g_malloc_async(ptr, size, stream);
}
__attribute__((visibility("default"))) cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  return g_free_async(ptr, stream);
}

__attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  if (handle != RTLD_DEFAULT && handle != RTLD_NEXT &&
      std::strcmp(name, "cuGetProcAddress_v2") == 0) {
    void* real = LibcDlsym()(handle, name);
    if (real == nullptr) return nullptr;
    g_get_proc_address = reinterpret_cast<PFN_cuGetProcAddress_v12000>(real);
    g_wrapped.fetch_add(1, std::memory_order_relaxed);
    return reinterpret_cast<void*>(&GetProcAddress);
  }
  return LibcDlsym()(handle, name);
}

// How many lookups this library answered with its own hooks: the benchmark checks that the
// driver layer really runs through it (4 for the fake runtime: the entry point, its self
// lookup, cuMemAlloc, cuMemFree).
__attribute__((visibility("default"))) int fragscope_bench_passthrough_wrapped() {
  return g_wrapped.load(std::memory_order_relaxed);
}

}  // extern "C"
