// Runtime memory API: cudaMalloc family, pools, copies, memsets, pinned host memory.
#include <cstring>

#include "runtime_state.h"

using namespace fakecuda_rt;

namespace {

CUdeviceptr Ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

cudaError_t MallocAsync(void** devPtr, size_t size, cudaMemPool_t pool, cudaStream_t stream,
                        bool from_pool, bool per_thread) {
  if (!devPtr) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr out = 0;
  CUresult r;
  if (from_pool) {
    auto fn = per_thread ? api->memAllocFromPoolAsync_ptsz : api->memAllocFromPoolAsync;
    r = fn(&out, size, pool, stream);
  } else {
    auto fn = per_thread ? api->memAllocAsync_ptsz : api->memAllocAsync;
    r = fn(&out, size, stream);
  }
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(out);
  return Record(FromDriver(r));
}

cudaError_t FreeAsync(void* devPtr, cudaStream_t stream, bool per_thread) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  if (!devPtr) return cudaSuccess;
  auto fn = per_thread ? api->memFreeAsync_ptsz : api->memFreeAsync;
  return Record(FromDriver(fn(Ptr(devPtr), stream)));
}

cudaError_t Copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream,
                 bool async, bool per_thread) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return Record(cudaErrorInvalidMemcpyDirection);
  }
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return Record(cudaErrorInvalidValue);
  CUresult r = CUDA_SUCCESS;
  switch (kind) {
    case cudaMemcpyHostToHost:
      std::memmove(dst, src, count);
      break;
    case cudaMemcpyHostToDevice:
      r = async ? api->memcpyHtoDAsync(Ptr(dst), src, count, stream)
                : api->memcpyHtoD(Ptr(dst), src, count);
      break;
    case cudaMemcpyDeviceToHost:
      r = async ? api->memcpyDtoHAsync(dst, Ptr(src), count, stream)
                : api->memcpyDtoH(dst, Ptr(src), count);
      break;
    case cudaMemcpyDeviceToDevice:
      r = async ? api->memcpyDtoDAsync(Ptr(dst), Ptr(src), count, stream)
                : api->memcpyDtoD(Ptr(dst), Ptr(src), count);
      break;
    default:
      if (async) {
        r = (per_thread ? api->memcpyAsync_ptsz : api->memcpyAsync)(Ptr(dst), Ptr(src), count,
                                                                    stream);
      } else {
        r = (per_thread ? api->memcpy_ptds : api->memcpy)(Ptr(dst), Ptr(src), count);
      }
  }
  return Record(FromDriver(r));
}

cudaError_t Set(void* devPtr, int value, size_t count, cudaStream_t stream, bool async,
                bool per_thread) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  if (count == 0) return cudaSuccess;
  unsigned char byte = static_cast<unsigned char>(value);
  CUresult r = async ? (per_thread ? api->memsetD8Async_ptsz : api->memsetD8Async)(
                           Ptr(devPtr), byte, count, stream)
                     : (per_thread ? api->memsetD8_ptds : api->memsetD8)(Ptr(devPtr), byte, count);
  return Record(FromDriver(r));
}

cudaError_t HostAlloc(void** ptr, size_t size, unsigned flags) {
  if (!ptr) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  return Record(FromDriver(api->memHostAlloc(ptr, size, flags)));
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (!devPtr) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  if (size == 0) {  // documented: success with a null pointer
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr out = 0;
  CUresult r = api->memAlloc(&out, size);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(out);
  return Record(FromDriver(r));
}

cudaError_t cudaFree(void* devPtr) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  if (!devPtr) return cudaSuccess;  // documented no-op (still initializes the context)
  return Record(FromDriver(api->memFree(Ptr(devPtr))));
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return MallocAsync(devPtr, size, nullptr, hStream, false, false);
}
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  return MallocAsync(devPtr, size, nullptr, hStream, false, true);
}
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream) {
  return MallocAsync(ptr, size, memPool, stream, true, false);
}
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream) {
  return MallocAsync(ptr, size, memPool, stream, true, true);
}
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return FreeAsync(devPtr, hStream, false);
}
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return FreeAsync(devPtr, hStream, true);
}

cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (!devPtr || !pitch) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  CUdeviceptr out = 0;
  CUresult r = api->memAllocPitch(&out, pitch, width, height, 4);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(out);
  return Record(FromDriver(r));
}

cudaError_t cudaMalloc3D(cudaPitchedPtr* pitchedDevPtr, cudaExtent extent) {
  if (!pitchedDevPtr) return Record(cudaErrorInvalidValue);
  void* ptr = nullptr;
  size_t pitch = 0;
  size_t rows = extent.height * extent.depth;
  cudaError_t e = cudaMallocPitch(&ptr, &pitch, extent.width, rows);
  if (e == cudaSuccess) {
    pitchedDevPtr->ptr = ptr;
    pitchedDevPtr->pitch = pitch;
    pitchedDevPtr->xsize = extent.width;
    pitchedDevPtr->ysize = extent.height;
  }
  return e;
}

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  if (!devPtr) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  CUdeviceptr out = 0;
  CUresult r = api->memAllocManaged(&out, size, flags);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(out);
  return Record(FromDriver(r));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return HostAlloc(ptr, size, 0); }
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return HostAlloc(pHost, size, flags);
}

cudaError_t cudaFreeHost(void* ptr) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  if (!ptr) return cudaSuccess;
  return Record(FromDriver(api->memFreeHost(ptr)));
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->memHostRegister(ptr, size, flags)));
}

cudaError_t cudaHostUnregister(void* ptr) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->memHostUnregister(ptr)));
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (!pDevice) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  CUdeviceptr out = 0;
  CUresult r = api->memHostGetDevicePointer(&out, pHost, flags);
  if (r == CUDA_SUCCESS) *pDevice = reinterpret_cast<void*>(out);
  return Record(FromDriver(r));
}

cudaError_t cudaHostGetFlags(unsigned int* pFlags, void* pHost) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->memHostGetFlags(pFlags, pHost)));
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->memGetInfo(free, total)));
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  std::memset(attributes, 0, sizeof *attributes);
  int device = -1;
  int managed = 0;
  if (api->pointerGetAttribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, Ptr(ptr)) !=
      CUDA_SUCCESS) {
    attributes->type = cudaMemoryTypeUnregistered;  // host or unknown memory: not an error
    attributes->device = -2;
    return cudaSuccess;
  }
  api->pointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, Ptr(ptr));
  attributes->type = managed ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
  attributes->device = device;
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = managed ? const_cast<void*>(ptr) : nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Copy(dst, src, count, kind, nullptr, false, false);
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Copy(dst, src, count, kind, nullptr, false, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return Copy(dst, src, count, kind, stream, true, false);
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  return Copy(dst, src, count, kind, stream, true, true);
}
cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return Set(devPtr, value, count, nullptr, false, false);
}
cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  return Set(devPtr, value, count, nullptr, false, true);
}
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return Set(devPtr, value, count, stream, true, false);
}
cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return Set(devPtr, value, count, stream, true, true);
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const cudaMemPoolProps* poolProps) {
  if (!memPool || !poolProps) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  CUmemPoolProps props{};
  props.allocType = static_cast<CUmemAllocationType>(poolProps->allocType);
  props.handleTypes = static_cast<CUmemAllocationHandleType>(poolProps->handleTypes);
  props.location.type = static_cast<CUmemLocationType>(poolProps->location.type);
  props.location.id = poolProps->location.id;
  props.maxSize = poolProps->maxSize;
  return Record(FromDriver(api->memPoolCreate(memPool, &props)));
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->memPoolDestroy(memPool)));
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(
      FromDriver(api->memPoolSetAttribute(memPool, static_cast<CUmemPool_attribute>(attr), value)));
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(
      FromDriver(api->memPoolGetAttribute(memPool, static_cast<CUmemPool_attribute>(attr), value)));
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->memPoolTrimTo(memPool, minBytesToKeep)));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->deviceGetDefaultMemPool(memPool, device)));
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* memPool, int device) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->deviceGetMemPool(memPool, device)));
}

cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->deviceSetMemPool(device, memPool)));
}

}  // extern "C"
