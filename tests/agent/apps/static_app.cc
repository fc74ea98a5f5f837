// The CUDA runtime linked statically (the fake libcudart_static.a): the runtime API is inside
// the program and cannot be interposed; the agent sees the driver calls it makes through the
// cuGetProcAddress route. `static_app` allocates and frees two buffers.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  void* a = nullptr;
  void* b = nullptr;
  cudaError_t ra = cudaMalloc(&a, 1 << 20);
  cudaError_t rb = cudaMalloc(&b, 4096);
  std::printf("cudaMalloc %p %d\n", a, ra);
  std::printf("cudaMalloc %p %d\n", b, rb);
  std::printf("cudaFree %p %d\n", b, cudaFree(b));
  std::printf("cudaFree %p %d\n", a, cudaFree(a));
  return 0;
}
