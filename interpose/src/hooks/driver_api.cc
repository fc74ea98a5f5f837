#include "hooks/driver_api.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>

#include "recording/recorder.h"

namespace fragscope::agent {

// The dlsym trampoline (dlsym_trampoline_*.S) jumps through this; set before its first use.
extern "C" {
__attribute__((visibility("hidden"))) DlsymFn fragscope_real_dlsym = nullptr;
}

namespace {

constinit std::atomic<void*> g_libcuda_handle{nullptr};
constinit std::atomic<uintptr_t> g_libcuda_begin{0};
constinit std::atomic<uintptr_t> g_libcuda_end{0};
constinit std::atomic<int> g_driver_state{0};  // 0 unresolved, 1 resolving, 2 resolved
constinit std::atomic<int> g_driver_attempts{0};
constinit DriverCalls g_driver;           // written once, before g_driver_state becomes 2
constinit const DriverCalls kNoDriver{};  // handed out until then

bool IsLibcudaName(const char* path) {
  if (path == nullptr) return false;
  const char* base = strrchr(path, '/');
  base = base != nullptr ? base + 1 : path;
  return strncmp(base, "libcuda.so", 10) == 0;
}

// Records the span of libcuda's PT_LOAD segments.
void LearnLibcudaRange(const link_map* map) {
  struct Search {
    ElfW(Addr) base;
    uintptr_t begin = ~uintptr_t{0};
    uintptr_t end = 0;
  } search{map->l_addr};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_addr != s->base || !IsLibcudaName(info->dlpi_name)) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          uintptr_t b = info->dlpi_addr + ph.p_vaddr;
          if (b < s->begin) s->begin = b;
          if (b + ph.p_memsz > s->end) s->end = b + ph.p_memsz;
        }
        return 1;
      },
      &search);
  if (search.end > search.begin) {
    g_libcuda_begin.store(search.begin, std::memory_order_relaxed);
    g_libcuda_end.store(search.end, std::memory_order_release);
  }
}

void Remember(void* handle) {
  void* expected = nullptr;
  if (g_libcuda_handle.compare_exchange_strong(expected, handle)) {
    link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr) {
      LearnLibcudaRange(map);
      // One reference of our own keeps libcuda mapped: the agent caches pointers into it, and a
      // program's dlclose must not leave them dangling.
      dlopen(map->l_name, RTLD_NOLOAD | RTLD_LAZY);
    }
  }
}

template <typename Fn>
void Resolve(void* lib, Fn* out, const char* name, const char* fallback = nullptr) {
  void* p = RealDlsym()(lib, name);
  if (p == nullptr && fallback != nullptr) p = RealDlsym()(lib, fallback);
  *out = reinterpret_cast<Fn>(p);
}

}  // namespace

DlsymFn RealDlsym() {
  DlsymFn fn = __atomic_load_n(&fragscope_real_dlsym, __ATOMIC_ACQUIRE);
  if (fn != nullptr) return fn;
#if defined(__x86_64__)
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
#elif defined(__aarch64__)
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
#else
  void* p = nullptr;
#endif
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  fn = reinterpret_cast<DlsymFn>(p);
  __atomic_store_n(&fragscope_real_dlsym, fn, __ATOMIC_RELEASE);
  return fn;
}

void* LibcudaHandle() {
  void* handle = g_libcuda_handle.load(std::memory_order_acquire);
  if (handle != nullptr) return handle;
  // RTLD_NOLOAD: only if the program already loaded it; the agent never loads CUDA itself.
  handle = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (handle != nullptr) Remember(handle);  // keeps the reference (see Remember)
  return g_libcuda_handle.load(std::memory_order_acquire);
}

bool IsLibcudaHandle(void* handle) {
  if (handle == nullptr || handle == RTLD_NEXT) return false;
  if (handle == g_libcuda_handle.load(std::memory_order_acquire)) return true;
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return false;
  if (!IsLibcudaName(map->l_name)) return false;
  Remember(handle);
  return true;
}

bool AddressInLibcuda(const void* address) {
  uintptr_t a = reinterpret_cast<uintptr_t>(address);
  uintptr_t end = g_libcuda_end.load(std::memory_order_acquire);
  if (end != 0) return a >= g_libcuda_begin.load(std::memory_order_relaxed) && a < end;
  Dl_info info;
  return dladdr(address, &info) != 0 && IsLibcudaName(info.dli_fname);
}

const DriverCalls& Driver() {
  if (g_driver_state.load(std::memory_order_acquire) == 2) return g_driver;
  // A few attempts only: without libcuda loaded there is nothing to find, and trying costs a
  // dlopen each time.
  if (g_driver_attempts.load(std::memory_order_relaxed) > 16) return kNoDriver;
  g_driver_attempts.fetch_add(1, std::memory_order_relaxed);
  int expected = 0;
  if (!g_driver_state.compare_exchange_strong(expected, 1)) return kNoDriver;
  void* lib = LibcudaHandle();
  if (lib == nullptr) {
    g_driver_state.store(0, std::memory_order_release);
    return kNoDriver;
  }
  DriverCalls d;
  Resolve(lib, &d.ctx_get_device, "cuCtxGetDevice");
  Resolve(lib, &d.mem_get_info, "cuMemGetInfo_v2");
  Resolve(lib, &d.device_get_uuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
  Resolve(lib, &d.device_total_mem, "cuDeviceTotalMem_v2");
  Resolve(lib, &d.device_get_name, "cuDeviceGetName");
  Resolve(lib, &d.mem_pool_get_attribute, "cuMemPoolGetAttribute");
  Resolve(lib, &d.device_get_mem_pool, "cuDeviceGetMemPool");
  Resolve(lib, &d.mem_get_address_range, "cuMemGetAddressRange_v2");
  Resolve(lib, &d.stream_is_capturing, "cuStreamIsCapturing");
  Resolve(lib, &d.pointer_get_attribute, "cuPointerGetAttribute");
  Resolve(lib, &d.device_get, "cuDeviceGet");
  Resolve(lib, &d.primary_ctx_get_state, "cuDevicePrimaryCtxGetState");
  Resolve(lib, &d.primary_ctx_release, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
  Resolve(lib, &d.ctx_set_current, "cuCtxSetCurrent");
  g_driver = d;
  g_driver_state.store(2, std::memory_order_release);
  return g_driver;
}

bool StreamCapturing(CUstream stream, bool per_thread_default) {
  if (stream == CU_STREAM_LEGACY || (stream == nullptr && !per_thread_default)) return false;
  if (stream == nullptr) stream = CU_STREAM_PER_THREAD;
  if (!AgentMayCallDriver()) return false;  // a signal handler over agent code (recorder.h)
  const DriverCalls& d = Driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return d.stream_is_capturing != nullptr &&
         d.stream_is_capturing(stream, &status) == CUDA_SUCCESS &&
         status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

namespace {

// cuPointerGetAttribute of `address` into *out; false (and *out untouched) if unavailable.
bool PointerAttribute(CUpointer_attribute attribute, uint64_t address, void* out) {
  if (!AgentMayCallDriver()) return false;  // a signal handler over agent code (recorder.h)
  const DriverCalls& d = Driver();
  return d.pointer_get_attribute != nullptr &&
         d.pointer_get_attribute(out, attribute, static_cast<CUdeviceptr>(address)) == CUDA_SUCCESS;
}

}  // namespace

int32_t DeviceOfAllocation(uint64_t address) {
  int ordinal = -1;
  return PointerAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address, &ordinal) ? ordinal : -1;
}

uint64_t PoolOfAllocation(uint64_t address) {
  CUmemoryPool pool = nullptr;
  return PointerAttribute(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, address, &pool)
             ? reinterpret_cast<uint64_t>(pool)
             : 0;
}

uint64_t DeviceCurrentPool(int device) {
  if (!AgentMayCallDriver()) return 0;  // a signal handler over agent code (recorder.h)
  const DriverCalls& d = Driver();
  CUmemoryPool pool = nullptr;
  if (device < 0 || d.device_get_mem_pool == nullptr ||
      d.device_get_mem_pool(&pool, device) != CUDA_SUCCESS) {
    return 0;
  }
  return reinterpret_cast<uint64_t>(pool);
}

}  // namespace fragscope::agent
