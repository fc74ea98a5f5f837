// The few real driver functions the agent itself calls from hooks (never our wrappers, never
// runtime functions: those would change what the app's cudaGetLastError returns), the real
// libc dlsym, and how the agent recognizes libcuda.
//
// Thread safety: all functions are thread-safe; resolution happens once, lazily.
#ifndef FRAGSCOPE_INTERPOSE_DRIVER_API_H_
#define FRAGSCOPE_INTERPOSE_DRIVER_API_H_

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>

namespace fragscope::agent {

using DlsymFn = void* (*)(void*, const char*);

// libc's dlsym (dlvsym(RTLD_NEXT, "dlsym", GLIBC_2.2.5 / GLIBC_2.17)). Resolved on first use.
DlsymFn RealDlsym();

// The definition of `name` after the agent's own (the libc function an interposed one wraps:
// sigaction, execve, _exit), looked up with RealDlsym on first use and kept in `cache`.
// nullptr if there is none.
template <typename Fn>
Fn NextDefinition(std::atomic<Fn>& cache, const char* name) {
  Fn f = cache.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<Fn>(RealDlsym()(RTLD_NEXT, name));
    cache.store(f, std::memory_order_release);
  }
  return f;
}

// A handle of the loaded libcuda: the one the program looked symbols up in, else
// dlopen("libcuda.so.1", RTLD_NOLOAD). nullptr while libcuda is not loaded.
void* LibcudaHandle();
// True if `handle` (from dlopen) is libcuda's; remembers it.
bool IsLibcudaHandle(void* handle);
// True if `address` lies in libcuda's mapped image (a lookup made by libcuda itself).
bool AddressInLibcuda(const void* address);

struct DriverCalls {
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  CUresult (*device_get_uuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*device_total_mem)(size_t*, CUdevice) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*mem_pool_get_attribute)(CUmemoryPool, CUmemPool_attribute, void*) = nullptr;
  CUresult (*device_get_mem_pool)(CUmemoryPool*, CUdevice) = nullptr;
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  // For the injected import's helper thread, which has no context (python_state.cc).
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned int*, int*) = nullptr;
  CUresult (*primary_ctx_release)(CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
};

// The driver functions above, resolved from libcuda on first call after it is loaded; any may
// be null (an old or fake driver without it). Never null itself.
const DriverCalls& Driver();

// True if `stream` is capturing (its stream-ordered allocations are graph memory).
// `per_thread_default`: the call came through a _ptsz entry point, where stream 0 is the
// per-thread default stream rather than the legacy one. The legacy default stream cannot be
// captured (cuStreamBeginCapture refuses it, and asking about it during another stream's
// capture is an error), so for it the answer is false without asking the driver: a dormant
// cudaMallocAsync on the default stream, PyTorch's usual one, makes no driver call.
bool StreamCapturing(CUstream stream, bool per_thread_default);
// The current memory pool of `device` (where cudaMallocAsync/cuMemAllocAsync allocate), 0 if
// unknown.
uint64_t DeviceCurrentPool(int device);
// The device a live allocation is on, -1 if the driver cannot say
// (cuPointerGetAttribute, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL).
int32_t DeviceOfAllocation(uint64_t address);
// The memory pool a live stream-ordered allocation came from, 0 if the driver cannot say
// (CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE).
uint64_t PoolOfAllocation(uint64_t address);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_DRIVER_API_H_
