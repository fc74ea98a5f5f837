// Test program: allocates the bytes given on the command line, says "ready", and holds them
// until its standard input closes — a long-running job to look at with `fragscope top`.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (64u << 20);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return 2;
  std::printf("ready\n");
  std::fflush(stdout);
  while (std::getchar() != EOF) {
  }
  cudaFree(p);
  return 0;
}
