// What nvcc-compiled programs ask about their kernels and device variables: attributes,
// occupancy, symbol addresses and copies to and from symbols. Answered by the driver
// (cuKernelGetAttribute, cuOccupancy*, cuLibraryGetGlobal, cuMemcpy*) for the kernels and
// variables nvcc's code registered, as NVIDIA's runtime does.
#include <cstring>
#include <type_traits>

#include "kernel_registry.h"
#include "runtime_state.h"

using namespace fakecuda_rt;

namespace {

cudaError_t Kernel(const void* func, const DriverApi** api, CUkernel* kernel) {
  if (cudaError_t e = EnsureContext(api); e != cudaSuccess) return e;
  return KernelFor(*api, func, kernel);
}

cudaError_t Symbol(const void* symbol, const DriverApi** api, CUdeviceptr* address, size_t* bytes) {
  if (cudaError_t e = EnsureContext(api); e != cudaSuccess) return e;
  return SymbolFor(*api, symbol, address, bytes);
}

// The device address of `count` bytes at `offset` into a symbol, for the copies.
cudaError_t SymbolSpan(const void* symbol, size_t offset, size_t count, const DriverApi** api,
                       CUdeviceptr* at) {
  size_t bytes = 0;
  if (cudaError_t e = Symbol(symbol, api, at, &bytes); e != cudaSuccess) return e;
  if (offset > bytes || count > bytes - offset) return cudaErrorInvalidValue;
  *at += offset;
  return cudaSuccess;
}

cudaError_t Occupancy(int* blocks, const void* func, int block_size, size_t dynamic_smem,
                      unsigned flags) {
  if (!blocks) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  CUkernel kernel = nullptr;
  if (cudaError_t e = Kernel(func, &api, &kernel); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->occupancyMaxActiveBlocks(
      blocks, reinterpret_cast<CUfunction>(kernel), block_size, dynamic_smem, flags)));
}

}  // namespace

extern "C" {

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  if (!attr) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  CUkernel kernel = nullptr;
  if (cudaError_t e = Kernel(func, &api, &kernel); e != cudaSuccess) return Record(e);
  CUdevice device = CurrentDevice();
  auto get = [&](CUfunction_attribute a, auto* field) {
    int value = 0;
    CUresult r = api->kernelGetAttribute(&value, a, kernel, device);
    *field = static_cast<std::remove_pointer_t<decltype(field)>>(value);
    return r;
  };
  *attr = cudaFuncAttributes{};
  CUresult r = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &attr->sharedSizeBytes);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, &attr->constSizeBytes);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &attr->localSizeBytes);
  if (r == CUDA_SUCCESS) {
    r = get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &attr->maxThreadsPerBlock);
  }
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_NUM_REGS, &attr->numRegs);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_PTX_VERSION, &attr->ptxVersion);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_BINARY_VERSION, &attr->binaryVersion);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, &attr->cacheModeCA);
  if (r == CUDA_SUCCESS) {
    r = get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &attr->maxDynamicSharedSizeBytes);
  }
  if (r == CUDA_SUCCESS) {
    r = get(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, &attr->preferredShmemCarveout);
  }
  return Record(FromDriver(r));
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  const DriverApi* api = nullptr;
  CUkernel kernel = nullptr;
  if (cudaError_t e = Kernel(func, &api, &kernel); e != cudaSuccess) return Record(e);
  CUfunction_attribute driver_attr;
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      driver_attr = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
      break;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      driver_attr = CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
      break;
    case cudaFuncAttributeNonPortableClusterSizeAllowed:
      driver_attr = CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED;
      break;
    default:
      return Record(cudaErrorInvalidValue);
  }
  return Record(FromDriver(api->kernelSetAttribute(driver_attr, value, kernel, CurrentDevice())));
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func,
                                                          int blockSize, size_t dynamicSMemSize) {
  return Occupancy(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func,
                                                                   int blockSize,
                                                                   size_t dynamicSMemSize,
                                                                   unsigned int flags) {
  return Occupancy(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  if (!devPtr) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  CUdeviceptr address = 0;
  size_t bytes = 0;
  if (cudaError_t e = Symbol(symbol, &api, &address, &bytes); e != cudaSuccess) return Record(e);
  *devPtr = reinterpret_cast<void*>(address);
  return cudaSuccess;
}

cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  if (!size) return Record(cudaErrorInvalidValue);
  const DriverApi* api = nullptr;
  CUdeviceptr address = 0;
  if (cudaError_t e = Symbol(symbol, &api, &address, size); e != cudaSuccess) return Record(e);
  return cudaSuccess;
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               enum cudaMemcpyKind kind) {
  const DriverApi* api = nullptr;
  CUdeviceptr at = 0;
  if (cudaError_t e = SymbolSpan(symbol, offset, count, &api, &at); e != cudaSuccess) {
    return Record(e);
  }
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDefault) {
    return Record(FromDriver(api->memcpyHtoD(at, src, count)));
  }
  if (kind == cudaMemcpyDeviceToDevice) {
    return Record(FromDriver(api->memcpyDtoD(at, reinterpret_cast<CUdeviceptr>(src), count)));
  }
  return Record(cudaErrorInvalidMemcpyDirection);
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 enum cudaMemcpyKind kind) {
  const DriverApi* api = nullptr;
  CUdeviceptr at = 0;
  if (cudaError_t e = SymbolSpan(symbol, offset, count, &api, &at); e != cudaSuccess) {
    return Record(e);
  }
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDefault) {
    return Record(FromDriver(api->memcpyDtoH(dst, at, count)));
  }
  if (kind == cudaMemcpyDeviceToDevice) {
    return Record(FromDriver(api->memcpyDtoD(reinterpret_cast<CUdeviceptr>(dst), at, count)));
  }
  return Record(cudaErrorInvalidMemcpyDirection);
}

}  // extern "C"
