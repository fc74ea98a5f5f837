// A library whose destructor uses CUDA: it runs in _dl_fini, possibly after the agent's own
// destructor. The agent must still record these calls and end the stream after them.
#include <cuda_runtime_api.h>

#include <cstdio>

namespace {
void* g_buffer = nullptr;

__attribute__((destructor)) void FreeAtUnload() {
  cudaError_t freed = cudaFree(g_buffer);
  void* late = nullptr;
  cudaError_t allocated = cudaMalloc(&late, 4444);
  if (allocated == cudaSuccess) cudaFree(late);
  std::printf("fini free %d malloc %d\n", freed, allocated);
}
}  // namespace

extern "C" void late_lib_keep(void* buffer) { g_buffer = buffer; }
