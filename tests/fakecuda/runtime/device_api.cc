// Runtime device management, versions, errors and driver entry points.
#include <cstring>

#include "runtime_state.h"

using namespace fakecuda_rt;

// What cudaRuntimeGetVersion reports and cudaGetDriverEntryPoint asks the driver for: the
// headers' CUDART_VERSION, or the replayed runtime's (12090 for the libcudart.so.12 build).
#ifndef FAKECUDA_CUDART_VERSION
#define FAKECUDA_CUDART_VERSION CUDART_VERSION
#endif

namespace {

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};

const ErrorText kErrors[] = {
#define FAKECUDA_RUNTIME_ERROR(code, name, text) {code, name, text},
#include "error_tables.inc"
};

const ErrorText* FindError(cudaError_t error) {
  for (const ErrorText& e : kErrors) {
    if (e.code == static_cast<int>(error)) return &e;
  }
  return nullptr;
}

cudaError_t EntryPoint(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                       unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  if (!symbol || !funcPtr || flags > cudaEnablePerThreadDefaultStream) {
    return Record(cudaErrorInvalidValue);
  }
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  api->getProcAddress(symbol, funcPtr, static_cast<int>(cudaVersion), flags, &status);
  // Documented: a missing symbol is reported through driverStatus, not the return value.
  if (driverStatus) *driverStatus = static_cast<cudaDriverEntryPointQueryResult>(status);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return Record(cudaErrorInvalidValue);
  cudaError_t error;
  if (!Init(&error)) {
    *count = 0;
    return Record(error);
  }
  *count = DeviceCount();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  cudaError_t error;
  if (!Init(&error)) return Record(error);
  if (device < 0 || device >= DeviceCount()) return Record(cudaErrorInvalidDevice);
  CurrentDevice() = device;
  // Since CUDA 12 cudaSetDevice initializes the device's primary context right away.
  const DriverApi* api = nullptr;
  return Record(EnsureContext(&api));
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return Record(cudaErrorInvalidValue);
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  CUcontext current = nullptr;
  CUdevice ctx_device = 0;
  if (api->ctxGetCurrent(&current) == CUDA_SUCCESS && current &&
      api->ctxGetDevice(&ctx_device) == CUDA_SUCCESS) {
    *device = ctx_device;
  } else {
    *device = CurrentDevice();
  }
  return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  return Record(FromDriver(api->primaryCtxSetFlags(CurrentDevice(), flags)));
}

cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (!flags) return Record(cudaErrorInvalidValue);
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  int active = 0;
  return Record(FromDriver(api->primaryCtxGetState(CurrentDevice(), flags, &active)));
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return Record(cudaErrorInvalidValue);
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  if (device < 0 || device >= DeviceCount()) return Record(cudaErrorInvalidDevice);
  return Record(
      FromDriver(api->deviceGetAttribute(value, static_cast<CUdevice_attribute>(attr), device)));
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return Record(cudaErrorInvalidValue);
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  if (device < 0 || device >= DeviceCount()) return Record(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  api->deviceGetName(prop->name, sizeof prop->name, device);
  CUuuid uuid;
  api->deviceGetUuid(&uuid, device);
  std::memcpy(prop->uuid.bytes, uuid.bytes, sizeof uuid.bytes);
  api->deviceTotalMem(&prop->totalGlobalMem, device);
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    api->deviceGetAttribute(&v, a, device);
    return v;
  };
  prop->sharedMemPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->totalConstMem = attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  prop->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  prop->textureAlignment = attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  prop->texturePitchAlignment = attr(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT);
  prop->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  prop->integrated = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED);
  prop->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
  prop->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
  prop->ECCEnabled = attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
  prop->pciBusID = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  prop->pciDeviceID = attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  prop->pciDomainID = attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  prop->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
  prop->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  prop->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  prop->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  prop->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  prop->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
  prop->globalL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED);
  prop->localL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED);
  prop->sharedMemPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  prop->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  prop->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
  prop->concurrentManagedAccess = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  prop->cooperativeLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
  prop->sharedMemPerBlockOptin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  prop->maxBlocksPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  prop->hostRegisterSupported = attr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED);
  prop->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  prop->memoryPoolSupportedHandleTypes =
      static_cast<unsigned>(attr(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES));
  prop->pageableMemoryAccessUsesHostPageTables =
      attr(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  return Record(FromDriver(api->deviceGetPCIBusId(pciBusId, len, device)));
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  return Record(FromDriver(api->deviceCanAccessPeer(canAccessPeer, device, peerDevice)));
}

cudaError_t cudaDeviceSynchronize(void) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  return Record(FromDriver(api->ctxSynchronize()));
}

cudaError_t cudaDeviceReset(void) {
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  // The driver runs our context-storage destructor; the next call sets the context up again.
  return Record(FromDriver(api->primaryCtxReset(CurrentDevice())));
}

cudaError_t cudaGetLastError(void) {
  cudaError_t error = LastError();
  LastError() = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError(void) { return LastError(); }

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* e = FindError(error);
  return e ? e->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* e = FindError(error);
  return e ? e->text : "unrecognized error code";
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (!runtimeVersion) return Record(cudaErrorInvalidValue);
  *runtimeVersion = FAKECUDA_CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return Record(cudaErrorInvalidValue);
  const DriverApi* api = LoadDriver();
  *driverVersion = 0;  // documented: 0 when no driver is installed
  if (api) api->driverGetVersion(driverVersion);
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint(symbol, funcPtr, FAKECUDA_CUDART_VERSION, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr,
                                         unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* driverStatus) {
  if (flags == cudaEnableDefault) flags = cudaEnablePerThreadDefaultStream;
  return EntryPoint(symbol, funcPtr, FAKECUDA_CUDART_VERSION, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                  unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  if (flags == cudaEnableDefault) flags = cudaEnablePerThreadDefaultStream;
  return EntryPoint(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

}  // extern "C"
