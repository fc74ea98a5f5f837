// The driver entry points of the fake runtime, obtained exactly as NVIDIA's libcudart 13 does:
// dlopen("libcuda.so.1"), dlsym(handle, "cuGetProcAddress_v2"), look up "cuGetProcAddress"
// itself through it, then replay the recorded lookup sequence (data/cudart13-driver-lookups.txt)
// through the pointer that self-lookup returned. Nothing here calls a driver symbol directly.
//
// Thread-safety: LoadDriver() is idempotent and safe from any thread (std::call_once); the
// returned table is immutable afterwards. Ownership: static storage, never freed (the driver
// handle stays open for the life of the process, like the real runtime's).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

// X(field, driver base name, requested version, lookup flags, PFN suffix) for every entry the
// runtime uses. Each must appear in the recorded sequence, so the runtime only uses pointers a
// real libcudart would also have looked up.
#define FAKECUDA_RUNTIME_DRIVER_FUNCTIONS(X)                                                   \
  X(init, cuInit, 2000, 0, )                                                                   \
  X(getExportTable, cuGetExportTable, 3000, 0, )                                               \
  X(driverGetVersion, cuDriverGetVersion, 2020, 0, )                                           \
  X(deviceGet, cuDeviceGet, 2000, 0, )                                                         \
  X(deviceGetCount, cuDeviceGetCount, 2000, 0, )                                               \
  X(deviceGetName, cuDeviceGetName, 2000, 0, )                                                 \
  X(deviceTotalMem, cuDeviceTotalMem, 3020, 0, )                                               \
  X(deviceGetAttribute, cuDeviceGetAttribute, 2000, 0, )                                       \
  X(deviceGetUuid, cuDeviceGetUuid, 9020, 0, )                                                 \
  X(deviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, 0, )                                         \
  X(deviceCanAccessPeer, cuDeviceCanAccessPeer, 4000, 0, )                                     \
  X(primaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0, )                                     \
  X(primaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0, )                                   \
  X(primaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0, )                                       \
  X(primaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, 0, )                                 \
  X(primaryCtxSetFlags, cuDevicePrimaryCtxSetFlags, 11000, 0, )                                \
  X(ctxSetCurrent, cuCtxSetCurrent, 4000, 0, )                                                 \
  X(ctxGetCurrent, cuCtxGetCurrent, 4000, 0, )                                                 \
  X(ctxGetDevice, cuCtxGetDevice, 2000, 0, )                                                   \
  X(ctxSynchronize, cuCtxSynchronize, 2000, 0, )                                               \
  X(ctxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050, 0, )                         \
  X(memGetInfo, cuMemGetInfo, 3020, 0, )                                                       \
  X(memAlloc, cuMemAlloc, 3020, 0, )                                                           \
  X(memAllocPitch, cuMemAllocPitch, 3020, 0, )                                                 \
  X(memFree, cuMemFree, 3020, 0, )                                                             \
  X(memAllocManaged, cuMemAllocManaged, 6000, 0, )                                             \
  X(memGetAddressRange, cuMemGetAddressRange, 3020, 0, )                                       \
  X(memHostAlloc, cuMemHostAlloc, 2020, 0, )                                                   \
  X(memFreeHost, cuMemFreeHost, 2000, 0, )                                                     \
  X(memHostRegister, cuMemHostRegister, 6050, 0, )                                             \
  X(memHostUnregister, cuMemHostUnregister, 4000, 0, )                                         \
  X(memHostGetDevicePointer, cuMemHostGetDevicePointer, 3020, 0, )                             \
  X(memHostGetFlags, cuMemHostGetFlags, 2030, 0, )                                             \
  X(ipcGetMemHandle, cuIpcGetMemHandle, 4010, 0, )                                             \
  X(ipcOpenMemHandle, cuIpcOpenMemHandle, 11000, 0, )                                          \
  X(ipcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0, )                                         \
  X(pointerGetAttribute, cuPointerGetAttribute, 4000, 0, )                                     \
  X(memAllocAsync, cuMemAllocAsync, 11020, 0, )                                                \
  X(memAllocAsync_ptsz, cuMemAllocAsync, 11020, 2, _ptsz)                                      \
  X(memAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0, )                                \
  X(memAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 2, _ptsz)                      \
  X(memFreeAsync, cuMemFreeAsync, 11020, 0, )                                                  \
  X(memFreeAsync_ptsz, cuMemFreeAsync, 11020, 2, _ptsz)                                        \
  X(memPoolTrimTo, cuMemPoolTrimTo, 11020, 0, )                                                \
  X(memPoolSetAttribute, cuMemPoolSetAttribute, 11020, 0, )                                    \
  X(memPoolGetAttribute, cuMemPoolGetAttribute, 11020, 0, )                                    \
  X(memPoolCreate, cuMemPoolCreate, 11020, 0, )                                                \
  X(memPoolDestroy, cuMemPoolDestroy, 11020, 0, )                                              \
  X(deviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, 0, )                            \
  X(deviceGetMemPool, cuDeviceGetMemPool, 11020, 0, )                                          \
  X(deviceSetMemPool, cuDeviceSetMemPool, 11020, 0, )                                          \
  X(memcpy, cuMemcpy, 4000, 0, )                                                               \
  X(memcpy_ptds, cuMemcpy, 7000, 2, _ptds)                                                     \
  X(memcpyAsync, cuMemcpyAsync, 4000, 0, )                                                     \
  X(memcpyAsync_ptsz, cuMemcpyAsync, 7000, 2, _ptsz)                                           \
  X(memcpyHtoD, cuMemcpyHtoD, 3020, 0, )                                                       \
  X(memcpyDtoH, cuMemcpyDtoH, 3020, 0, )                                                       \
  X(memcpyDtoD, cuMemcpyDtoD, 3020, 0, )                                                       \
  X(memcpyHtoDAsync, cuMemcpyHtoDAsync, 3020, 0, )                                             \
  X(memcpyDtoHAsync, cuMemcpyDtoHAsync, 3020, 0, )                                             \
  X(memcpyDtoDAsync, cuMemcpyDtoDAsync, 3020, 0, )                                             \
  X(memsetD8, cuMemsetD8, 3020, 0, )                                                           \
  X(memsetD8_ptds, cuMemsetD8, 7000, 2, _ptds)                                                 \
  X(memsetD8Async, cuMemsetD8Async, 3020, 0, )                                                 \
  X(memsetD8Async_ptsz, cuMemsetD8Async, 7000, 2, _ptsz)                                       \
  X(streamCreate, cuStreamCreate, 2000, 0, )                                                   \
  X(streamCreateWithPriority, cuStreamCreateWithPriority, 5050, 0, )                           \
  X(streamDestroy, cuStreamDestroy, 4000, 0, )                                                 \
  X(streamSynchronize, cuStreamSynchronize, 2000, 0, )                                         \
  X(streamSynchronize_ptsz, cuStreamSynchronize, 7000, 2, _ptsz)                               \
  X(streamQuery, cuStreamQuery, 2000, 0, )                                                     \
  X(streamQuery_ptsz, cuStreamQuery, 7000, 2, _ptsz)                                           \
  X(streamWaitEvent, cuStreamWaitEvent, 3020, 0, )                                             \
  X(streamGetPriority, cuStreamGetPriority, 5050, 0, )                                         \
  X(streamBeginCapture, cuStreamBeginCapture, 10010, 0, )                                      \
  X(streamBeginCapture_ptsz, cuStreamBeginCapture, 10010, 2, _ptsz)                            \
  X(streamEndCapture, cuStreamEndCapture, 10000, 0, )                                          \
  X(streamEndCapture_ptsz, cuStreamEndCapture, 10000, 2, _ptsz)                                \
  X(streamIsCapturing, cuStreamIsCapturing, 10000, 0, )                                        \
  X(streamIsCapturing_ptsz, cuStreamIsCapturing, 10000, 2, _ptsz)                              \
  X(threadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010, 0, )            \
  X(graphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0, )                        \
  X(graphLaunch, cuGraphLaunch, 10000, 0, )                                                    \
  X(graphLaunch_ptsz, cuGraphLaunch, 10000, 2, _ptsz)                                          \
  X(graphUpload, cuGraphUpload, 11010, 0, )                                                    \
  X(graphExecDestroy, cuGraphExecDestroy, 10000, 0, )                                          \
  X(graphDestroy, cuGraphDestroy, 10000, 0, )                                                  \
  X(graphCreate, cuGraphCreate, 10000, 0, )                                                    \
  X(eventCreate, cuEventCreate, 2000, 0, )                                                     \
  X(eventRecord, cuEventRecord, 2000, 0, )                                                     \
  X(eventRecord_ptsz, cuEventRecord, 7000, 2, _ptsz)                                           \
  X(eventQuery, cuEventQuery, 2000, 0, )                                                       \
  X(eventSynchronize, cuEventSynchronize, 2000, 0, )                                           \
  X(eventDestroy, cuEventDestroy, 4000, 0, )                                                   \
  X(eventElapsedTime, cuEventElapsedTime, 2000, 0, )                                           \
  X(launchKernel, cuLaunchKernel, 4000, 0, )                                                   \
  X(launchKernel_ptsz, cuLaunchKernel, 7000, 2, _ptsz)                                         \
  X(libraryLoadData, cuLibraryLoadData, 12000, 0, )                                            \
  X(libraryGetKernel, cuLibraryGetKernel, 12000, 0, )                                          \
  X(libraryGetGlobal, cuLibraryGetGlobal, 12000, 0, )                                          \
  X(kernelGetAttribute, cuKernelGetAttribute, 12000, 0, )                                      \
  X(kernelSetAttribute, cuKernelSetAttribute, 12000, 0, )                                      \
  X(occupancyMaxActiveBlocks, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000, 0, ) \
  X(libraryUnload, cuLibraryUnload, 12000, 0, )

namespace fakecuda_rt {

struct DriverApi {
  // The pointer obtained by the self-lookup ("cuGetProcAddress" @12000); also serves
  // cudaGetDriverEntryPoint(ByVersion).
  PFN_cuGetProcAddress_v12000 getProcAddress = nullptr;
#define FAKECUDA_FIELD(field, name, version, flags, suffix) \
  PFN_##name##_v##version##suffix field = nullptr;
  FAKECUDA_RUNTIME_DRIVER_FUNCTIONS(FAKECUDA_FIELD)
#undef FAKECUDA_FIELD
};

// The table, or nullptr when libcuda.so.1 cannot be loaded or lacks cuGetProcAddress_v2
// (then every runtime call fails with cudaErrorInsufficientDriver, as the real one does).
const DriverApi* LoadDriver();

}  // namespace fakecuda_rt
