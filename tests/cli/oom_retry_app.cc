// A program for the report's verdict: `clean` allocates and frees a little and exits 0;
// `retry N` asks N times for more than the device holds (a retry loop that never recovers),
// then exits 1.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "clean") == 0) {
    void* p[4] = {};
    for (void*& q : p) {
      if (cudaMalloc(&q, 64u << 20) != cudaSuccess) return 2;
    }
    for (void* q : p) cudaFree(q);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "retry") == 0) {
    const int n = std::atoi(argv[2]);
    for (int i = 0; i < n; ++i) {
      void* p = nullptr;
      if (cudaMalloc(&p, size_t{64} << 30) == cudaSuccess) return 2;  // 64 GiB: never fits
    }
    std::fprintf(stderr, "oom_retry_app: %d failed requests, giving up\n", n);
    return 1;
  }
  std::fprintf(stderr, "usage: %s clean | retry N\n", argv[0]);
  return 2;
}
