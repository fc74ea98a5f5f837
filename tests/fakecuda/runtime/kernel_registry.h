// Kernels and device variables registered by nvcc-generated code (__cudaRegisterFatBinary,
// __cudaRegisterFunction, __cudaRegisterVar), loaded lazily through the driver
// (cuLibraryLoadData + cuLibraryGetKernel / cuLibraryGetGlobal) at first use.
// Thread-safety: internal mutex. Ownership: registrations live until
// __cudaUnregisterFatBinary.
#pragma once

#include <cuda_runtime_api.h>

#include "driver_table.h"

namespace fakecuda_rt {

// The driver kernel for a host stub, or cudaErrorInvalidDeviceFunction when unregistered.
cudaError_t KernelFor(const DriverApi* api, const void* host_function, CUkernel* out);

// The device address and size of a device variable registered by nvcc's code (__device__,
// __constant__), from the driver's cuLibraryGetGlobal; cudaErrorInvalidSymbol when unregistered.
cudaError_t SymbolFor(const DriverApi* api, const void* host_variable, CUdeviceptr* address,
                      size_t* bytes);

}  // namespace fakecuda_rt
