// Before cuInit every driver call but a few documented ones fails with NOT_INITIALIZED. Its
// own binary: the process must never have called cuInit.
#include <cuda.h>
#include <gtest/gtest.h>

namespace {

TEST(InitTest, CallsBeforeCuInitFail) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  int count = -1;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);  // allowed before cuInit
  EXPECT_EQ(version, 13000);
  void* pfn = nullptr;
  EXPECT_EQ(cuGetProcAddress("cuInit", &pfn, 2000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
}

}  // namespace
