// nvcc 13 registration and launch entry points (__cudaRegister*, __cudaGetKernel,
// __cudaLaunchKernel, call configuration). Kernels are accepted, never executed.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernel_registry.h"
#include "runtime_state.h"

using namespace fakecuda_rt;

namespace {

struct FatBinary {
  void* handle_slot = nullptr;  // what nvcc's code sees through the void** handle
  const void* image = nullptr;  // the __fatBinC_Wrapper_t nvcc passed in
  CUlibrary library = nullptr;  // loaded on first use
};

struct KernelEntry {
  FatBinary* binary = nullptr;
  std::string name;
  CUkernel kernel = nullptr;
};

struct VariableEntry {
  FatBinary* binary = nullptr;
  std::string name;
  size_t bytes = 0;  // as nvcc registered it
};

struct Registry {
  std::mutex mu;
  std::map<const void*, KernelEntry> kernels;      // host stub -> kernel
  std::map<const void*, VariableEntry> variables;  // host shadow -> device variable
};

// Loads the binary's library on first use. Expects R().mu held.
CUresult LoadLibraryLocked(const DriverApi* api, FatBinary* binary) {
  if (binary->library) return CUDA_SUCCESS;
  return api->libraryLoadData(&binary->library, binary->image, nullptr, nullptr, 0, nullptr,
                              nullptr, 0);
}

Registry& R() {
  static Registry* registry = new Registry();  // leaked: unregistration runs at exit
  return *registry;
}

struct LaunchConfig {
  dim3 grid, block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
};

thread_local std::vector<LaunchConfig> tls_configs;

cudaError_t LaunchKernelHandle(CUkernel kernel, dim3 grid, dim3 block, void** args, size_t shared,
                               cudaStream_t stream, bool per_thread) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  auto launch = per_thread ? api->launchKernel_ptsz : api->launchKernel;
  // Since CUDA 12 a CUkernel may be passed where a CUfunction is expected.
  return Record(
      FromDriver(launch(reinterpret_cast<CUfunction>(kernel), grid.x, grid.y, grid.z, block.x,
                        block.y, block.z, static_cast<unsigned>(shared), stream, args, nullptr)));
}

}  // namespace

namespace fakecuda_rt {

cudaError_t KernelFor(const DriverApi* api, const void* host_function, CUkernel* out) {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.kernels.find(host_function);
  if (it == r.kernels.end()) return cudaErrorInvalidDeviceFunction;
  KernelEntry& entry = it->second;
  if (!entry.kernel) {
    if (CUresult res = LoadLibraryLocked(api, entry.binary); res != CUDA_SUCCESS) {
      return FromDriver(res);
    }
    CUresult res = api->libraryGetKernel(&entry.kernel, entry.binary->library, entry.name.c_str());
    if (res != CUDA_SUCCESS) return FromDriver(res);
  }
  *out = entry.kernel;
  return cudaSuccess;
}

cudaError_t SymbolFor(const DriverApi* api, const void* host_variable, CUdeviceptr* address,
                      size_t* bytes) {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.variables.find(host_variable);
  if (it == r.variables.end()) return cudaErrorInvalidSymbol;
  VariableEntry& entry = it->second;
  if (CUresult res = LoadLibraryLocked(api, entry.binary); res != CUDA_SUCCESS) {
    return FromDriver(res);
  }
  size_t driver_bytes = 0;
  CUresult res =
      api->libraryGetGlobal(address, &driver_bytes, entry.binary->library, entry.name.c_str());
  if (res != CUDA_SUCCESS) return FromDriver(res);
  // The fake driver does not parse images: its globals are at least as big as any variable.
  *bytes = entry.bytes;
  return driver_bytes >= entry.bytes ? cudaSuccess : cudaErrorInvalidSymbol;
}

}  // namespace fakecuda_rt

extern "C" {

void** __cudaRegisterFatBinary(void* fatCubin) {
  auto* binary = new FatBinary();
  binary->image = fatCubin;
  binary->handle_slot = binary;
  return &binary->handle_slot;
}

void __cudaRegisterFatBinaryEnd(void**) {}

void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  if (!fatCubinHandle) return;
  auto* binary = static_cast<FatBinary*>(*fatCubinHandle);
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto it = r.kernels.begin(); it != r.kernels.end();) {
    it = it->second.binary == binary ? r.kernels.erase(it) : std::next(it);
  }
  for (auto it = r.variables.begin(); it != r.variables.end();) {
    it = it->second.binary == binary ? r.variables.erase(it) : std::next(it);
  }
  // The library is not unloaded: at exit the driver may already be finalizing, and the fake
  // driver frees nothing for it anyway.
  delete binary;
}

void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char*,
                            const char* deviceName, int, uint3*, uint3*, dim3*, dim3*, int*) {
  if (!fatCubinHandle || !hostFun || !deviceName) return;
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  KernelEntry& entry = r.kernels[hostFun];
  entry.binary = static_cast<FatBinary*>(*fatCubinHandle);
  entry.name = deviceName;
  entry.kernel = nullptr;
}

void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char*, const char* deviceName, int,
                       size_t size, int, int) {
  if (!fatCubinHandle || !hostVar || !deviceName) return;
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  r.variables[hostVar] = {static_cast<FatBinary*>(*fatCubinHandle), deviceName, size};
}
void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}

char __cudaInitModule(void**) { return 1; }

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream) {
  tls_configs.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) {
  if (tls_configs.empty()) return cudaErrorMissingConfiguration;
  LaunchConfig config = tls_configs.back();
  tls_configs.pop_back();
  *gridDim = config.grid;
  *blockDim = config.block;
  *sharedMem = config.shared;
  *static_cast<cudaStream_t*>(stream) = config.stream;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  if (!kernel) return Record(cudaErrorInvalidValue);
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  CUkernel out = nullptr;
  if (cudaError_t e = KernelFor(api, hostFun, &out); e != cudaSuccess) return Record(e);
  *kernel = reinterpret_cast<cudaKernel_t>(out);
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream) {
  return LaunchKernelHandle(reinterpret_cast<CUkernel>(kernel), gridDim, blockDim, args, sharedMem,
                            stream, false);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                    size_t sharedMem, cudaStream_t stream) {
  return LaunchKernelHandle(reinterpret_cast<CUkernel>(kernel), gridDim, blockDim, args, sharedMem,
                            stream, true);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                             size_t sharedMem, cudaStream_t stream) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  CUkernel kernel = nullptr;
  if (cudaError_t e = KernelFor(api, func, &kernel); e != cudaSuccess) return Record(e);
  return LaunchKernelHandle(kernel, gridDim, blockDim, args, sharedMem, stream, false);
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                  size_t sharedMem, cudaStream_t stream) {
  const DriverApi* api = nullptr;
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e);
  CUkernel kernel = nullptr;
  if (cudaError_t e = KernelFor(api, func, &kernel); e != cudaSuccess) return Record(e);
  return LaunchKernelHandle(kernel, gridDim, blockDim, args, sharedMem, stream, true);
}

}  // extern "C"
