// Plain device memory: cuMemAlloc family (both ABIs), free, info, copies, memsets, pinned host.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gpu_state.h"

using namespace fakecuda;

namespace {

using Lock = std::lock_guard<std::mutex>;

bool NullMode() { return GetState().null_mode.load(std::memory_order_relaxed); }

CUdeviceptr NullAddress(size_t bytes) {
  return GetState().null_next.fetch_add(RoundUp(bytes ? bytes : 1, kSmallAlignment),
                                        std::memory_order_relaxed);
}

// Shared body of every allocation entry point: argument checks, context, capture rules,
// injected failure, then the page rules.
CUresult Allocate(CUdeviceptr* dptr, size_t bytesize, fakecuda_kind kind, bool charge,
                  bool low_window) {
  State& s = GetState();
  if (NullMode() && !low_window) {
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    *dptr = NullAddress(bytesize);
    return CUDA_SUCCESS;
  }
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (UnsafeDuringCaptureLocked(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CountAllocationCallLocked(s)) return CUDA_ERROR_OUT_OF_MEMORY;
  return AllocateLocked(s, ctx, bytesize, kind, charge, low_window, dptr);
}

CUresult FreeLocked(State& s, CUdeviceptr dptr, bool* wait) {
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  // The real driver frees NULL as a no-op; cuBLAS's static runtime does so in cublasCreate.
  if (dptr == 0) return CUDA_SUCCESS;
  auto it = s.allocations.find(dptr);
  // Unknown, interior, already-freed (pending async) or imported pointers are invalid here.
  if (it == s.allocations.end() || it->second.kind == FAKECUDA_KIND_ASYNC_PENDING ||
      it->second.kind == FAKECUDA_KIND_IPC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (UnsafeDuringCaptureLocked(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  // FAKECUDA_FAIL_CALLS=cuMemFree:N: the sticky error of an earlier launch, which cuMemFree may
  // return (documented); the allocation stays.
  if (CountApiCallLocked(s, "cuMemFree")) return CUDA_ERROR_LAUNCH_FAILED;
  ReleaseAllocationLocked(s, it);
  *wait = ++s.frees_done == s.config.free_wait_at;
  return CUDA_SUCCESS;
}

CUresult Free(CUdeviceptr dptr) {
  State& s = GetState();
  if (NullMode()) return CUDA_SUCCESS;
  bool wait = false;
  CUresult r;
  std::string wait_path;
  {
    Lock lock(s.mu);
    r = FreeLocked(s, dptr, &wait);
    if (wait) wait_path = s.config.free_wait_path;
  }
  // FAKECUDA_FREE_WAIT: released, and other threads may already reuse the address, but this
  // call has not returned (bounded, in case the file never comes).
  for (int i = 0; wait && i < 60000 && access(wait_path.c_str(), F_OK) != 0; ++i) {
    usleep(1000);
  }
  return r;
}

CUresult AllocatePitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                       unsigned element_size, bool legacy) {
  if (!dptr || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t rounded = RoundUp(width, 512);
  if (height > ~size_t{0} / rounded) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = Allocate(dptr, rounded * height, legacy ? FAKECUDA_KIND_LEGACY : FAKECUDA_KIND_PITCH,
                        true, legacy);
  if (r == CUDA_SUCCESS) *pitch = rounded;
  return r;
}

CUresult GetInfo(size_t* free_bytes, size_t* total_bytes) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  *free_bytes = FreePagesLocked(s.devices[ctx->device]) * kPageBytes;
  *total_bytes = s.config.capacity_bytes;
  return CUDA_SUCCESS;
}

CUresult GetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  auto it = FindContainingLocked(s, dptr, 0);
  if (it != s.allocations.end() && it->second.kind != FAKECUDA_KIND_ASYNC_PENDING) {
    if (base) *base = it->second.address;
    if (size) *size = it->second.size;
    return CUDA_SUCCESS;
  }
  auto m = s.mappings.upper_bound(dptr);
  if (m != s.mappings.begin() && dptr < std::prev(m)->first + std::prev(m)->second.size) {
    --m;
    if (base) *base = m->first;
    if (size) *size = m->second.size;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

enum class Side { kHost, kDevice, kAny };

// Validates and performs a copy. Async copies on a capturing stream become graph nodes and
// are not executed, as on the real driver.
CUresult Copy(uint64_t dst, Side dst_side, uint64_t src, Side src_side, size_t bytes,
              CUstream stream, bool async, bool per_thread) {
  State& s = GetState();
  if (NullMode()) return CUDA_SUCCESS;
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  Stream* target = ResolveStreamLocked(s, ctx, stream, per_thread);
  if (!target) return CUDA_ERROR_INVALID_HANDLE;
  if (bytes == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  if (dst_side == Side::kDevice && !IsDeviceRangeLocked(s, dst, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (src_side == Side::kDevice && !IsDeviceRangeLocked(s, src, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (target->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    if (!async) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    ++target->capture_graph->nodes;
    return CUDA_SUCCESS;
  }
  ++target->seq;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

template <typename T>
CUresult Set(CUdeviceptr dst, T value, size_t count, CUstream stream, bool async, bool per_thread) {
  State& s = GetState();
  if (NullMode()) return CUDA_SUCCESS;
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  Stream* target = ResolveStreamLocked(s, ctx, stream, per_thread);
  if (!target) return CUDA_ERROR_INVALID_HANDLE;
  if (count == 0) return CUDA_SUCCESS;
  if (dst % sizeof(T) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!IsDeviceRangeLocked(s, dst, count * sizeof(T))) return CUDA_ERROR_INVALID_VALUE;
  if (target->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    if (!async) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    ++target->capture_graph->nodes;
    return CUDA_SUCCESS;
  }
  ++target->seq;
  T* out = reinterpret_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i) out[i] = value;
  return CUDA_SUCCESS;
}

CUresult HostAlloc(void** pp, size_t bytes) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pp || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  s.host_allocations[reinterpret_cast<uint64_t>(memory)] = bytes;
  *pp = memory;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return Allocate(dptr, bytesize, FAKECUDA_KIND_DEVICE, true, false);
}

CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr wide = 0;
  CUresult r = Allocate(&wide, bytesize, FAKECUDA_KIND_LEGACY, true, true);
  if (r == CUDA_SUCCESS) *dptr = static_cast<CUdeviceptr_v1>(wide);
  return r;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  return AllocatePitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, false);
}

CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes) {
  if (!dptr || !pPitch) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr wide = 0;
  size_t pitch = 0;
  CUresult r = AllocatePitch(&wide, &pitch, WidthInBytes, Height, ElementSizeBytes, true);
  if (r == CUDA_SUCCESS) {
    *dptr = static_cast<CUdeviceptr_v1>(wide);
    *pPitch = static_cast<unsigned>(pitch);
  }
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Allocate(dptr, bytesize, FAKECUDA_KIND_MANAGED, false, false);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return Free(dptr); }
CUresult cuMemFree(CUdeviceptr_v1 dptr) { return Free(dptr); }

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) { return GetInfo(free, total); }
CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  size_t wide_free = 0, wide_total = 0;
  CUresult r = GetInfo(&wide_free, &wide_total);
  if (r == CUDA_SUCCESS) {
    *free = wide_free > 0xffffffffu ? 0xffffffffu : static_cast<unsigned>(wide_free);
    *total = wide_total > 0xffffffffu ? 0xffffffffu : static_cast<unsigned>(wide_total);
  }
  return r;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return GetAddressRange(pbase, psize, dptr);
}
CUresult cuMemGetAddressRange(CUdeviceptr_v1* pbase, unsigned int* psize, CUdeviceptr_v1 dptr) {
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = GetAddressRange(&base, &size, dptr);
  if (r == CUDA_SUCCESS) {
    if (pbase) *pbase = static_cast<CUdeviceptr_v1>(base);
    if (psize) *psize = static_cast<unsigned>(size);
  }
  return r;
}

// --- copies ------------------------------------------------------------------------------
#define FAKECUDA_HOST(p) reinterpret_cast<uint64_t>(p)
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return Copy(dst, Side::kDevice, FAKECUDA_HOST(src), Side::kHost, n, nullptr, false, false);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return Copy(dst, Side::kDevice, FAKECUDA_HOST(src), Side::kHost, n, nullptr, false, true);
}
CUresult cuMemcpyHtoD(CUdeviceptr_v1 dst, const void* src, unsigned int n) {
  return cuMemcpyHtoD_v2(dst, src, n);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return Copy(FAKECUDA_HOST(dst), Side::kHost, src, Side::kDevice, n, nullptr, false, false);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return Copy(FAKECUDA_HOST(dst), Side::kHost, src, Side::kDevice, n, nullptr, false, true);
}
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr_v1 src, unsigned int n) {
  return cuMemcpyDtoH_v2(dst, src, n);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(dst, Side::kDevice, src, Side::kDevice, n, nullptr, false, false);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(dst, Side::kDevice, src, Side::kDevice, n, nullptr, false, true);
}
CUresult cuMemcpyDtoD(CUdeviceptr_v1 dst, CUdeviceptr_v1 src, unsigned int n) {
  return cuMemcpyDtoD_v2(dst, src, n);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream st) {
  return Copy(dst, Side::kDevice, FAKECUDA_HOST(src), Side::kHost, n, st, true, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream st) {
  return Copy(dst, Side::kDevice, FAKECUDA_HOST(src), Side::kHost, n, st, true, true);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream st) {
  return Copy(FAKECUDA_HOST(dst), Side::kHost, src, Side::kDevice, n, st, true, false);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream st) {
  return Copy(FAKECUDA_HOST(dst), Side::kHost, src, Side::kDevice, n, st, true, true);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {
  return Copy(dst, Side::kDevice, src, Side::kDevice, n, st, true, false);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {
  return Copy(dst, Side::kDevice, src, Side::kDevice, n, st, true, true);
}
// Unified addressing: either side may be host or device memory.
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(dst, Side::kAny, src, Side::kAny, n, nullptr, false, false);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(dst, Side::kAny, src, Side::kAny, n, nullptr, false, true);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {
  return Copy(dst, Side::kAny, src, Side::kAny, n, st, true, false);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {
  return Copy(dst, Side::kAny, src, Side::kAny, n, st, true, true);
}
#undef FAKECUDA_HOST

// --- memsets -----------------------------------------------------------------------------
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  return Set<unsigned char>(d, v, n, nullptr, false, false);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) {
  return Set<unsigned char>(d, v, n, nullptr, false, true);
}
CUresult cuMemsetD8(CUdeviceptr_v1 d, unsigned char v, unsigned int n) {
  return cuMemsetD8_v2(d, v, n);
}
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  return Set<unsigned short>(d, v, n, nullptr, false, false);
}
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
  return Set<unsigned int>(d, v, n, nullptr, false, false);
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) {
  return Set<unsigned int>(d, v, n, nullptr, false, true);
}
CUresult cuMemsetD32(CUdeviceptr_v1 d, unsigned int v, unsigned int n) {
  return cuMemsetD32_v2(d, v, n);
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
  return Set<unsigned char>(d, v, n, st, true, false);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
  return Set<unsigned char>(d, v, n, st, true, true);
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream st) {
  return Set<unsigned int>(d, v, n, st, true, false);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream st) {
  return Set<unsigned int>(d, v, n, st, true, true);
}
// One 32-bit store in stream order: a one-element memset here, where streams run at once.
// PyTorch's driver API table requires it (torch 2.15, for expandable segments).
CUresult cuStreamWriteValue32_v2(CUstream st, CUdeviceptr addr, cuuint32_t value,
                                 unsigned int flags) {
  if (flags & ~static_cast<unsigned int>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Set<cuuint32_t>(addr, value, 1, st, true, false);
}
CUresult cuStreamWriteValue32_v2_ptsz(CUstream st, CUdeviceptr addr, cuuint32_t value,
                                      unsigned int flags) {
  if (flags & ~static_cast<unsigned int>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Set<cuuint32_t>(addr, value, 1, st, true, true);
}

// --- pinned host memory (not device memory: never in the live table) ----------------------
CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) { return HostAlloc(pp, bytesize); }
CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if (Flags & ~0xfu) return CUDA_ERROR_INVALID_VALUE;
  return HostAlloc(pp, bytesize);
}

CUresult cuMemFreeHost(void* p) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  auto it = s.host_allocations.find(reinterpret_cast<uint64_t>(p));
  if (it == s.host_allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second);
  s.host_allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t address = reinterpret_cast<uint64_t>(p);
  for (auto* table : {&s.host_allocations, &s.host_registered}) {
    auto it = table->upper_bound(address);
    if (it != table->begin() && address < std::prev(it)->first + std::prev(it)->second) {
      *pdptr = address;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!pFlags) return CUDA_ERROR_INVALID_VALUE;
  if (!s.host_allocations.count(reinterpret_cast<uint64_t>(p))) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = 0;
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!p || bytesize == 0 || (Flags & ~0xfu)) return CUDA_ERROR_INVALID_VALUE;
  auto [it, inserted] = s.host_registered.emplace(reinterpret_cast<uint64_t>(p), bytesize);
  return inserted ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
}
CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult cuMemHostUnregister(void* p) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!s.host_registered.erase(reinterpret_cast<uint64_t>(p))) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  auto it = FindContainingLocked(s, ptr, 0);
  if (it == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  const Allocation& a = it->second;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(a.ctx);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = a.kind == FAKECUDA_KIND_MANAGED;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = a.device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = a.address;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = a.size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = reinterpret_cast<CUmemoryPool>(a.pool);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}
