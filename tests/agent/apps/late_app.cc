// Allocates a buffer that agent_late_lib frees from its destructor at exit.
#include <cuda_runtime_api.h>

#include <cstdio>

extern "C" void late_lib_keep(void* buffer);

int main() {
  void* buffer = nullptr;
  cudaError_t r = cudaMalloc(&buffer, 7777);
  late_lib_keep(buffer);
  std::printf("main %d\n", r);
  return 0;
}
