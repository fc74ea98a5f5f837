// Test program: allocates the bytes given on the command line, says "ready", and holds them
// until its standard input closes — a long-running job to look at with `fragscope top`. With a
// second argument R:N, the first line of input makes it say it is rank R of N
// (fragscope_set_rank), as an mp.spawn worker's init_process_group does through the PyTorch
// adapter, at a moment the test chooses.
#include <cuda_runtime_api.h>

#include "fragscope/annotate.h"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (64u << 20);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return 2;
  std::printf("ready\n");
  std::fflush(stdout);
  int rank = -1, world_size = -1;
  if (argc > 2 && std::sscanf(argv[2], "%d:%d", &rank, &world_size) == 2) {
    int c = 0;
    while ((c = std::getchar()) != EOF && c != '\n') {
    }
    fragscope_annotate_rank(rank, world_size);
  }
  while (std::getchar() != EOF) {
  }
  cudaFree(p);
  return 0;
}
