// Streams, events, stream capture, graphs, launches and failure-only API injection.
#include <thread>

#include "driver_fixture.h"

namespace fakecuda_test {
namespace {

using StreamTest = DriverTest;

TEST_F(StreamTest, StreamHandlesAreValidated) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  unsigned flags = 0;
  ASSERT_EQ(cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_STREAM_NON_BLOCKING});
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamCreate(&s, 0x80), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(StreamTest, CaptureProducesAGraphAndKeepsGraphMemory) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // legacy stream cannot capture
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  const uint64_t used = fakecuda_used_bytes(0);
  CUdeviceptr g = 0, kept = 0;
  ASSERT_EQ(cuMemAllocAsync(&g, 3 * kMiB, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&kept, 1000, s), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + 3 * kPage);
  ASSERT_EQ(cuMemFreeAsync(g, s), CUDA_SUCCESS);  // freed inside the graph
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  ASSERT_NE(graph, nullptr);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphUpload(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + 3 * kPage);  // the exec still owns it
  ASSERT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + kPage);  // only `kept` (not freed by the graph)
  std::vector<fakecuda_live_entry> live(fakecuda_live_list(nullptr, 0));
  fakecuda_live_list(live.data(), live.size());
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].kind, FAKECUDA_KIND_GRAPH);
  EXPECT_EQ(live[0].address, kept);
  ASSERT_EQ(cuMemFreeAsync(kept, s), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
}

TEST_F(StreamTest, UnsafeCallsDuringGlobalCaptureInvalidateIt) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUstreamCaptureStatus status;
  ASSERT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(graph, nullptr);
  // Relaxed mode on this thread allows the same call during capture.
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  EXPECT_EQ(cuMemAlloc(&p, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(StreamTest, ThreadLocalCaptureDoesNotRestrictOtherThreads) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CUresult other = CUDA_ERROR_UNKNOWN;
  CUdeviceptr p = 0;
  std::thread worker([&] {
    cuCtxSetCurrent(primary_);
    other = cuMemAlloc(&p, 64);
  });
  worker.join();
  EXPECT_EQ(other, CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(StreamTest, KernelsAreAcceptedNotExecuted) {
  const char image[] = "not a real cubin";
  CUlibrary library = nullptr;
  ASSERT_EQ(cuLibraryLoadData(&library, image, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  CUkernel kernel = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&kernel, library, "add"), CUDA_SUCCESS);
  CUfunction function = nullptr;
  ASSERT_EQ(cuKernelGetFunction(&function, kernel), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(kernel), 4, 1, 1, 32, 1, 1, 0, nullptr,
                           nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(function, 0, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(function, 1, 1, 1, 2048, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  CUmodule module = nullptr;
  EXPECT_EQ(cuModuleLoad(&module, "/nonexistent/file.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);
}

class FailCallsTest : public DriverTest {
  std::map<std::string, std::string> Env() override {
    auto env = DriverTest::Env();
    env["FAKECUDA_FAIL_CALLS"] = "cuLaunchKernel:2,cuGraphInstantiate:1,cuModuleLoad:1";
    return env;
  }
};

TEST_F(FailCallsTest, FailureOnlyApisCanBeMadeToRunOutOfMemory) {
  CUmodule module = nullptr;
  const char image[] = "x";
  EXPECT_EQ(cuModuleLoadData(&module, image), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuModuleLoadData(&module, image), CUDA_SUCCESS);
  CUfunction f = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&f, module, "k"), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_OUT_OF_MEMORY);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  EXPECT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
}

TEST_F(StreamTest, EventsTimeAndValidate) {
  CUevent a = nullptr, b = nullptr;
  ASSERT_EQ(cuEventCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&b, 0), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);  // not recorded
  ASSERT_EQ(cuEventRecord(a, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(b, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
  EXPECT_GE(ms, 0.0f);
  ASSERT_EQ(cuEventDestroy(a), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(a), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy(b), CUDA_SUCCESS);
}

}  // namespace
}  // namespace fakecuda_test
