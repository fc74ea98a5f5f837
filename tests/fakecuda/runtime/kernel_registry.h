// Kernels registered by nvcc-generated code (__cudaRegisterFatBinary/__cudaRegisterFunction),
// loaded lazily through the driver (cuLibraryLoadData + cuLibraryGetKernel) at first use.
// Thread-safety: internal mutex. Ownership: registrations live until
// __cudaUnregisterFatBinary.
#pragma once

#include <cuda_runtime_api.h>

#include "driver_table.h"

namespace fakecuda_rt {

// The driver kernel for a host stub, or cudaErrorInvalidDeviceFunction when unregistered.
cudaError_t KernelFor(const DriverApi* api, const void* host_function, CUkernel* out);

}  // namespace fakecuda_rt
