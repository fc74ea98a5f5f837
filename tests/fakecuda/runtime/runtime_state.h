// Process state of the fake runtime: lazy initialization, the primary context per device,
// the calling thread's device and last error, and driver -> runtime error mapping.
//
// Thread-safety: Init() and the context helpers are safe from any thread (internal mutex);
// the current device and last error are per thread, as in the real runtime.
#pragma once

#include <cuda_runtime_api.h>

#include "driver_table.h"

namespace fakecuda_rt {

// The driver table after cuInit, or nullptr with *error set (cached: the first failure is
// returned by every later call, like the real runtime's initialization error).
const DriverApi* Init(cudaError_t* error);

// Init + makes sure the calling thread has a current context: the runtime's primary context
// of the thread's device, unless the thread already has another one current. As in NVIDIA's
// runtime, the primary context is made current before it is retained, the runtime's state
// lives in the context's local storage (so an initialized thread makes no driver call here),
// and what was retained is released when the runtime is unloaded. Fills *api.
cudaError_t EnsureContext(const DriverApi** api);

// The thread's current device ordinal (cudaSetDevice), default 0.
int& CurrentDevice();

// Records a failure as the thread's last error (non-sticky) and returns it.
cudaError_t Record(cudaError_t error);
cudaError_t& LastError();

// Maps a driver result the way libcudart does (OUT_OF_MEMORY -> cudaErrorMemoryAllocation, ...).
cudaError_t FromDriver(CUresult result);

// Device count seen at initialization.
int DeviceCount();

}  // namespace fakecuda_rt
