// Hook overhead: the same CUDA call, direct and through the agent, side by side in one process.
//
// Run it with libfragscope.so in LD_PRELOAD (scripts/bench does, once per agent mode: dormant,
// no stacks, 8/32/64-frame stacks) on the fake device in null mode (FAKECUDA_NULL=1).
//
// "intercepted" calls the functions the program binds to: with the agent preloaded, its
// wrappers. "direct" cannot use the real libcudart of this process: the runtime reaches the
// driver only through pointers it looked up with dlsym/cuGetProcAddress, which the agent answers
// with its wrappers, so a "direct" cudaMalloc would still run the agent's driver hook. Instead
// the direct side is a second copy of the fake runtime and driver loaded with
// dlmopen(LM_ID_NEWLM): a new link namespace gets no LD_PRELOAD, its own libc and its own dlsym,
// so nothing in it is wrapped. Same code, same process, same machine state. Without the agent
// (mode "none") both sides are unwrapped: that A/A run shows what the method itself reads.
//
// Each call runs `depth` frames deep (call_depth.h) so stack modes walk a known depth; both
// sides pay the same descent, so the difference is the hook.
//
// The process is multi-threaded on both sides, as a CUDA process is: libcuda starts helper
// threads in cuInit, before the first allocation, and glibc (2.34 and later) then takes the
// atomic path in every pthread_mutex_lock/unlock the runtime and driver make. The direct side
// always did: glibc starts a secondary namespace's libc as multi-threaded
// (__libc_single_threaded false, since it cannot see the process's threads). The intercepted
// side did only when something started a thread (a dormant or active agent's background thread,
// not mode "none" or "off"), so those two modes compared a single-threaded libc with a
// multi-threaded one: the A/A row read about -5 %. The fake driver starts no thread, so a parked
// helper thread stands in for the driver's. FRAGSCOPE_BENCH_SINGLE_THREADED=1 keeps the
// single-threaded process of earlier runs.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/single_threaded.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "call_depth.h"
#include "fragscope/annotate.h"

namespace fragscope::bench {
namespace {

constexpr size_t kVmmBytes = size_t{2} << 20;  // the fake's VMM granularity

// The calls a benchmark makes, through one route.
struct CudaCalls {
  const char* route = "";
  cudaError_t (*malloc)(void**, size_t) = nullptr;
  cudaError_t (*free)(void*) = nullptr;
  cudaError_t (*malloc_async)(void**, size_t, cudaStream_t) = nullptr;
  cudaError_t (*free_async)(void*, cudaStream_t) = nullptr;
  CUresult (*address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                              unsigned long long) = nullptr;
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                         unsigned long long) = nullptr;
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                      unsigned long long) = nullptr;
  CUresult (*mem_unmap)(CUdeviceptr, size_t) = nullptr;
  // One reserved range and one physical handle, mapped and unmapped by the VMM benchmark.
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle = 0;
};

CudaCalls g_direct;
CudaCalls g_intercepted;

[[noreturn]] void Die(const char* what, const char* detail) {
  std::fprintf(stderr, "hook_bench: %s: %s\n", what, detail != nullptr ? detail : "");
  std::exit(2);
}

// libc's own dlsym. The agent interposes `dlsym` (and answers lookups of wrapped driver names
// on libcuda handles with its wrappers); dlvsym on libc's handle reaches glibc's definition.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn RealDlsym() {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr) Die("dlopen libc.so.6", dlerror());
  void* p = dlvsym(libc, "dlsym", "GLIBC_2.34");
  if (p == nullptr) p = dlvsym(libc, "dlsym", "GLIBC_2.2.5");
  if (p == nullptr) Die("dlvsym dlsym", dlerror());
  return reinterpret_cast<DlsymFn>(p);
}

// The file that defines `fn`: shows in the JSON context which library each route really calls.
std::string DefiningObject(const void* fn) {
  Dl_info info;
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

template <typename Fn>
void Lookup(DlsymFn real_dlsym, void* lib, const char* name, Fn* out) {
  void* p = real_dlsym(lib, name);
  if (p == nullptr) Die("dlsym", name);
  *out = reinterpret_cast<Fn>(p);
}

// Primary context current, one reserved range and one handle for the VMM benchmark.
void PrepareVmm(CudaCalls& calls) {
  if (calls.free(nullptr) != cudaSuccess) Die(calls.route, "cudaFree(NULL) failed");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  if (calls.address_reserve(&calls.va, kVmmBytes, 0, 0, 0) != CUDA_SUCCESS) {
    Die(calls.route, "cuMemAddressReserve failed");
  }
  if (calls.mem_create(&calls.handle, kVmmBytes, &prop, 0) != CUDA_SUCCESS) {
    Die(calls.route, "cuMemCreate failed");
  }
}

void SetUpIntercepted() {
  CudaCalls& c = g_intercepted;
  c.route = "intercepted";
  // Whatever this executable binds to: the agent's exports when it is preloaded.
  c.malloc = &cudaMalloc;
  c.free = &cudaFree;
  c.malloc_async = &cudaMallocAsync;
  c.free_async = &cudaFreeAsync;
  c.address_reserve = &cuMemAddressReserve;
  c.mem_create = &cuMemCreate;
  c.mem_map = &cuMemMap;
  c.mem_unmap = &cuMemUnmap;
  PrepareVmm(c);
}

bool SingleThreaded() {
  const char* v = std::getenv("FRAGSCOPE_BENCH_SINGLE_THREADED");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// Stands in for the driver's helper threads (see the top of this file). Parked for the
// process's life; exit does not wait for it.
void StartDriverHelperThread() {
  std::thread([] {
    for (;;) pause();
  }).detach();
  if (__libc_single_threaded) Die("helper thread", "libc still reports a single thread");
}

// The libc of namespace `lmid` is its own copy and multi-threaded (see the top of this file);
// a glibc that started it single-threaded is told what its pthread_create would have said.
void MarkMultiThreaded(DlsymFn real_dlsym, Lmid_t lmid) {
  void* libc = dlmopen(lmid, "libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr) Die("dlmopen libc.so.6 (namespace)", dlerror());
  auto* flag = static_cast<char*>(real_dlsym(libc, "__libc_single_threaded"));
  if (flag == nullptr) Die("dlsym __libc_single_threaded (namespace)", dlerror());
  if (flag == &__libc_single_threaded) Die("direct", "the namespace shares this process's libc");
  *flag = 0;
}

void SetUpDirect() {
  CudaCalls& c = g_direct;
  c.route = "direct";
  DlsymFn real_dlsym = RealDlsym();
  // The path of this process's runtime, so that the namespace loads the same file.
  std::string runtime = DefiningObject(
      real_dlsym(dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD), "cudaGetDeviceCount"));
  void* cudart = dlmopen(LM_ID_NEWLM, runtime.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (cudart == nullptr) Die("dlmopen runtime", dlerror());
  Lookup(real_dlsym, cudart, "cudaMalloc", &c.malloc);
  Lookup(real_dlsym, cudart, "cudaFree", &c.free);
  Lookup(real_dlsym, cudart, "cudaMallocAsync", &c.malloc_async);
  Lookup(real_dlsym, cudart, "cudaFreeAsync", &c.free_async);
  // The runtime opens its driver on first use; then the namespace holds it.
  if (c.free(nullptr) != cudaSuccess) Die("direct", "cudaFree(NULL) failed");
  Lmid_t lmid = 0;
  if (dlinfo(cudart, RTLD_DI_LMID, &lmid) != 0) Die("dlinfo", dlerror());
  void* cuda = dlmopen(lmid, "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cuda == nullptr) Die("dlmopen libcuda.so.1 (namespace)", dlerror());
  if (!SingleThreaded()) MarkMultiThreaded(real_dlsym, lmid);
  Lookup(real_dlsym, cuda, "cuMemAddressReserve", &c.address_reserve);
  Lookup(real_dlsym, cuda, "cuMemCreate", &c.mem_create);
  Lookup(real_dlsym, cuda, "cuMemMap", &c.mem_map);
  Lookup(real_dlsym, cuda, "cuMemUnmap", &c.mem_unmap);
  PrepareVmm(c);
  for (const void* fn :
       {reinterpret_cast<const void*>(c.malloc), reinterpret_cast<const void*>(c.mem_map)}) {
    if (DefiningObject(fn).find("libfragscope") != std::string::npos) {
      Die("direct", "a direct pointer is the agent's wrapper");
    }
  }
}

const CudaCalls& Calls(bool direct) { return direct ? g_direct : g_intercepted; }

// cudaMalloc + cudaFree, `depth` frames deep. Time per pair (two events through the agent).
void BM_MallocFree(benchmark::State& state, bool direct) {
  const CudaCalls& c = Calls(direct);
  const int depth = static_cast<int>(state.range(0));
  bool ok = true;
  auto body = [&] {
    void* p = nullptr;
    ok &= c.malloc(&p, 4096) == cudaSuccess;
    ok &= c.free(p) == cudaSuccess;
  };
  for (auto _ : state) AtDepth(depth, body);
  if (!ok) state.SkipWithError("cudaMalloc/cudaFree failed");
  state.SetItemsProcessed(state.iterations() * 2);
}

// The same pair, direct and intercepted in one benchmark: each iteration times a block of
// kPairsPerBlock direct pairs and a block of intercepted ones back to back (which goes first
// alternates), and the figure is the median over iterations of intercepted / direct - 1. The
// two blocks of one iteration take ~6 us each, one right after the other, so a neighbour's
// load on a shared host, which comes and goes over milliseconds, hits both or neither; separate
// benchmarks (BM_MallocFree) are 0.2 s apart and read it as overhead. Counters: overhead_pct (that
// median, per cent), direct_ns and intercepted_ns (medians per pair).
void BM_MallocFreePaired(benchmark::State& state) {
  constexpr int kPairsPerBlock = 64;
  const int depth = static_cast<int>(state.range(0));
  bool ok = true;
  const CudaCalls* calls = nullptr;
  auto body = [&] {
    for (int i = 0; i < kPairsPerBlock; ++i) {
      void* p = nullptr;
      ok &= calls->malloc(&p, 4096) == cudaSuccess;
      ok &= calls->free(p) == cudaSuccess;
    }
  };
  auto time_block = [&](const CudaCalls& c) {
    calls = &c;
    timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    AtDepth(depth, body);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
  };
  std::vector<double> ratios, direct_ns, intercepted_ns;
  ratios.reserve(1 << 16);
  direct_ns.reserve(1 << 16);
  intercepted_ns.reserve(1 << 16);
  bool direct_first = true;
  for (auto _ : state) {
    double d, i;
    if (direct_first) {
      d = time_block(g_direct);
      i = time_block(g_intercepted);
    } else {
      i = time_block(g_intercepted);
      d = time_block(g_direct);
    }
    direct_first = !direct_first;
    ratios.push_back(i / d);
    direct_ns.push_back(d / kPairsPerBlock);
    intercepted_ns.push_back(i / kPairsPerBlock);
  }
  if (!ok) state.SkipWithError("cudaMalloc/cudaFree failed");
  auto median = [](std::vector<double>& v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  state.counters["overhead_pct"] = (median(ratios) - 1) * 100;
  state.counters["direct_ns"] = median(direct_ns);
  state.counters["intercepted_ns"] = median(intercepted_ns);
  state.SetItemsProcessed(state.iterations() * 4 * kPairsPerBlock);
}

void BM_MallocFreeAsync(benchmark::State& state, bool direct) {
  const CudaCalls& c = Calls(direct);
  const int depth = static_cast<int>(state.range(0));
  bool ok = true;
  auto body = [&] {
    void* p = nullptr;
    ok &= c.malloc_async(&p, 4096, nullptr) == cudaSuccess;
    ok &= c.free_async(p, nullptr) == cudaSuccess;
  };
  for (auto _ : state) AtDepth(depth, body);
  if (!ok) state.SkipWithError("cudaMallocAsync/cudaFreeAsync failed");
  state.SetItemsProcessed(state.iterations() * 2);
}

void BM_MemMapUnmap(benchmark::State& state, bool direct) {
  const CudaCalls& c = Calls(direct);
  const int depth = static_cast<int>(state.range(0));
  bool ok = true;
  auto body = [&] {
    ok &= c.mem_map(c.va, kVmmBytes, 0, c.handle, 0) == CUDA_SUCCESS;
    ok &= c.mem_unmap(c.va, kVmmBytes) == CUDA_SUCCESS;
  };
  for (auto _ : state) AtDepth(depth, body);
  if (!ok) state.SkipWithError("cuMemMap/cuMemUnmap failed");
  state.SetItemsProcessed(state.iterations() * 2);
}

// A sub-allocator's block alloc + free reported through annotate.h (what the PyTorch adapter
// does for every tensor), `depth` frames deep. "direct" is the same program without the agent:
// the weak functions are null and the wrappers do nothing, so the time added is the agent's
// whole cost per block event (there is no CUDA call underneath). Addresses cycle through
// 1024 slots of 4 KiB, as a cache reuses its blocks; nothing is dereferenced.
void BM_BlockAllocFree(benchmark::State& state, bool direct) {
  using AllocFn = void (*)(void*, size_t, int, void*, uint64_t);
  using FreeFn = void (*)(void*, int, void*);
  // Through volatile pointers, so the compiler cannot drop the null checks of the direct side.
  AllocFn volatile alloc = direct ? nullptr : &fragscope_block_alloc;
  FreeFn volatile release = direct ? nullptr : &fragscope_block_free;
  const int depth = static_cast<int>(state.range(0));
  constexpr uintptr_t kBase = uintptr_t{0x7f00} << 32;
  uint64_t i = 0;
  auto body = [&] {
    void* p = reinterpret_cast<void*>(kBase + (i++ & 1023) * 4096);
    if (AllocFn f = alloc) f(p, 4096, 0, nullptr, 0);
    if (FreeFn f = release) f(p, 0, nullptr);
  };
  for (auto _ : state) AtDepth(depth, body);
  state.SetItemsProcessed(state.iterations() * 2);
}

// Depth 30 is the workload tests/bench/README.md compares with heaptrack; 64 fills a 64-frame
// stack; 0 and 64 say whether the hook's cost depends on the caller's depth.
BENCHMARK_CAPTURE(BM_MallocFree, direct, true)->Arg(0)->Arg(30)->Arg(64);
BENCHMARK_CAPTURE(BM_MallocFree, intercepted, false)->Arg(0)->Arg(30)->Arg(64);
BENCHMARK(BM_MallocFreePaired)->Arg(30)->Arg(64);
BENCHMARK_CAPTURE(BM_MallocFreeAsync, direct, true)->Arg(30);
BENCHMARK_CAPTURE(BM_MallocFreeAsync, intercepted, false)->Arg(30);
BENCHMARK_CAPTURE(BM_MemMapUnmap, direct, true)->Arg(30);
BENCHMARK_CAPTURE(BM_BlockAllocFree, direct, true)->Arg(30);
BENCHMARK_CAPTURE(BM_BlockAllocFree, intercepted, false)->Arg(30);
BENCHMARK_CAPTURE(BM_MemMapUnmap, intercepted, false)->Arg(30);

}  // namespace
}  // namespace fragscope::bench

int main(int argc, char** argv) {
  using namespace fragscope::bench;
  if (!SingleThreaded()) StartDriverHelperThread();
  SetUpDirect();
  SetUpIntercepted();
  benchmark::AddCustomContext("intercepted_cudaMalloc",
                              DefiningObject(reinterpret_cast<void*>(g_intercepted.malloc)));
  benchmark::AddCustomContext("direct_cudaMalloc",
                              DefiningObject(reinterpret_cast<void*>(g_direct.malloc)));
  // Mode "passthrough" (passthrough_interposer.cc): its driver-layer hooks must really be in
  // the path, or the row would time the runtime layer alone.
  using WrappedFn = int (*)();
  if (auto wrapped = reinterpret_cast<WrappedFn>(
          RealDlsym()(RTLD_DEFAULT, "fragscope_bench_passthrough_wrapped"))) {
    if (wrapped() < 4) Die("passthrough", "the runtime's driver calls bypass the library");
    benchmark::AddCustomContext("passthrough_wrapped_lookups", std::to_string(wrapped()));
  }
  benchmark::AddCustomContext("process", SingleThreaded()
                                             ? "single-threaded (but for the agent's threads)"
                                             : "multi-threaded, both namespaces");
  for (const char* var : {"LD_PRELOAD", "FRAGSCOPE_DORMANT", "FRAGSCOPE_STACK_DEPTH",
                          "FRAGSCOPE_OUTPUT", "FAKECUDA_NULL"}) {
    const char* value = std::getenv(var);
    benchmark::AddCustomContext(var, value != nullptr ? value : "");
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
