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

__attribute__((visibility("default"))) cudaError_t cudaMalloc(void** ptr, size_t size) {
  return g_malloc(ptr, size);
}
__attribute__((visibility("default"))) cudaError_t cudaFree(void* ptr) { return g_free(ptr); }
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
