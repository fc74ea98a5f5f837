// A program using the driver API only (libcuda.so.1 opened with dlopen, never linked), one
// scenario per run: `driver_app SCENARIO`. It prints one line per memory operation
// ("<what> <address> <size> <result>") so a test can compare the trace with what happened.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "driver_api.h"

using fragscope::agent_test::InitPrimaryContext;
using fragscope::agent_test::OpenLibcuda;
using fragscope::agent_test::Sym;

namespace {

void Print(const char* what, unsigned long long address, unsigned long long size, int result) {
  std::printf("%s 0x%llx %llu %d\n", what, address, size, result);
}

// Plain allocations through dlsym on the libcuda handle, both ABIs.
int Dlsym(void* lib) {
  InitPrimaryContext(lib);
  auto alloc_v2 = Sym<PFN_cuMemAlloc_v3020>(lib, "cuMemAlloc_v2");
  auto free_v2 = Sym<PFN_cuMemFree_v3020>(lib, "cuMemFree_v2");
  using LegacyAlloc = CUresult (*)(unsigned int*, unsigned int);
  using LegacyFree = CUresult (*)(unsigned int);
  auto alloc_v1 = Sym<LegacyAlloc>(lib, "cuMemAlloc");
  auto free_v1 = Sym<LegacyFree>(lib, "cuMemFree");
  CUdeviceptr a = 0;
  CUresult r = alloc_v2(&a, 1 << 20);
  Print("cuMemAlloc_v2", a, 1 << 20, r);
  unsigned int b = 0;
  r = alloc_v1(&b, 4096);
  Print("cuMemAlloc", b, 4096, r);
  r = free_v1(b);
  Print("cuMemFree", b, 0, r);
  r = free_v2(a);
  Print("cuMemFree_v2", a, 0, r);
  r = free_v2(a);  // double free: an error, recorded as a failed FreeEvent
  Print("cuMemFree_v2", a, 0, r);
  return 0;
}

// cuGetProcAddress as libcudart 13 uses it: dlsym cuGetProcAddress_v2, self-lookup, then
// lookups by base name and version.
int GetProcAddress(void* lib) {
  InitPrimaryContext(lib);
  auto gpa0 = Sym<PFN_cuGetProcAddress_v12000>(lib, "cuGetProcAddress_v2");
  void* p = nullptr;
  CUdriverProcAddressQueryResult status;
  if (gpa0("cuGetProcAddress", &p, 12000, 0, &status) != CUDA_SUCCESS) return 3;
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(p);
  auto lookup = [&](const char* name, int version, cuuint64_t flags) {
    void* fn = nullptr;
    if (gpa(name, &fn, version, flags, &status) != CUDA_SUCCESS || fn == nullptr) {
      std::fprintf(stderr, "lookup %s@%d failed\n", name, version);
      std::exit(3);
    }
    return fn;
  };
  auto alloc_v2 = reinterpret_cast<PFN_cuMemAlloc_v3020>(lookup("cuMemAlloc", 3020, 0));
  auto free_v2 = reinterpret_cast<PFN_cuMemFree_v3020>(lookup("cuMemFree", 3020, 0));
  using LegacyAlloc = CUresult (*)(unsigned int*, unsigned int);
  using LegacyFree = CUresult (*)(unsigned int);
  auto alloc_v1 = reinterpret_cast<LegacyAlloc>(lookup("cuMemAlloc", 2000, 0));
  auto free_v1 = reinterpret_cast<LegacyFree>(lookup("cuMemFree", 2000, 0));
  auto alloc_async =
      reinterpret_cast<PFN_cuMemAllocAsync_v11020>(lookup("cuMemAllocAsync", 11020, 0));
  auto alloc_async_ptsz = reinterpret_cast<PFN_cuMemAllocAsync_v11020_ptsz>(
      lookup("cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  auto free_async = reinterpret_cast<PFN_cuMemFreeAsync_v11020>(lookup("cuMemFreeAsync", 11020, 0));
  auto sync =
      reinterpret_cast<PFN_cuStreamSynchronize_v2000>(lookup("cuStreamSynchronize", 2000, 0));
  CUdeviceptr a = 0;
  Print("cuMemAlloc_v2", a, 3 << 20, alloc_v2(&a, 3 << 20));
  std::printf("addr 0x%llx\n", static_cast<unsigned long long>(a));
  unsigned int b = 0;
  CUresult r = alloc_v1(&b, 8192);
  Print("cuMemAlloc", b, 8192, r);
  CUdeviceptr c = 0, d = 0;
  r = alloc_async(&c, 65536, nullptr);
  Print("cuMemAllocAsync", c, 65536, r);
  r = alloc_async_ptsz(&d, 1024, nullptr);
  Print("cuMemAllocAsync_ptsz", d, 1024, r);
  Print("cuMemFreeAsync", c, 0, free_async(c, nullptr));
  Print("cuMemFreeAsync", d, 0, free_async(d, nullptr));
  sync(nullptr);
  Print("cuMemFree", b, 0, free_v1(b));
  Print("cuMemFree_v2", a, 0, free_v2(a));
  return 0;
}

// Virtual memory management as PyTorch's expandable segments use it.
int Vmm(void* lib) {
  InitPrimaryContext(lib);
  auto reserve = Sym<PFN_cuMemAddressReserve_v10020>(lib, "cuMemAddressReserve");
  auto address_free = Sym<PFN_cuMemAddressFree_v10020>(lib, "cuMemAddressFree");
  auto create = Sym<PFN_cuMemCreate_v10020>(lib, "cuMemCreate");
  auto release = Sym<PFN_cuMemRelease_v10020>(lib, "cuMemRelease");
  auto map = Sym<PFN_cuMemMap_v10020>(lib, "cuMemMap");
  auto unmap = Sym<PFN_cuMemUnmap_v10020>(lib, "cuMemUnmap");
  auto retain = Sym<PFN_cuMemRetainAllocationHandle_v11000>(lib, "cuMemRetainAllocationHandle");
  const size_t page = 2 << 20;
  CUdeviceptr va = 0;
  CUresult r = reserve(&va, 8 * page, 0, 0, 0);
  Print("reserve", va, 8 * page, r);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h1 = 0, h2 = 0, h3 = 0;
  r = create(&h1, page, &prop, 0);
  Print("create", h1, page, r);
  r = create(&h2, 2 * page, &prop, 0);
  Print("create", h2, 2 * page, r);
  Print("map", va, page, map(va, page, 0, h1, 0));
  Print("map", va + page, 2 * page, map(va + page, 2 * page, 0, h2, 0));
  r = retain(&h3, reinterpret_cast<void*>(va + page));
  Print("retain", h3, 0, r);
  Print("release", h3, 0, release(h3));
  Print("release", h1, 0, release(h1));  // still mapped: memory stays until unmapped
  Print("unmap", va, page, unmap(va, page));
  Print("unmap", va + page, 2 * page, unmap(va + page, 2 * page));
  Print("release", h2, 0, release(h2));
  Print("free_range", va, 8 * page, address_free(va, 8 * page));
  return 0;
}

// Managed and pitched memory, and a pool with a trim.
int ManagedPitchPool(void* lib) {
  InitPrimaryContext(lib);
  auto managed = Sym<PFN_cuMemAllocManaged_v6000>(lib, "cuMemAllocManaged");
  auto pitch = Sym<PFN_cuMemAllocPitch_v3020>(lib, "cuMemAllocPitch_v2");
  auto free_v2 = Sym<PFN_cuMemFree_v3020>(lib, "cuMemFree_v2");
  auto pool_create = Sym<PFN_cuMemPoolCreate_v11020>(lib, "cuMemPoolCreate");
  auto from_pool = Sym<PFN_cuMemAllocFromPoolAsync_v11020>(lib, "cuMemAllocFromPoolAsync");
  auto free_async = Sym<PFN_cuMemFreeAsync_v11020>(lib, "cuMemFreeAsync");
  auto trim = Sym<PFN_cuMemPoolTrimTo_v11020>(lib, "cuMemPoolTrimTo");
  auto sync = Sym<PFN_cuStreamSynchronize_v2000>(lib, "cuStreamSynchronize");
  CUdeviceptr m = 0, p = 0, q = 0;
  CUresult r = managed(&m, 12345, CU_MEM_ATTACH_GLOBAL);
  Print("managed", m, 12345, r);
  size_t row_pitch = 0;
  r = pitch(&p, &row_pitch, 1000, 64, 4);
  Print("pitch", p, row_pitch * 64, r);
  std::printf("row_pitch %zu\n", row_pitch);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  if (pool_create(&pool, &props) != CUDA_SUCCESS) return 3;
  std::printf("pool 0x%llx\n", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(pool)));
  r = from_pool(&q, 777, pool, nullptr);
  Print("from_pool", q, 777, r);
  Print("free_async", q, 0, free_async(q, nullptr));
  sync(nullptr);
  Print("trim", 0, 0, trim(pool, 0));
  Print("free", m, 0, free_v2(m));
  Print("free", p, 0, free_v2(p));
  return 0;
}

// A driver allocation that cannot fit (run with a small FAKECUDA_CAPACITY).
int Fail(void* lib) {
  InitPrimaryContext(lib);
  auto alloc_v2 = Sym<PFN_cuMemAlloc_v3020>(lib, "cuMemAlloc_v2");
  CUdeviceptr a = 0;
  errno = 1234;  // an errno the hook must leave alone
  CUresult r = alloc_v2(&a, 1ull << 40);
  int errno_after = errno;
  Print("cuMemAlloc_v2", a, 1ull << 40, r);
  std::printf("errno %d\n", errno_after);
  return 0;
}

// A failure, then an abrupt exit (no atexit handlers, no destructors, not even the agent's
// _exit wrapper: the exit system call itself, as a kill would end it): the failure must already
// be in the trace, shipped before the failing call returned.
int FailThenExit(void* lib) {
  InitPrimaryContext(lib);
  auto alloc_v2 = Sym<PFN_cuMemAlloc_v3020>(lib, "cuMemAlloc_v2");
  CUdeviceptr a = 0;
  CUresult r = alloc_v2(&a, 1ull << 40);
  std::printf("cuMemAlloc_v2 %d\n", r);
  std::fflush(stdout);
  syscall(SYS_exit_group, 0);
  return 1;
}

// A program that itself calls dlsym(RTLD_NEXT, ...): RTLD_NEXT must still mean "after this
// program", whatever library is preloaded.
int RtldNext() {
  void* next_malloc = dlsym(RTLD_NEXT, "malloc");
  void* libc_malloc = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  dladdr(next_malloc, &info);
  std::printf("next_malloc %s\n", next_malloc != nullptr ? "found" : "missing");
  std::printf("same_as_default %d\n", next_malloc == libc_malloc ? 1 : 0);
  std::printf("module %s\n", info.dli_fname != nullptr ? info.dli_fname : "?");
  // A symbol only the agent could provide if RTLD_NEXT were computed from the wrong caller.
  std::printf("next_dlsym_is_libc %d\n", dlsym(RTLD_NEXT, "dlsym") != nullptr ? 1 : 0);
  std::printf("missing %s\n",
              dlsym(RTLD_NEXT, "no_such_symbol_anywhere") == nullptr ? "null" : "found");
  std::printf("dlerror %s\n", dlerror() != nullptr ? "set" : "clear");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: driver_app SCENARIO\n");
    return 2;
  }
  std::string scenario = argv[1];
  if (scenario == "rtld_next") return RtldNext();
  void* lib = OpenLibcuda();
  if (scenario == "dlsym") return Dlsym(lib);
  if (scenario == "getprocaddress") return GetProcAddress(lib);
  if (scenario == "vmm") return Vmm(lib);
  if (scenario == "managed_pitch_pool") return ManagedPitchPool(lib);
  if (scenario == "fail") return Fail(lib);
  if (scenario == "fail_then_exit") return FailThenExit(lib);
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  return 2;
}
