#include "runtime_state.h"

#include <atomic>
#include <cstring>
#include <mutex>

namespace fakecuda_rt {
namespace {

constexpr int kMaxDevices = 8;

thread_local int tls_device = 0;
thread_local cudaError_t tls_last_error = cudaSuccess;

// The driver's private tables this runtime uses, as NVIDIA's does (see the fake driver's
// export_tables.cc): the runtime interface hands out each device's primary context, and the
// context-local storage keeps the runtime's state per context, so a call on an initialized
// context makes no driver call at all.
constexpr CUuuid kRuntimeInterfaceId = {{0x6b, char(0xd5), char(0xfb), 0x6c, 0x5b, char(0xf4),
                                         char(0xe7), 0x4a, char(0x89), char(0x87), char(0xd9), 0x39,
                                         0x12, char(0xfd), char(0x9d), char(0xf9)}};
constexpr CUuuid kLocalStorageId = {{char(0xc6), char(0x93), 0x33, 0x6e, 0x11, 0x21, char(0xdf),
                                     0x11, char(0xa8), char(0xc3), 0x68, char(0xf3), 0x55,
                                     char(0xd8), char(0x95), char(0x93)}};
using GetPrimaryFn = CUresult (*)(CUcontext*, CUdevice);
using StorageDestructor = void (*)(CUcontext, void*, void*);
using StoragePutFn = CUresult (*)(CUcontext, void*, void*, StorageDestructor);
using StorageDeleteFn = CUresult (*)(CUcontext, void*);
using StorageGetFn = CUresult (*)(void**, CUcontext, void*);

// What the runtime keeps in a context's local storage.
struct ContextState {
  int device = 0;
};

struct Process {
  std::once_flag once;
  const DriverApi* api = nullptr;
  cudaError_t init_error = cudaSuccess;
  int device_count = 0;
  GetPrimaryFn get_primary = nullptr;
  StoragePutFn storage_put = nullptr;
  StorageDeleteFn storage_delete = nullptr;
  StorageGetFn storage_get = nullptr;
  std::mutex mu;
  CUcontext primary[kMaxDevices] = {};  // handles from the runtime interface, fixed
  ContextState state[kMaxDevices];
  // Retained by this runtime, and not torn down since (the storage destructor clears it).
  std::atomic<bool> retained[kMaxDevices] = {};
};

Process& P() {
  static Process* process = new Process();  // leaked: used by atexit-time unregistration
  return *process;
}

// The driver calls this when a context with our state goes away (context reset or destroy).
void OnContextTornDown(CUcontext, void*, void* value) {
  P().retained[static_cast<ContextState*>(value)->device] = false;
}

// Like NVIDIA's runtime, release what this runtime retained when it is unloaded (at exit): the
// driver destroys the primary contexts and what they still hold.
struct ReleaseAtUnload {
  ~ReleaseAtUnload() {
    Process& p = P();
    if (!p.api) return;
    for (int d = 0; d < p.device_count; ++d) {
      if (!p.retained[d].exchange(false)) continue;
      p.storage_delete(p.primary[d], &p);
      p.api->primaryCtxRelease(d);
    }
  }
} release_at_unload;

bool LoadExportTables(Process& p) {
  const void* table = nullptr;
  if (!p.api->getExportTable || p.api->getExportTable(&table, &kRuntimeInterfaceId) != 0) {
    return false;
  }
  p.get_primary = reinterpret_cast<GetPrimaryFn>(static_cast<void* const*>(table)[2]);
  if (p.api->getExportTable(&table, &kLocalStorageId) != 0) return false;
  auto slots = static_cast<void* const*>(table);
  p.storage_put = reinterpret_cast<StoragePutFn>(slots[0]);
  p.storage_delete = reinterpret_cast<StorageDeleteFn>(slots[1]);
  p.storage_get = reinterpret_cast<StorageGetFn>(slots[2]);
  for (int d = 0; d < p.device_count; ++d) {
    if (p.get_primary(&p.primary[d], d) != CUDA_SUCCESS) return false;
    p.state[d].device = d;
  }
  return true;
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
    if (r == CUDA_SUCCESS && p.device_count > kMaxDevices) p.device_count = kMaxDevices;
    if (r != CUDA_SUCCESS) {
      p.init_error = FromDriver(r);
      p.api = nullptr;
    } else if (!LoadExportTables(p)) {
      p.init_error = cudaErrorCallRequiresNewerDriver;  // what NVIDIA's runtime answers then
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
  Process& p = P();
  const int device = tls_device;
  // The common case, without a driver call: the current context holds our state for the
  // thread's device.
  void* value = nullptr;
  if (p.storage_get(&value, nullptr, &p) == CUDA_SUCCESS &&
      static_cast<ContextState*>(value)->device == device) {
    return cudaSuccess;
  }
  std::lock_guard<std::mutex> lock(p.mu);
  if (device < 0 || device >= p.device_count) return cudaErrorInvalidDevice;
  CUcontext current = nullptr;
  api->ctxGetCurrent(&current);
  bool primary = false;
  for (int d = 0; current && d < p.device_count; ++d) primary |= current == p.primary[d];
  if (current && !primary) return cudaSuccess;  // made current through the driver API
  // As NVIDIA's runtime: make the primary context current first (the driver sets it up on
  // that first use), then retain it, then keep our state in it.
  if (current != p.primary[device]) {
    if (CUresult r = api->ctxSetCurrent(p.primary[device]); r != CUDA_SUCCESS) {
      return FromDriver(r);
    }
  }
  if (!p.retained[device]) {
    CUcontext ctx = nullptr;
    if (CUresult r = api->primaryCtxRetain(&ctx, device); r != CUDA_SUCCESS) return FromDriver(r);
    p.retained[device] = true;
  }
  return FromDriver(p.storage_put(p.primary[device], &p, &p.state[device], &OnContextTornDown));
}

}  // namespace fakecuda_rt
