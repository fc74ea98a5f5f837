// A plain C++ program on the fake runtime, built twice (shared libcudart.so.13 and static
// libcudart_static.a) and run by the process tests with FAKECUDA_* variables.
//   runtime_probe live : leaves a known live set and prints it as "kind 0xaddress size device"
//   runtime_probe oom  : three 1 MiB cudaMalloc calls, prints each result's name
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

namespace {

int Live() {
  void* small = nullptr;
  void* big = nullptr;
  void* freed = nullptr;
  void* async = nullptr;
  if (cudaMalloc(&small, 1000) != cudaSuccess || cudaMalloc(&big, 3 << 20) != cudaSuccess ||
      cudaMalloc(&freed, 5 << 20) != cudaSuccess ||
      cudaMallocAsync(&async, 5000, nullptr) != cudaSuccess) {
    std::fprintf(stderr, "allocation failed: %s\n", cudaGetErrorName(cudaGetLastError()));
    return 1;
  }
  unsigned char bytes[1000];
  for (int i = 0; i < 1000; ++i) bytes[i] = static_cast<unsigned char>(i);
  unsigned char back[1000] = {};
  if (cudaMemcpy(small, bytes, sizeof bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(back, small, sizeof back, cudaMemcpyDeviceToHost) != cudaSuccess ||
      std::memcmp(bytes, back, sizeof bytes) != 0) {
    std::fprintf(stderr, "copy round trip failed\n");
    return 1;
  }
  cudaFree(freed);
  cudaStreamSynchronize(nullptr);
  std::printf("device %p %d 0\n", small, 1000);
  std::printf("device %p %d 0\n", big, 3 << 20);
  std::printf("async %p %d 0\n", async, 5000);
  return 0;
}

int Oom() {
  for (int i = 0; i < 3; ++i) {
    void* p = nullptr;
    std::printf("%s\n", cudaGetErrorName(cudaMalloc(&p, 1 << 20)));
  }
  std::printf("last %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "live") == 0) return Live();
  if (argc == 2 && std::strcmp(argv[1], "oom") == 0) return Oom();
  std::fprintf(stderr, "usage: %s live|oom\n", argv[0]);
  return 2;
}
