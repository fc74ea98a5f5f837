// An ordinary nvcc-compiled program (built with -cudart shared when nvcc is found), run on the
// fake device with the agent preloaded: registration, a kernel launch, copies, allocations.
#include <cuda_runtime.h>

#include <cstdio>

__global__ void Fill(float* data, float value) { data[threadIdx.x] = value; }

int main() {
  float* data = nullptr;
  cudaError_t r = cudaMalloc(&data, 256 * sizeof(float));
  std::printf("cudaMalloc %p %d\n", static_cast<void*>(data), r);
  Fill<<<1, 256>>>(data, 2.0f);
  std::printf("launch %d\n", static_cast<int>(cudaGetLastError()));
  float host[256] = {};
  r = cudaMemcpy(host, data, sizeof(host), cudaMemcpyDeviceToHost);
  std::printf("copy %d\n", r);
  void* async = nullptr;
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  r = cudaMallocAsync(&async, 1 << 20, stream);
  std::printf("cudaMallocAsync %p %d\n", async, r);
  std::printf("cudaFreeAsync %p %d\n", async, cudaFreeAsync(async, stream));
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  std::printf("cudaFree %p %d\n", static_cast<void*>(data), cudaFree(data));
  return 0;
}
