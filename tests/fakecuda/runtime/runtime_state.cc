#include "runtime_state.h"

#include <mutex>

namespace fakecuda_rt {
namespace {

constexpr int kMaxDevices = 8;

thread_local int tls_device = 0;
thread_local cudaError_t tls_last_error = cudaSuccess;

struct Process {
  std::once_flag once;
  const DriverApi* api = nullptr;
  cudaError_t init_error = cudaSuccess;
  int device_count = 0;
  std::mutex mu;
  CUcontext primary[kMaxDevices] = {};
};

Process& P() {
  static Process* process = new Process();  // leaked: used by atexit-time unregistration
  return *process;
}

}  // namespace

int& CurrentDevice() { return tls_device; }
cudaError_t& LastError() { return tls_last_error; }

cudaError_t Record(cudaError_t error) {
  if (error != cudaSuccess) tls_last_error = error;
  return error;
}

cudaError_t FromDriver(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE:
      return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED:
      return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED:
      return cudaErrorCudartUnloading;
    case CUDA_ERROR_NO_DEVICE:
      return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE:
      return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT:
      return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return cudaErrorContextIsDestroyed;
    case CUDA_ERROR_INVALID_HANDLE:
      return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND:
      return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY:
      return cudaErrorNotReady;
    case CUDA_ERROR_NOT_SUPPORTED:
      return cudaErrorNotSupported;
    case CUDA_ERROR_FILE_NOT_FOUND:
      return cudaErrorFileNotFound;
    case CUDA_ERROR_ILLEGAL_STATE:
      return cudaErrorIllegalState;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
      return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
      return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
      return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
      return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
      return cudaErrorStreamCaptureWrongThread;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
      return cudaErrorStreamCaptureUnmatched;
    default:
      return cudaErrorUnknown;
  }
}

const DriverApi* Init(cudaError_t* error) {
  Process& p = P();
  std::call_once(p.once, [&p] {
    p.api = LoadDriver();
    if (!p.api || !p.api->init) {
      p.init_error = cudaErrorInsufficientDriver;
      p.api = nullptr;
      return;
    }
    CUresult r = p.api->init(0);
    if (r == CUDA_SUCCESS) r = p.api->deviceGetCount(&p.device_count);
    if (r != CUDA_SUCCESS) {
      p.init_error = FromDriver(r);
      p.api = nullptr;
    }
  });
  *error = p.init_error;
  return p.api;
}

int DeviceCount() {
  cudaError_t error;
  return Init(&error) ? P().device_count : 0;
}

cudaError_t EnsureContext(const DriverApi** out) {
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return error;
  *out = api;
  CUcontext current = nullptr;
  api->ctxGetCurrent(&current);
  Process& p = P();
  std::lock_guard<std::mutex> lock(p.mu);
  int device = tls_device;
  if (device < 0 || device >= p.device_count) return cudaErrorInvalidDevice;
  int owner = -1;
  for (int d = 0; current && d < p.device_count; ++d) {
    if (current == p.primary[d]) owner = d;
  }
  if (current && owner < 0) return cudaSuccess;  // made current through the driver API
  if (owner >= 0) {
    unsigned flags = 0;
    int active = 0;
    api->primaryCtxGetState(owner, &flags, &active);
    if (!active) {
      p.primary[owner] = nullptr;  // reset underneath us (cudaDeviceReset, driver API)
    } else if (owner == device) {
      return cudaSuccess;
    }
  }
  if (!p.primary[device]) {
    CUcontext ctx = nullptr;
    CUresult r = api->primaryCtxRetain(&ctx, device);
    if (r != CUDA_SUCCESS) return FromDriver(r);
    p.primary[device] = ctx;
  }
  return FromDriver(api->ctxSetCurrent(p.primary[device]));
}

}  // namespace fakecuda_rt
