// A program for the report's verdict and the collector's post-mortem files:
//   clean        allocates and frees a little, exits 0
//   retry N      asks N times for more than the device holds (a retry loop that never
//                recovers), exits 1
//   hang         one failed request, then waits on stdin (a job that hangs after its OOM)
//   recover DIR  holds 3 GiB, fails a 2 GiB request, waits until a post-mortem file
//                (*.oom-*.txt) is in DIR, frees the 3 GiB and allocates 2 GiB, exits 0
// Run it on a fake device of 4 GiB (FAKECUDA_CAPACITY=4G) for `recover`.
#include <cuda_runtime_api.h>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

bool HasPostMortem(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.find(".oom-") != std::string::npos && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".txt") == 0) {
      found = true;
    }
  }
  closedir(d);
  return found;
}

}  // namespace

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
  if (argc == 2 && std::strcmp(argv[1], "hang") == 0) {
    void* p = nullptr;
    if (cudaMalloc(&p, size_t{64} << 30) == cudaSuccess) return 2;
    std::printf("failed\n");
    std::fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 1;
  }
  if (argc == 3 && std::strcmp(argv[1], "recover") == 0) {
    void* hog = nullptr;
    void* p = nullptr;
    if (cudaMalloc(&hog, size_t{3} << 30) != cudaSuccess) return 2;
    if (cudaMalloc(&p, size_t{2} << 30) == cudaSuccess) return 2;  // does not fit beside it
    for (int i = 0; i < 600 && !HasPostMortem(argv[2]); ++i) usleep(100000);
    cudaFree(hog);
    if (cudaMalloc(&p, size_t{2} << 30) != cudaSuccess) return 3;
    cudaFree(p);
    return 0;
  }
  std::fprintf(stderr, "usage: %s clean | retry N | hang | recover DIR\n", argv[0]);
  return 2;
}
