// A program using the CUDA runtime (libcudart.so.13 linked shared: the fake one, or NVIDIA's
// when the tests put it first on the library path), one scenario per
// run: `runtime_app SCENARIO`. Prints one line per memory operation
// ("<what> <address> <size> <result>") and a few facts the tests compare with the trace.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fragscope/annotate.h"

namespace {

void Print(const char* what, const void* address, unsigned long long size, int result) {
  std::printf("%s %p %llu %d\n", what, address, size, result);
  std::fflush(stdout);
}

int Malloc() {
  void* a = nullptr;
  void* b = nullptr;
  cudaError_t r = cudaMalloc(&a, 1 << 20);
  Print("cudaMalloc", a, 1 << 20, r);
  r = cudaMalloc(&b, 300);
  Print("cudaMalloc", b, 300, r);
  Print("cudaFree", b, 0, cudaFree(b));
  Print("cudaFree", nullptr, 0, cudaFree(nullptr));  // not an event: only initializes
  Print("cudaFree", a, 0, cudaFree(a));
  return 0;
}

// A driver function through the runtime (cudaGetDriverEntryPointByVersion), as PyTorch gets its
// VMM functions; exits 3 when the runtime cannot give it.
void* DriverEntry(const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status;
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status) !=
          cudaSuccess ||
      fn == nullptr) {
    std::fprintf(stderr, "entry point %s failed\n", name);
    std::exit(3);
  }
  return fn;
}

// A pool of pinned device memory on device 0; nullptr when the runtime refuses.
cudaMemPool_t NewPinnedPool() {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  return cudaMemPoolCreate(&pool, &props) == cudaSuccess ? pool : nullptr;
}

std::atomic<int> g_usr1{0};
void OnUsr1(int) { g_usr1.fetch_add(1); }

// The program's signal handler survives a vfork child that resets its signals before exec, as
// Python's subprocess module does (the child shares the parent's memory until it execs).
int VforkSignals() {
  struct sigaction on_usr1 = {};
  on_usr1.sa_handler = OnUsr1;
  sigemptyset(&on_usr1.sa_mask);
  if (sigaction(SIGUSR1, &on_usr1, nullptr) != 0) return 3;
  void* a = nullptr;
  Print("cudaMalloc", a, 4096, cudaMalloc(&a, 4096));
  const pid_t child = vfork();
  if (child == 0) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGUSR1, &dfl, nullptr);
    signal(SIGUSR2, SIG_DFL);
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  if (child < 0) return 3;
  int status = 0;
  waitpid(child, &status, 0);
  raise(SIGUSR1);  // the default action would end the program here
  struct sigaction now = {};
  sigaction(SIGUSR1, nullptr, &now);
  std::printf("handled %d, handler is the program's: %s\n", g_usr1.load(),
              now.sa_handler == OnUsr1 ? "yes" : "no");
  Print("cudaFree", a, 0, cudaFree(a));
  return 0;
}

// A cudaFree the runtime refuses (a global graph capture is in progress: the memory stays
// allocated), then the same free once the capture has ended.
int RefusedFree() {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 3;
  void* a = nullptr;
  cudaError_t r = cudaMalloc(&a, 1 << 20);
  Print("cudaMalloc", a, 1 << 20, r);
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return 3;
  Print("cudaFree", a, 0, cudaFree(a));
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);  // may report the capture invalidated: not our point
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  Print("cudaFree", a, 0, cudaFree(a));
  return 0;
}

// Per-thread default stream entry point, as `nvcc --default-stream per-thread` maps
// cudaMallocAsync to (declared here: the header declares it only for such builds).
extern "C" cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream);

// Stream-ordered allocations inside and outside graph captures: on the legacy default stream
// (never capturable), on a capturing stream, and on the per-thread default stream (stream 0 of
// the _ptsz entry point) while it captures.
int Capture() {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 3;
  void* legacy = nullptr;
  Print("cudaMallocAsync", legacy, 1000, cudaMallocAsync(&legacy, 1000, nullptr));
  cudaStreamSynchronize(nullptr);
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) return 4;
  void* captured = nullptr;
  Print("cudaMallocAsync", captured, 2000, cudaMallocAsync(&captured, 2000, stream));
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) return 5;
  if (cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    return 6;
  }
  void* per_thread = nullptr;
  Print("cudaMallocAsync_ptsz", per_thread, 3000, cudaMallocAsync_ptsz(&per_thread, 3000, nullptr));
  cudaGraph_t graph2 = nullptr;
  if (cudaStreamEndCapture(cudaStreamPerThread, &graph2) != cudaSuccess) return 7;
  return 0;
}

int Families() {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 3;
  std::printf("stream %p\n", static_cast<void*>(stream));
  void* async = nullptr;
  cudaError_t r = cudaMallocAsync(&async, 5000, stream);
  Print("cudaMallocAsync", async, 5000, r);
  Print("cudaFreeAsync", async, 0, cudaFreeAsync(async, stream));
  cudaStreamSynchronize(stream);
  void* pitched = nullptr;
  size_t pitch = 0;
  r = cudaMallocPitch(&pitched, &pitch, 1000, 10);
  Print("cudaMallocPitch", pitched, pitch * 10, r);
  std::printf("pitch %zu\n", pitch);
  cudaPitchedPtr p3{};
  cudaExtent extent{};
  extent.width = 300;
  extent.height = 4;
  extent.depth = 5;
  r = cudaMalloc3D(&p3, extent);
  Print("cudaMalloc3D", p3.ptr, p3.pitch * 4 * 5, r);
  std::printf("pitch3d %zu\n", p3.pitch);
  void* managed = nullptr;
  r = cudaMallocManaged(&managed, 4321, cudaMemAttachGlobal);
  Print("cudaMallocManaged", managed, 4321, r);
  cudaMemPool_t pool = NewPinnedPool();
  if (pool == nullptr) return 3;
  std::printf("pool %p\n", static_cast<void*>(pool));
  void* from_pool = nullptr;
  r = cudaMallocFromPoolAsync(&from_pool, 999, pool, stream);
  Print("cudaMallocFromPoolAsync", from_pool, 999, r);
  Print("cudaFreeAsync", from_pool, 0, cudaFreeAsync(from_pool, stream));
  cudaStreamSynchronize(stream);
  Print("cudaMemPoolTrimTo", nullptr, 0, cudaMemPoolTrimTo(pool, 0));
  Print("cudaFree", pitched, 0, cudaFree(pitched));
  Print("cudaFree", p3.ptr, 0, cudaFree(p3.ptr));
  Print("cudaFree", managed, 0, cudaFree(managed));
  cudaMemPoolDestroy(pool);
  cudaStreamDestroy(stream);
  return 0;
}

// Driver functions obtained through the runtime, as PyTorch gets its VMM functions.
int EntryPoint() {
  cudaFree(nullptr);  // initialize the runtime
  cudaDriverEntryPointQueryResult status;
  auto reserve =
      reinterpret_cast<PFN_cuMemAddressReserve_v10020>(DriverEntry("cuMemAddressReserve", 12000));
  auto create = reinterpret_cast<PFN_cuMemCreate_v10020>(DriverEntry("cuMemCreate", 12000));
  auto map = reinterpret_cast<PFN_cuMemMap_v10020>(DriverEntry("cuMemMap", 12000));
  auto unmap = reinterpret_cast<PFN_cuMemUnmap_v10020>(DriverEntry("cuMemUnmap", 12000));
  auto release = reinterpret_cast<PFN_cuMemRelease_v10020>(DriverEntry("cuMemRelease", 12000));
  auto address_free =
      reinterpret_cast<PFN_cuMemAddressFree_v10020>(DriverEntry("cuMemAddressFree", 12000));
  auto alloc_legacy =
      reinterpret_cast<CUresult (*)(unsigned int*, unsigned int)>(DriverEntry("cuMemAlloc", 2000));
  auto free_legacy = reinterpret_cast<CUresult (*)(unsigned int)>(DriverEntry("cuMemFree", 2000));
  void* plain = nullptr;
  // Deprecated, still used by older libraries: the runtime's own CUDA version decides the ABI.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  if (cudaGetDriverEntryPoint("cuMemAlloc", &plain, cudaEnableDefault, &status) != cudaSuccess) {
    return 3;
  }
#pragma GCC diagnostic pop
  auto alloc_v2 = reinterpret_cast<PFN_cuMemAlloc_v3020>(plain);
  auto free_v2 = reinterpret_cast<PFN_cuMemFree_v3020>(DriverEntry("cuMemFree", 12000));
  const size_t page = 2 << 20;
  CUdeviceptr va = 0;
  CUresult r = reserve(&va, 4 * page, 0, 0, 0);
  Print("reserve", reinterpret_cast<void*>(va), 4 * page, r);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  r = create(&h, 2 * page, &prop, 0);
  Print("create", reinterpret_cast<void*>(h), 2 * page, r);
  Print("map", reinterpret_cast<void*>(va), 2 * page, map(va, 2 * page, 0, h, 0));
  Print("unmap", reinterpret_cast<void*>(va), 2 * page, unmap(va, 2 * page));
  Print("release", reinterpret_cast<void*>(h), 0, release(h));
  Print("free_range", reinterpret_cast<void*>(va), 4 * page, address_free(va, 4 * page));
  unsigned int small = 0;
  r = alloc_legacy(&small, 512);
  Print("cuMemAlloc", reinterpret_cast<void*>(uintptr_t{small}), 512, r);
  Print("cuMemFree", reinterpret_cast<void*>(uintptr_t{small}), 0, free_legacy(small));
  CUdeviceptr big = 0;
  r = alloc_v2(&big, 3 * page);
  Print("cuMemAlloc_v2", reinterpret_cast<void*>(big), 3 * page, r);
  Print("cuMemFree_v2", reinterpret_cast<void*>(big), 0, free_v2(big));
  return 0;
}

// 16 threads allocating and freeing at once.
int Threads() {
  constexpr int kThreads = 16;
  constexpr int kRounds = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, static_cast<size_t>(256 * (t + 1))) != cudaSuccess) ++failures;
        if (cudaFree(p) != cudaSuccess) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::printf("threads %d rounds %d failures %d\n", kThreads, kRounds, failures.load());
  return failures.load() == 0 ? 0 : 1;
}

// The program's error state around a failed allocation: errno and cudaGetLastError.
int ErrorState() {
  void* p = nullptr;
  errno = 4321;
  cudaError_t r = cudaMalloc(&p, size_t{1} << 50);
  int errno_after = errno;
  cudaError_t last = cudaGetLastError();
  cudaError_t last_again = cudaGetLastError();
  std::printf("result %d errno %d last %d again %d\n", r, errno_after, last, last_again);
  void* q = nullptr;
  r = cudaMalloc(&q, 100);
  std::printf("after %d last %d\n", r, cudaGetLastError());
  cudaFree(q);
  return 0;
}

// A stream-ordered allocation of `request` bytes (default 1 TiB) that fails while the default
// pool keeps a 64 MiB block freed on its stream beside a live one: the pool's own figures at
// the failure are printed for the tests to compare.
int PoolOom(size_t request) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 3;
  void* a = nullptr;
  void* b = nullptr;
  if (cudaMallocAsync(&a, 64 << 20, stream) != cudaSuccess) return 3;
  if (cudaMallocAsync(&b, 64 << 20, stream) != cudaSuccess) return 3;
  Print("cudaFreeAsync", a, 0, cudaFreeAsync(a, stream));
  void* big = nullptr;
  const cudaError_t r = cudaMallocAsync(&big, request, stream);
  Print("cudaMallocAsync", big, request, r);
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess) return 3;
  unsigned long long reserved = 0, used = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
  std::printf("pool %p reserved %llu used %llu\n", static_cast<void*>(pool), reserved, used);
  cudaFreeAsync(b, stream);
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  return 0;
}

// A sub-allocator reporting its blocks through annotate.h.
int Annotate() {
  std::printf("active %d\n", fragscope_annotate_active());
  void* segment = nullptr;
  if (cudaMalloc(&segment, 1 << 20) != cudaSuccess) return 3;
  char* base = static_cast<char*>(segment);
  fragscope_annotate_mark("step 1");
  fragscope_annotate_block_alloc(base, 4096, 0, nullptr, 7);
  fragscope_annotate_block_alloc_late(base + 4096, 8192, 0, nullptr, 7);  // read after the fact
  fragscope_annotate_block_free_pending(base, 0, nullptr);
  fragscope_annotate_block_free(base, 0, nullptr);
  fragscope_annotate_alloc_failed(size_t{1} << 30, 0, nullptr);
  fragscope_annotate_mark("step 2");
  cudaFree(segment);
  std::printf("segment %p\n", segment);
  return 0;
}

// An adapter that learns its blocks' sites after the fact (PyTorch's Python frames):
// fragscope_source_stack + fragscope_block_site.
int SourceSites() {
  void* segment = nullptr;
  if (cudaMalloc(&segment, 1 << 20) != cudaSuccess) return 3;
  char* base = static_cast<char*>(segment);
  fragscope_annotate_block_alloc(base, 4096, 0, nullptr, 0);
  fragscope_annotate_block_alloc(base + 8192, 4096, 0, nullptr, 0);
  const fragscope_source_frame step[] = {{"forward", "model.py", 42}, {"<module>", "train.py", 7}};
  const fragscope_source_frame other[] = {{"backward", "model.py", 99}, {nullptr, nullptr, 0}};
  const uint64_t a = fragscope_annotate_source_stack(step, 2);
  const uint64_t again = fragscope_annotate_source_stack(step, 2);
  const uint64_t b = fragscope_annotate_source_stack(other, 2);
  std::printf("sites %llu %llu %llu\n", static_cast<unsigned long long>(a),
              static_cast<unsigned long long>(again), static_cast<unsigned long long>(b));
  fragscope_annotate_block_site(base, 0, a);
  fragscope_annotate_block_site(base + 8192, 0, b);
  fragscope_annotate_block_site(base + 4096, 0, a);  // no block there: the collector's to ignore
  fragscope_annotate_alloc_failed(size_t{1} << 30, 0, nullptr);
  fragscope_annotate_alloc_failed_at(size_t{1} << 29, 0, nullptr, b);  // the request's site
  fragscope_annotate_block_free(base, 0, nullptr);
  fragscope_annotate_block_free(base + 8192, 0, nullptr);
  fragscope_annotate_freed_block_site(base + 8192, 4096, 0, a);  // learned after its free
  fragscope_annotate_freed_block_site(base, 4096, 0, 12345);     // not a source site: ignored
  cudaFree(segment);
  std::printf("segment %p\n", segment);
  return 0;
}

// Allocations left live at exit, to compare with the fake driver's own table
// (FAKECUDA_LIVE_DUMP).
int Leak() {
  void* p = nullptr;
  for (size_t size : {size_t{1} << 20, size_t{4096}, size_t{3} << 21}) cudaMalloc(&p, size);
  cudaMallocManaged(&p, 5555, cudaMemAttachGlobal);
  size_t pitch = 0;
  cudaMallocPitch(&p, &pitch, 700, 9);
  void* freed = nullptr;
  cudaMalloc(&freed, 8192);
  cudaFree(freed);
  return 0;
}

// Every allocation family in one run, for comparing runtimes: plain, stream-ordered (default
// and created pool), managed, pitched, 3D, pinned host memory, VMM through a driver entry
// point, a memory-info query, then cudaDeviceReset (NVIDIA's runtime tears down its context
// state through the driver's context-local storage), allocations after it, and one allocation
// left live at exit.
int Parity() {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 3;
  void* plain = nullptr;
  {
    cudaError_t r = cudaMalloc(&plain, 1 << 20);
    Print("cudaMalloc", plain, 1 << 20, r);
  }
  void* async = nullptr;
  {
    cudaError_t r = cudaMallocAsync(&async, 5000, stream);
    Print("cudaMallocAsync", async, 5000, r);
  }
  Print("cudaFreeAsync", async, 0, cudaFreeAsync(async, stream));
  cudaMemPool_t pool = NewPinnedPool();
  if (pool == nullptr) return 3;
  void* pooled = nullptr;
  {
    cudaError_t r = cudaMallocFromPoolAsync(&pooled, 999, pool, stream);
    Print("cudaMallocFromPoolAsync", pooled, 999, r);
  }
  Print("cudaFreeAsync", pooled, 0, cudaFreeAsync(pooled, stream));
  cudaStreamSynchronize(stream);
  Print("cudaMemPoolTrimTo", nullptr, 0, cudaMemPoolTrimTo(pool, 0));
  void* managed = nullptr;
  {
    cudaError_t r = cudaMallocManaged(&managed, 4321, cudaMemAttachGlobal);
    Print("cudaMallocManaged", managed, 4321, r);
  }
  void* pitched = nullptr;
  size_t pitch = 0;
  {
    cudaError_t r = cudaMallocPitch(&pitched, &pitch, 1000, 10);
    Print("cudaMallocPitch", pitched, 0, r);
  }
  cudaPitchedPtr p3{};
  {
    cudaError_t r = cudaMalloc3D(&p3, cudaExtent{300, 4, 5});
    Print("cudaMalloc3D", p3.ptr, 0, r);
  }
  void* host = nullptr;
  {
    cudaError_t r = cudaMallocHost(&host, 8192);
    Print("cudaMallocHost", host, 8192, r);
  }
  void* mapped_host = nullptr;
  {
    cudaError_t r = cudaHostAlloc(&mapped_host, 4096, cudaHostAllocMapped | cudaHostAllocPortable);
    Print("cudaHostAlloc", mapped_host, 4096, r);
  }
  size_t free_bytes = 0, total = 0;
  {
    cudaError_t r = cudaMemGetInfo(&free_bytes, &total);
    Print("cudaMemGetInfo", nullptr, free_bytes, r);
  }
  const size_t page = 2 << 20;
  CUdeviceptr va = 0;
  reinterpret_cast<PFN_cuMemAddressReserve_v10020>(DriverEntry("cuMemAddressReserve", 12000))(
      &va, 2 * page, 0, 0, 0);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  reinterpret_cast<PFN_cuMemCreate_v10020>(DriverEntry("cuMemCreate", 12000))(&handle, page, &prop,
                                                                              0);
  reinterpret_cast<PFN_cuMemMap_v10020>(DriverEntry("cuMemMap", 12000))(va, page, 0, handle, 0);
  reinterpret_cast<PFN_cuMemUnmap_v10020>(DriverEntry("cuMemUnmap", 12000))(va, page);
  reinterpret_cast<PFN_cuMemRelease_v10020>(DriverEntry("cuMemRelease", 12000))(handle);
  reinterpret_cast<PFN_cuMemAddressFree_v10020>(DriverEntry("cuMemAddressFree", 12000))(va,
                                                                                        2 * page);
  Print("cudaFreeHost", host, 0, cudaFreeHost(host));
  Print("cudaFreeHost", mapped_host, 0, cudaFreeHost(mapped_host));
  Print("cudaFree", pitched, 0, cudaFree(pitched));
  Print("cudaFree", p3.ptr, 0, cudaFree(p3.ptr));
  Print("cudaFree", managed, 0, cudaFree(managed));
  Print("cudaFree", plain, 0, cudaFree(plain));
  cudaMemPoolDestroy(pool);
  cudaStreamDestroy(stream);
  Print("cudaDeviceReset", nullptr, 0, cudaDeviceReset());
  void* after = nullptr;
  {
    cudaError_t r = cudaMalloc(&after, 3 << 20);
    Print("cudaMalloc", after, 3 << 20, r);
  }
  void* left = nullptr;
  {
    cudaError_t r = cudaMalloc(&left, 4096);
    Print("cudaMalloc", left, 4096, r);
  }
  Print("cudaFree", after, 0, cudaFree(after));
  return 0;  // `left` stays allocated at exit
}

// Many short-lived allocations, as fast as possible (ring pressure).
int Burst() {
  for (int i = 0; i < 50000; ++i) {
    void* p = nullptr;
    cudaMalloc(&p, 512);
    cudaFree(p);
  }
  std::printf("burst done\n");
  return 0;
}

// fork: the child allocates and exits; the parent frees after the child is gone.
int Fork() {
  void* a = nullptr;
  cudaMalloc(&a, 1 << 20);
  Print("cudaMalloc", a, 1 << 20, 0);
  pid_t pid = fork();
  if (pid == 0) {
    void* c = nullptr;
    cudaError_t r = cudaMalloc(&c, 2 << 20);
    std::printf("child %d %d\n", static_cast<int>(getpid()), r);
    std::fflush(stdout);
    if (r == cudaSuccess) cudaFree(c);
    std::exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("child_status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  Print("cudaFree", a, 0, cudaFree(a));
  return 0;
}

// fork + exec: the exec'd program (this one again, scenario "malloc") is traced on its own.
int Exec(const char* self) {
  void* a = nullptr;
  cudaMalloc(&a, 1 << 20);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, "malloc", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("exec_child %d status %d\n", static_cast<int>(pid),
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  cudaFree(a);
  return 0;
}

// An exec in place (same pid): 10 alloc/free pairs and one allocation kept, an exec that fails,
// one more pair, then this program again as "malloc".
int ExecInPlace(const char* self) {
  for (int i = 0; i < 10; ++i) {
    void* p = nullptr;
    cudaMalloc(&p, 4096 * static_cast<size_t>(i + 1));
    cudaFree(p);
  }
  void* kept = nullptr;
  cudaMalloc(&kept, 3 << 20);
  char* const missing[] = {const_cast<char*>("/nonexistent/fragscope-app"), nullptr};
  const int failed = execv(missing[0], missing);
  std::printf("failed_exec %d %d\n", failed, errno);
  void* p = nullptr;
  cudaMalloc(&p, 5000);
  cudaFree(p);
  std::printf("exec_in_place %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  char* const again[] = {const_cast<char*>(self), const_cast<char*>("malloc"), nullptr};
  execv(self, again);
  return 127;
}

// A forked child that leaves with _exit (as multiprocessing's workers do): 3 alloc/free pairs,
// then _exit(7).
int ForkExit() {
  void* a = nullptr;
  cudaMalloc(&a, 1 << 20);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 3; ++i) {
      void* c = nullptr;
      cudaMalloc(&c, 2 << 20);
      cudaFree(c);
    }
    std::printf("child %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    _exit(7);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("child_status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  cudaFree(a);
  return 0;
}

// A connection to the collector that says nothing (a process killed before its agent's first
// write), then the "malloc" scenario's events on the agent's own stream.
int ConnectOnly() {
  const char* path = std::getenv("FRAGSCOPE_SOCKET");
  if (path == nullptr) return 2;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 3;
  close(fd);
  return Malloc();
}

// glibc's other handler installers: what they return and how the handler behaves (System V
// reset on delivery, X/Open hold and release), for comparison with and without the agent.
std::atomic<int> g_caught{0};
void Caught(int) { g_caught.fetch_add(1); }

int SignalApis() {
  using InstallFn = sighandler_t (*)(int, sighandler_t);
  auto sysv = reinterpret_cast<InstallFn>(dlsym(RTLD_DEFAULT, "sysv_signal"));
  auto bsd = reinterpret_cast<InstallFn>(dlsym(RTLD_DEFAULT, "bsd_signal"));
  auto set = reinterpret_cast<InstallFn>(dlsym(RTLD_DEFAULT, "sigset"));
  if (sysv == nullptr || bsd == nullptr || set == nullptr) return 3;
  void* p = nullptr;
  cudaMalloc(&p, 4096);  // the agent is recording
  std::printf("sysv returns default %d\n", sysv(SIGUSR2, Caught) == SIG_DFL);
  raise(SIGUSR2);
  struct sigaction now {};
  sigaction(SIGUSR2, nullptr, &now);
  std::printf("sysv caught %d reset %d\n", g_caught.load(), now.sa_handler == SIG_DFL);
  std::printf("bsd returns default %d\n", bsd(SIGUSR2, Caught) == SIG_DFL);
  raise(SIGUSR2);
  raise(SIGUSR2);
  std::printf("bsd caught %d returns it %d\n", g_caught.load(), bsd(SIGUSR2, SIG_DFL) == Caught);
  std::printf("sigset returns default %d\n", set(SIGUSR1, Caught) == SIG_DFL);
  std::printf("sigset hold returns it %d\n", set(SIGUSR1, SIG_HOLD) == Caught);
  raise(SIGUSR1);  // pending while held
  std::printf("held caught %d\n", g_caught.load());
  std::printf("sigset release returns hold %d\n", set(SIGUSR1, Caught) == SIG_HOLD);
  std::printf("released caught %d\n", g_caught.load());
  std::printf("sigset bad %d\n", set(0, Caught) == SIG_ERR);
  cudaFree(p);
  return 0;
}

// CUDA calls from a static constructor and from an atexit handler (registered after the agent
// initialized) must be recorded too.
void* g_from_ctor = nullptr;
struct AllocAtStartup {
  AllocAtStartup() {
    if (std::getenv("RUNTIME_APP_STATIC_CTOR") != nullptr) cudaMalloc(&g_from_ctor, 11111);
  }
} g_alloc_at_startup;

void FreeAtExit() {
  cudaError_t freed = cudaFree(g_from_ctor);
  void* late = nullptr;
  cudaError_t allocated = cudaMalloc(&late, 22222);
  if (allocated == cudaSuccess) cudaFree(late);
  std::printf("atexit free %d malloc %d\n", freed, allocated);
}

int StaticCtorAtExit() {
  std::atexit(FreeAtExit);
  void* p = nullptr;
  cudaMalloc(&p, 33333);
  cudaFree(p);
  std::printf("ctor_alloc %p\n", g_from_ctor);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: runtime_app SCENARIO\n");
    return 2;
  }
  std::string scenario = argv[1];
  if (scenario == "malloc") return Malloc();
  if (scenario == "families") return Families();
  if (scenario == "capture") return Capture();
  if (scenario == "refused_free") return RefusedFree();
  if (scenario == "vfork_signals") return VforkSignals();
  if (scenario == "entrypoint") return EntryPoint();
  if (scenario == "threads") return Threads();
  if (scenario == "error_state") return ErrorState();
  if (scenario == "annotate") return Annotate();
  if (scenario == "source_sites") return SourceSites();
  if (scenario == "pool_oom") {
    return PoolOom(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t{1} << 40);
  }
  if (scenario == "fork") return Fork();
  if (scenario == "leak") return Leak();
  if (scenario == "parity") return Parity();
  if (scenario == "burst") return Burst();
  if (scenario == "exec") return Exec(argv[0]);
  if (scenario == "exec_in_place") return ExecInPlace(argv[0]);
  if (scenario == "fork_exit") return ForkExit();
  if (scenario == "connect_only") return ConnectOnly();
  if (scenario == "signal_apis") return SignalApis();
  if (scenario == "static_ctor_atexit") return StaticCtorAtExit();
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  return 2;
}
