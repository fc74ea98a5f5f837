// A program linked against the fake libcudart.so.12 (its cuda* symbols bind to version node
// libcudart.so.12, as a program built against NVIDIA's CUDA 12 runtime does). Run by
// cu12_test.cc with and without the agent preloaded.
//   cu12_app malloc : cudaMalloc 1 MiB and 300 bytes, frees both; prints
//                     "runtime <version>", then "<what> <address> <size> <result>" per call
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

namespace {

int Malloc() {
  int version = 0;
  cudaRuntimeGetVersion(&version);
  std::printf("runtime %d\n", version);
  void* big = nullptr;
  void* small = nullptr;
  cudaError_t r = cudaMalloc(&big, 1 << 20);
  std::printf("malloc %p %d %d\n", big, 1 << 20, static_cast<int>(r));
  r = cudaMalloc(&small, 300);
  std::printf("malloc %p %d %d\n", small, 300, static_cast<int>(r));
  r = cudaFree(small);
  std::printf("free %p %d %d\n", small, 300, static_cast<int>(r));
  r = cudaFree(big);
  std::printf("free %p %d %d\n", big, 1 << 20, static_cast<int>(r));
  return big && small ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "malloc") == 0) return Malloc();
  std::fprintf(stderr, "usage: %s malloc\n", argv[0]);
  return 2;
}
