// The fake libcudart.so.13 over the fake driver: documented runtime behaviour, error mapping
// and last-error semantics, entry points answered through the driver's cuGetProcAddress.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fakecuda/fakecuda.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <vector>

// Per-thread-default-stream exports, declared by the header only for per-thread builds.
extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
}

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported and used (PyTorch).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

constexpr uint64_t kPage = FAKECUDA_PAGE_BYTES;

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FAKECUDA_CAPACITY", "1G", 1);
    setenv("FAKECUDA_CTX_OVERHEAD", "10M", 1);
    unsetenv("FAKECUDA_FAIL_AT");
    unsetenv("FAKECUDA_NULL");
    fakecuda_reset();
    cudaGetLastError();
  }
};

void* DriverExport(const char* name) {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return handle ? dlsym(handle, name) : nullptr;
}

TEST_F(RuntimeTest, MallocFollowsTheDocumentation) {
  void* p = reinterpret_cast<void*>(1);
  EXPECT_EQ(cudaMalloc(&p, 0), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  // The runtime's primary context costs the configured overhead (10M -> 5 pages).
  EXPECT_EQ(fakecuda_used_bytes(0), 5 * kPage);
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  EXPECT_EQ(fakecuda_live_count(0), 1u);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
}

TEST_F(RuntimeTest, LastErrorIsPerCallNonStickyAndResetByGet) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 8ull << 30), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);  // success does not clear it
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_NE(std::strlen(cudaGetErrorString(cudaErrorMemoryAllocation)), 0u);
}

TEST_F(RuntimeTest, InjectedDriverFailureBecomesMemoryAllocation) {
  fakecuda_fail_nth_allocation(1);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(RuntimeTest, CopiesAndMemsetRoundTrip) {
  std::vector<unsigned char> in(10000), out(10000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i ^ 0x5a);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, in.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), d, out.size(), cudaMemcpyDefault, nullptr), cudaSuccess);
  EXPECT_EQ(in, out);
  ASSERT_EQ(cudaMemset(d, 0x7f, 100), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), d, 100, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out[0], 0x7f);
  EXPECT_EQ(out[99], 0x7f);
  EXPECT_EQ(cudaMemcpy(out.data(), d, 100, static_cast<cudaMemcpyKind>(9)),
            cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(d, in.data(), 20000, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(RuntimeTest, StreamOrderedAllocationsAndPools) {
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 1 << 20, stream), cudaSuccess);
  uint64_t reserved = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
            cudaSuccess);
  EXPECT_EQ(reserved, FAKECUDA_POOL_CHUNK_BYTES);
  ASSERT_EQ(cudaFreeAsync(p, stream), cudaSuccess);
  uint64_t used = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
  EXPECT_EQ(used, 1u << 20);  // pending until the stream is synchronized
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
            cudaSuccess);
  EXPECT_EQ(reserved, 0u);
  // Per-thread default stream variants reach the _ptsz driver entries.
  ASSERT_EQ(cudaMallocAsync_ptsz(&p, 100, nullptr), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync_ptsz(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize_ptsz(nullptr), cudaSuccess);
  EXPECT_EQ(fakecuda_live_count(0), 0u);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t mine = nullptr;
  ASSERT_EQ(cudaMemPoolCreate(&mine, &props), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 100, mine, stream), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemPoolTrimTo(mine, 0), cudaSuccess);
  ASSERT_EQ(cudaMemPoolDestroy(mine), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(RuntimeTest, DriverEntryPointsComeFromTheDriversProcAddress) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  ASSERT_EQ(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSuccess);
  EXPECT_EQ(fn, DriverExport("cuMemAlloc_v2"));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 2000, cudaEnableDefault, &status),
            cudaSuccess);
  EXPECT_EQ(fn, DriverExport("cuMemAlloc"));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, &status),
            cudaSuccess);
  EXPECT_EQ(fn, DriverExport("cuMemCreate"));
  ASSERT_EQ(cudaGetDriverEntryPoint("cuNoSuchThing", &fn, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
}

TEST_F(RuntimeTest, DevicePropertiesAndVersions) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_STREQ(prop.name, "fakecuda GPU 0");
  EXPECT_EQ(prop.totalGlobalMem, 1ull << 30);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.memoryPoolsSupported, 1);
  CUuuid uuid;
  ASSERT_EQ(cuDeviceGetUuid(&uuid, 0), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(uuid.bytes, prop.uuid.bytes, sizeof uuid.bytes), 0);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 3), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  int version = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13000);
  ASSERT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13000);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(total, 1ull << 30);
  EXPECT_EQ(free_bytes, total - fakecuda_used_bytes(0));
}

TEST_F(RuntimeTest, DeviceResetFreesEverythingAndTheRuntimeRecovers) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 8 << 20), cudaSuccess);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(fakecuda_live_count(0), 0u);
  EXPECT_EQ(fakecuda_used_bytes(0), 0u);
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_EQ(fakecuda_used_bytes(0), 6 * kPage);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// As NVIDIA's runtime: the primary context handle comes from the driver's runtime interface
// table, is made current and then retained exactly once; a context torn down underneath the
// runtime (a release by someone else, a reset) is set up and retained again on the next call.
TEST_F(RuntimeTest, PrimaryContextIsSetUpAsNvidiasRuntimeDoes) {
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  CUcontext current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  const CUuuid runtime_interface = {{0x6b, char(0xd5), char(0xfb), 0x6c, 0x5b, char(0xf4),
                                     char(0xe7), 0x4a, char(0x89), char(0x87), char(0xd9), 0x39,
                                     0x12, char(0xfd), char(0x9d), char(0xf9)}};
  const void* table = nullptr;
  ASSERT_EQ(cuGetExportTable(&table, &runtime_interface), CUDA_SUCCESS);
  CUcontext handle = nullptr;
  auto get_primary =
      reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(static_cast<void* const*>(table)[2]);
  ASSERT_EQ(get_primary(&handle, 0), CUDA_SUCCESS);
  EXPECT_EQ(current, handle);
  unsigned flags = 0;
  int active = 0;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  // One reference is the runtime's: releasing it destroys the context.
  ASSERT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  // After a reset too, exactly one reference again.
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // leave it set up for the next test
}

TEST_F(RuntimeTest, OtherAllocationFamilies) {
  void* p = nullptr;
  size_t pitch = 0;
  ASSERT_EQ(cudaMallocPitch(&p, &pitch, 100, 4), cudaSuccess);
  EXPECT_EQ(pitch, 512u);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  cudaPitchedPtr pitched{};
  ASSERT_EQ(cudaMalloc3D(&pitched, cudaExtent{64, 4, 2}), cudaSuccess);
  EXPECT_EQ(pitched.pitch, 512u);
  EXPECT_EQ(pitched.ysize, 4u);
  EXPECT_EQ(cudaFree(pitched.ptr), cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(&p, 4096, cudaMemAttachGlobal), cudaSuccess);
  cudaPointerAttributes attributes;
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, p), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeManaged);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  int local = 0;
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, &local), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered);
  void* host = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, 1 << 20), cudaSuccess);
  std::memset(host, 1, 1 << 20);
  EXPECT_EQ(fakecuda_live_count(0), 0u);  // pinned host memory is not device memory
  EXPECT_EQ(cudaFreeHost(host), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(&local, sizeof local, 0), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(&local), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(&local), cudaErrorHostMemoryNotRegistered);
}

TEST_F(RuntimeTest, CaptureAndGraphs) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus status;
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&p, 1 << 20, stream), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(fakecuda_live_count(0), 0u);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
