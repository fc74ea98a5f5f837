// An ordinary nvcc-compiled CUDA program (built with -cudart shared): it must run unchanged on
// the fake runtime. Copies bytes host -> device -> host, launches a kernel (accepted, not
// executed by the fake), frees, and prints "ok" when everything succeeded.
#include <cstdio>
#include <vector>

__global__ void Scale(float* data, int n, float factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

#define CHECK(call)                                                                 \
  do {                                                                              \
    cudaError_t e = (call);                                                         \
    if (e != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorName(e));          \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

int main() {
  const int n = 1 << 16;
  std::vector<float> host(n), back(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i) * 0.5f;
  float* device = nullptr;
  CHECK(cudaMalloc(&device, n * sizeof(float)));
  CHECK(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Scale<<<(n + 255) / 256, 256>>>(device, n, 2.0f);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(back.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    if (back[i] != host[i]) {
      std::fprintf(stderr, "mismatch at %d\n", i);
      return 1;
    }
  }
  CHECK(cudaFree(device));
  std::printf("ok\n");
  return 0;
}
