// Test-app helper: the driver functions a test program uses, looked up the way the scenario
// says (dlsym on a libcuda handle, or cuGetProcAddress), never linked.
#ifndef FRAGSCOPE_TESTS_AGENT_APPS_DRIVER_API_H_
#define FRAGSCOPE_TESTS_AGENT_APPS_DRIVER_API_H_

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace fragscope::agent_test {

inline void* OpenLibcuda() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    std::exit(2);
  }
  return lib;
}

template <typename Fn>
Fn Sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    std::fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    std::exit(2);
  }
  return reinterpret_cast<Fn>(p);
}

// cuInit + primary context of device 0 made current.
inline void InitPrimaryContext(void* lib) {
  auto init = Sym<PFN_cuInit_v2000>(lib, "cuInit");
  auto device_get = Sym<PFN_cuDeviceGet_v2000>(lib, "cuDeviceGet");
  auto retain = Sym<PFN_cuDevicePrimaryCtxRetain_v7000>(lib, "cuDevicePrimaryCtxRetain");
  auto set_current = Sym<PFN_cuCtxSetCurrent_v4000>(lib, "cuCtxSetCurrent");
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (init(0) != CUDA_SUCCESS || device_get(&dev, 0) != CUDA_SUCCESS ||
      retain(&ctx, dev) != CUDA_SUCCESS || set_current(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "driver init failed\n");
    std::exit(2);
  }
}

}  // namespace fragscope::agent_test

#endif  // FRAGSCOPE_TESTS_AGENT_APPS_DRIVER_API_H_
