// A library that uses the CUDA runtime it is linked against (DT_NEEDED libcudart.so.12 or .13),
// as a Python extension (PyTorch cu12, CuPy cu13) does. cu12_app dlopen()s one built for each
// runtime with RTLD_LOCAL, as Python loads extension modules, so neither runtime is in the
// global scope.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>

// Prints "runtime <version>", then "<what> <address> <size> <result>" for one cudaMalloc of
// `size` bytes and its cudaFree; returns 0 when both succeeded.
extern "C" __attribute__((visibility("default"))) int plugin_run(size_t size) {
  int version = 0;
  cudaRuntimeGetVersion(&version);
  std::printf("runtime %d\n", version);
  void* p = nullptr;
  cudaError_t r = cudaMalloc(&p, size);
  std::printf("malloc %p %zu %d\n", p, size, static_cast<int>(r));
  cudaError_t f = cudaFree(p);
  std::printf("free %p %zu %d\n", p, size, static_cast<int>(f));
  return r == cudaSuccess && f == cudaSuccess ? 0 : 1;
}
