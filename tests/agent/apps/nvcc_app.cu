// An ordinary nvcc-compiled program (built with -cudart shared when nvcc is found), run on the
// fake device with the agent preloaded: registration, kernel launches on the default and a
// created stream, a device variable written with cudaMemcpyToSymbol, kernel attribute and
// occupancy queries, copies, and plain and stream-ordered allocations.
#include <cuda_runtime.h>

#include <cstdio>

__device__ float g_scale[64];

__global__ void Fill(float* data, float value) { data[threadIdx.x] = value * g_scale[0]; }
__global__ void Scale(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= 2.0f;
}

int main() {
  float* data = nullptr;
  cudaError_t r = cudaMalloc(&data, 256 * sizeof(float));
  std::printf("cudaMalloc %p %d\n", static_cast<void*>(data), r);
  float scale[64] = {3.0f};
  std::printf("symbol %d\n", static_cast<int>(cudaMemcpyToSymbol(g_scale, scale, sizeof scale)));
  cudaFuncAttributes attributes{};
  std::printf("attributes %d\n", static_cast<int>(cudaFuncGetAttributes(&attributes, Scale)));
  int blocks = 0;
  std::printf("occupancy %d\n", static_cast<int>(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                    &blocks, Scale, 128, 0)));
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
  Scale<<<2048, 128, 0, stream>>>(static_cast<float*>(async), 1 << 18);
  std::printf("stream_launch %d\n", static_cast<int>(cudaGetLastError()));
  std::printf("cudaFreeAsync %p %d\n", async, cudaFreeAsync(async, stream));
  std::printf("sync %d\n", static_cast<int>(cudaStreamSynchronize(stream)));
  cudaStreamDestroy(stream);
  std::printf("cudaFree %p %d\n", static_cast<void*>(data), cudaFree(data));
  return 0;
}
