// Modules, libraries, kernels and what NVIDIA's libraries ask about them: loading mode,
// globals, function attributes, occupancy and context limits. Nothing is compiled or run.
#include <cstring>

#include "driver_fixture.h"

namespace fakecuda_test {
namespace {

using ModuleTest = DriverTest;

const char kImage[] = "not parsed";

TEST_F(ModuleTest, LoadingModeIsLazy) {
  CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
  ASSERT_EQ(cuModuleGetLoadingMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_MODULE_LAZY_LOADING);
  EXPECT_EQ(cuModuleGetLoadingMode(nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ModuleTest, GlobalsAreStableZeroedAndCopyable) {
  CUlibrary library = nullptr;
  ASSERT_EQ(cuLibraryLoadData(&library, kImage, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  const uint64_t used = fakecuda_used_bytes(0);
  CUdeviceptr global = 0, again = 0, other = 0;
  size_t bytes = 0;
  ASSERT_EQ(cuLibraryGetGlobal(&global, &bytes, library, "_ZN6cublas8internal15deviceConstantsE"),
            CUDA_SUCCESS);
  ASSERT_NE(global, 0u);
  ASSERT_GE(bytes, 4096u);
  ASSERT_EQ(cuLibraryGetGlobal(&again, nullptr, library, "_ZN6cublas8internal15deviceConstantsE"),
            CUDA_SUCCESS);
  EXPECT_EQ(again, global);
  ASSERT_EQ(cuLibraryGetGlobal(&other, nullptr, library, "another"), CUDA_SUCCESS);
  EXPECT_NE(other, global);
  // Zeroed, and the copy functions treat it as device memory.
  std::vector<unsigned char> back(bytes, 0xff);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), global, bytes), CUDA_SUCCESS);
  EXPECT_EQ(back, std::vector<unsigned char>(bytes, 0));
  const double value = 2.5;
  ASSERT_EQ(cuMemcpyHtoD(global + 8, &value, sizeof value), CUDA_SUCCESS);
  double read = 0;
  ASSERT_EQ(cuMemcpyDtoH(&read, global + 8, sizeof read), CUDA_SUCCESS);
  EXPECT_EQ(read, 2.5);
  EXPECT_EQ(cuMemcpyHtoD(global + bytes - 4, &value, sizeof value), CUDA_ERROR_INVALID_VALUE);
  // Never charged to the device, never in the live table.
  EXPECT_EQ(fakecuda_used_bytes(0), used);
  EXPECT_EQ(fakecuda_live_count(0), 0u);

  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, kImage), CUDA_SUCCESS);
  CUdeviceptr module_global = 0;
  ASSERT_EQ(cuModuleGetGlobal(&module_global, &bytes, module, "symbol"), CUDA_SUCCESS);
  EXPECT_NE(module_global, 0u);
  EXPECT_EQ(cuModuleGetGlobal(&module_global, &bytes, module, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleGetGlobal(&module_global, &bytes, module, "symbol"), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);
}

TEST_F(ModuleTest, KernelAndFunctionAttributes) {
  CUlibrary library = nullptr;
  ASSERT_EQ(cuLibraryLoadData(&library, kImage, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  CUkernel kernel = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&kernel, library, "k"), CUDA_SUCCESS);
  CUlibrary owner = nullptr;
  ASSERT_EQ(cuKernelGetLibrary(&owner, kernel), CUDA_SUCCESS);
  EXPECT_EQ(owner, library);
  int value = 0;
  ASSERT_EQ(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 1024);
  ASSERT_EQ(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel, 0), CUDA_SUCCESS);
  EXPECT_GT(value, 0);
  // What libraries raise before launching big-shared-memory kernels, and read back.
  ASSERT_EQ(
      cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200000, kernel, 0),
      CUDA_SUCCESS);
  ASSERT_EQ(
      cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel, 0),
      CUDA_SUCCESS);
  EXPECT_EQ(value, 200000);
  EXPECT_EQ(
      cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 20, kernel, 0),
      CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, 8, kernel, 0),
            CUDA_ERROR_INVALID_VALUE);  // read-only

  CUfunction function = nullptr;
  ASSERT_EQ(cuKernelGetFunction(&function, kernel), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, function),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 200000);
  EXPECT_EQ(cuFuncSetCacheConfig(function, CU_FUNC_CACHE_PREFER_SHARED), CUDA_SUCCESS);
  EXPECT_EQ(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX, function), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, nullptr),
            CUDA_ERROR_INVALID_HANDLE);

  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, kImage), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&function, module, "f"), CUDA_SUCCESS);
  CUmodule function_module = nullptr;
  ASSERT_EQ(cuFuncGetModule(&function_module, function), CUDA_SUCCESS);
  EXPECT_EQ(function_module, module);
}

TEST_F(ModuleTest, OccupancyIsPlausible) {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, kImage), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&function, module, "f"), CUDA_SUCCESS);
  int blocks = 0;
  ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, function, 256, 0), CUDA_SUCCESS);
  EXPECT_EQ(blocks, 8);  // 2048 threads per SM
  ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, function, 1024, 0, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, function, 0, 0),
            CUDA_ERROR_INVALID_VALUE);
  size_t smem = 0;
  ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&smem, function, 1, 128), CUDA_SUCCESS);
  EXPECT_EQ(smem, 232448u);
  int min_grid = 0, block = 0;
  ASSERT_EQ(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, function, nullptr, 0, 256),
            CUDA_SUCCESS);
  EXPECT_EQ(block, 256);
  EXPECT_GT(min_grid, 0);
  // Clusters live inside a GPC: with one 227 KiB block per SM, fewer fit as they grow, and
  // sizes over 8 need the kernel's non-portable permission, over 16 are refused.
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 2;
  cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = 132;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = 232448;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config), CUDA_SUCCESS);
  EXPECT_EQ(clusters, 66);
  cluster.value.clusterDim.x = 8;
  ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config), CUDA_SUCCESS);
  EXPECT_EQ(clusters, 14);  // 2 per 16- or 18-SM GPC, 1 per 14-SM one
  cluster.value.clusterDim.x = 16;
  EXPECT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config),
            CUDA_ERROR_INVALID_CLUSTER_SIZE);
  ASSERT_EQ(cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
            CUDA_SUCCESS);
  ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config), CUDA_SUCCESS);
  EXPECT_EQ(clusters, 6);  // none in the 14-SM GPCs
  cluster.value.clusterDim.x = 32;
  EXPECT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config),
            CUDA_ERROR_INVALID_CLUSTER_SIZE);
  // A block too big for shared memory fits nowhere.
  EXPECT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, function, 128, 240000),
            CUDA_SUCCESS);
  EXPECT_EQ(blocks, 0);
}

TEST_F(ModuleTest, ContextLimits) {
  size_t value = 0;
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 1024u);
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 8u << 20);
  ASSERT_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 4096u);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_SHMEM_SIZE, 1), CUDA_ERROR_INVALID_VALUE);  // query only
  EXPECT_EQ(cuCtxGetLimit(&value, CU_LIMIT_MAX), CUDA_ERROR_INVALID_VALUE);
  // A reset context starts again from the defaults.
  ASSERT_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 1024u);
}

}  // namespace
}  // namespace fakecuda_test
