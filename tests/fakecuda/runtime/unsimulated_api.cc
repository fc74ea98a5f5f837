// Runtime entry points that PyTorch's CUDA libraries (libc10_cuda, libtorch_cuda, ...) link
// against, so that real PyTorch loads and runs its caching allocator on the fake device.
//
// Python loads extension libraries with RTLD_NOW, so every cudart symbol they reference must
// exist (cudaFuncGetAttributes@libcudart.so.13 missing means `import torch` fails), even those a
// memory workload never calls. The ones with a meaning here are implemented on the driver; the
// rest answer cudaErrorNotSupported (recorded as the thread's last error): the fake does not
// simulate peer access, graph node editing, libraries or host callbacks (kernel attributes,
// occupancy and device symbols are in kernel_api.cc). Profiler start/stop succeed and do nothing,
// as with no profiler attached.
#include <cuda_profiler_api.h>

#include <cstring>

#include "runtime_state.h"

using namespace fakecuda_rt;

#define FAKECUDA_WITH_CONTEXT(api) \
  const DriverApi* api = nullptr;  \
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e)

static_assert(sizeof(CUipcMemHandle) == sizeof(cudaIpcMemHandle_t));

extern "C" {

// The current context's range (cuCtxGetStreamPriorityRange): [0, -5] on the fake, as on
// current NVIDIA GPUs. PyTorch asks when it builds its stream pools.
cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->ctxGetStreamPriorityRange(leastPriority, greatestPriority)));
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamGetPriority(hStream, priority)));
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  if (!handle) return Record(cudaErrorInvalidValue);
  FAKECUDA_WITH_CONTEXT(api);
  CUipcMemHandle h;
  CUresult r = api->ipcGetMemHandle(&h, reinterpret_cast<CUdeviceptr>(devPtr));
  if (r == CUDA_SUCCESS) std::memcpy(handle, &h, sizeof(h));
  return Record(FromDriver(r));
}

cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  if (!devPtr) return Record(cudaErrorInvalidValue);
  FAKECUDA_WITH_CONTEXT(api);
  CUipcMemHandle h;
  std::memcpy(&h, &handle, sizeof(h));
  CUdeviceptr p = 0;
  CUresult r = api->ipcOpenMemHandle(&p, h, flags);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(p);
  return Record(FromDriver(r));
}

cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->ipcCloseMemHandle(reinterpret_cast<CUdeviceptr>(devPtr))));
}

cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

// Not simulated.
// clang-format off
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaDeviceGetGraphMemAttribute(int, enum cudaGraphMemAttributeType, void*) { return Record(cudaErrorNotSupported); }
cudaError_t cudaDeviceSetGraphMemAttribute(int, enum cudaGraphMemAttributeType, void*) { return Record(cudaErrorNotSupported); }
cudaError_t cudaEventRecordWithFlags(cudaEvent_t, cudaStream_t, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaGraphAddNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, const cudaGraphEdgeData *, size_t, struct cudaGraphNodeParams *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *, cudaGraph_t, unsigned int, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaGraphGetNodes(cudaGraph_t, cudaGraphNode_t *, size_t *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t, cudaGraphNode_t *, cudaGraphEdgeData *, size_t *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaGraphRetainUserObject(cudaGraph_t, cudaUserObject_t, unsigned int, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *, cudaEvent_t) { return Record(cudaErrorNotSupported); }
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *, cudaIpcEventHandle_t) { return Record(cudaErrorNotSupported); }
cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t, enum cudaFuncAttribute, int, int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLaunchCooperativeKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t, void *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *, const void *, void **) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLibraryGetGlobal(void **, size_t *, cudaLibrary_t, const char *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLibraryGetKernel(cudaKernel_t *, cudaLibrary_t, const char *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLibraryGetKernelCount(unsigned int *, cudaLibrary_t) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLibraryGetManaged(void **, size_t *, cudaLibrary_t, const char *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLibraryGetUnifiedFunction(void **, cudaLibrary_t, const char *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLibraryLoadData(cudaLibrary_t *, const void *, enum cudaJitOption *, void **, unsigned int, enum cudaLibraryOption *, void**, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *, const char *, enum cudaJitOption *, void **, unsigned int, enum cudaLibraryOption *, void **, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaLibraryUnload(cudaLibrary_t) { return Record(cudaErrorNotSupported); }
cudaError_t cudaMemPoolSetAccess(cudaMemPool_t, const struct cudaMemAccessDesc *, size_t) { return Record(cudaErrorNotSupported); }
cudaError_t cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind, cudaStream_t) { return Record(cudaErrorNotSupported); }
cudaError_t cudaMemcpyPeerAsync(void *, int, const void *, int, size_t, cudaStream_t) { return Record(cudaErrorNotSupported); }
cudaError_t cudaStreamAddCallback(cudaStream_t, cudaStreamCallback_t, void *, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t, cudaGraph_t, const cudaGraphNode_t *, const cudaGraphEdgeData *, size_t, enum cudaStreamCaptureMode) { return Record(cudaErrorNotSupported); }
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, enum cudaStreamCaptureStatus *, unsigned long long *, cudaGraph_t *, const cudaGraphNode_t **, const cudaGraphEdgeData **, size_t *) { return Record(cudaErrorNotSupported); }
cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t, cudaGraphNode_t *, const cudaGraphEdgeData *, size_t, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaUserObjectCreate(cudaUserObject_t *, void *, cudaHostFn_t, unsigned int, unsigned int) { return Record(cudaErrorNotSupported); }
cudaError_t cudaUserObjectRelease(cudaUserObject_t, unsigned int) { return Record(cudaErrorNotSupported); }
// clang-format on

}  // extern "C"
