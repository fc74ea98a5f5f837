// Plain device memory on the fake driver: page accounting, errors, copies, failure injection.
#include <cstring>
#include <thread>
#include <vector>

#include "driver_fixture.h"

namespace fakecuda_test {
namespace {

using MemoryTest = DriverTest;

TEST_F(MemoryTest, SmallAllocationsShareOnePageAndLargeOnesTakeWholePages) {
  const uint64_t overhead_pages = (10 * kMiB + kPage - 1) / kPage;
  EXPECT_EQ(fakecuda_used_bytes(0), overhead_pages * kPage);
  const uint64_t free_before = FreeBytes();
  EXPECT_EQ(free_before, (1ull << 30) - overhead_pages * kPage);

  CUdeviceptr small = 0, large = 0, small2 = 0;
  ASSERT_EQ(cuMemAlloc(&small, 4096), CUDA_SUCCESS);
  // 4 KiB opens one shared 2 MiB page.
  EXPECT_EQ(FreeBytes(), free_before - kPage);
  ASSERT_EQ(cuMemAlloc(&large, 3 * kMiB), CUDA_SUCCESS);
  // 3 MiB needs two whole pages.
  EXPECT_EQ(FreeBytes(), free_before - 3 * kPage);
  ASSERT_EQ(cuMemAlloc(&small2, 1000), CUDA_SUCCESS);
  // Fits in the shared page, next 512-byte slot.
  EXPECT_EQ(FreeBytes(), free_before - 3 * kPage);
  EXPECT_EQ(small2, small + 4096);
  EXPECT_EQ(large % kPage, 0u);
  EXPECT_EQ(fakecuda_live_count(0), 3u);

  ASSERT_EQ(cuMemFree(small), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), free_before - 3 * kPage);  // page still holds small2
  ASSERT_EQ(cuMemFree(small2), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), free_before - 2 * kPage);
  ASSERT_EQ(cuMemFree(large), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), free_before);
  EXPECT_EQ(fakecuda_live_count(0), 0u);
}

TEST_F(MemoryTest, PagesNeedNotBeContiguous) {
  // Fill the device with 2 MiB allocations, free every other one, then ask for more than any
  // contiguous hole: real GPUs map pages, so this succeeds.
  std::vector<CUdeviceptr> blocks;
  CUdeviceptr p = 0;
  while (cuMemAlloc(&p, kPage) == CUDA_SUCCESS) blocks.push_back(p);
  ASSERT_GT(blocks.size(), 8u);
  uint64_t freed = 0;
  for (size_t i = 0; i < blocks.size(); i += 2, ++freed)
    ASSERT_EQ(cuMemFree(blocks[i]), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), freed * kPage);
  CUdeviceptr big = 0;
  EXPECT_EQ(cuMemAlloc(&big, freed * kPage), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(MemoryTest, DocumentedErrors) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAlloc(nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAlloc(&p, 2ull << 30), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAlloc(&p, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(p + 512), CUDA_ERROR_INVALID_VALUE);  // interior pointer
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);  // double free
  EXPECT_EQ(cuMemFree(0), CUDA_SUCCESS);              // a no-op, as on the real driver

  size_t pitch = 0;
  EXPECT_EQ(cuMemAllocPitch(&p, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch(&p, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAllocPitch(&p, &pitch, 100, 10, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 512u);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange(&base, &size, p + 700), CUDA_SUCCESS);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 5120u);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);

  EXPECT_EQ(cuMemAllocManaged(&p, 64, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAllocManaged(&p, 64, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(MemoryTest, NoContextMeansInvalidContext) {
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  size_t f = 0, t = 0;
  EXPECT_EQ(cuMemGetInfo(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(MemoryTest, CopiesAndMemsetsUseHostBackedMemory) {
  CUdeviceptr d = 0, d2 = 0;
  ASSERT_EQ(cuMemAlloc(&d, 1 << 16), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&d2, 1 << 16), CUDA_SUCCESS);
  std::vector<unsigned char> in(1 << 16), out(1 << 16);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7 + 3);
  ASSERT_EQ(cuMemcpyHtoD(d, in.data(), in.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(d2, d, in.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(out.data(), d2, out.size()), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
  ASSERT_EQ(cuMemsetD32(d, 0xdeadbeef, 4), CUDA_SUCCESS);
  uint32_t words[4] = {};
  ASSERT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(words), d, sizeof words), CUDA_SUCCESS);
  for (uint32_t w : words) EXPECT_EQ(w, 0xdeadbeefu);
  // Outside any allocation: rejected, not a crash.
  EXPECT_EQ(cuMemcpyHtoD(d + (1 << 16) - 8, in.data(), 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8(d + 1, 1, 1 << 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(d2), CUDA_SUCCESS);
}

TEST_F(MemoryTest, InjectedFailureHitsTheNthAllocationCall) {
  uint64_t before = fakecuda_allocation_calls();
  fakecuda_fail_nth_allocation(2);
  CUdeviceptr a = 0, b = 0, c = 0;
  EXPECT_EQ(cuMemAlloc(&a, 64), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&b, 64), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc(&c, 64), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_allocation_calls(), before + 3);
  EXPECT_EQ(fakecuda_live_count(0), 2u);
}

class FailAtEnvTest : public DriverTest {
  std::map<std::string, std::string> Env() override {
    auto env = DriverTest::Env();
    env["FAKECUDA_FAIL_AT"] = "3";
    return env;
  }
};

TEST_F(FailAtEnvTest, EnvironmentSelectsTheFailingCall) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 64), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAllocManaged(&p, 64, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&p, 64), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc(&p, 64), CUDA_SUCCESS);
}

class OtherProcessTest : public DriverTest {
  std::map<std::string, std::string> Env() override {
    auto env = DriverTest::Env();
    env["FAKECUDA_OTHER_USED"] = "101M";  // rounds up to 51 pages
    env["FAKECUDA_CAPACITY"] = "256M";
    return env;
  }
};

TEST_F(OtherProcessTest, OtherProcessesReduceFreeButNotOurUse) {
  const uint64_t overhead = 5 * kPage;  // 10M
  EXPECT_EQ(FreeBytes(), 256 * kMiB - 51 * kPage - overhead);
  EXPECT_EQ(fakecuda_used_bytes(0), overhead);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 256 * kMiB - 51 * kPage - overhead + 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc(&p, 256 * kMiB - 51 * kPage - overhead), CUDA_SUCCESS);
}

TEST_F(MemoryTest, ContextsChargeOverheadAndOwnTheirAllocations) {
  const uint64_t used = fakecuda_used_bytes(0);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxCreate(&ctx, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + 5 * kPage);
  CUcontext current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, 8 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + 9 * kPage);
  ASSERT_EQ(cuCtxDestroy(ctx), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
  EXPECT_EQ(fakecuda_live_count(0), 0u);
  EXPECT_EQ(cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(MemoryTest, PrimaryContextIsChargedOnceAndFreedAtLastRelease) {
  const uint64_t used = fakecuda_used_bytes(0);
  CUcontext again = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, primary_);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, kPage), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  unsigned flags = 0;
  int active = 1;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(fakecuda_used_bytes(0), 0u);
  EXPECT_EQ(fakecuda_live_count(0), 0u);
  EXPECT_EQ(cuMemAlloc(&p, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, 0), CUDA_SUCCESS);  // for TearDown
}

TEST_F(MemoryTest, LiveListReportsKindsAddressesAndSizes) {
  CUdeviceptr a = 0, m = 0;
  size_t pitch = 0;
  CUdeviceptr pp = 0;
  ASSERT_EQ(cuMemAlloc(&a, 1000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&m, 5 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocPitch(&pp, &pitch, 10, 3, 8), CUDA_SUCCESS);
  std::vector<fakecuda_live_entry> entries(fakecuda_live_list(nullptr, 0));
  ASSERT_EQ(entries.size(), 3u);
  fakecuda_live_list(entries.data(), entries.size());
  EXPECT_EQ(entries[0].kind, FAKECUDA_KIND_DEVICE);
  EXPECT_EQ(entries[0].address, a);
  EXPECT_EQ(entries[0].size, 1000u);
  EXPECT_EQ(entries[1].kind, FAKECUDA_KIND_PITCH);
  EXPECT_EQ(entries[1].size, 3 * 512u);
  EXPECT_EQ(entries[2].kind, FAKECUDA_KIND_MANAGED);
  EXPECT_STREQ(fakecuda_kind_name(entries[2].kind), "managed");
  EXPECT_STREQ(fakecuda_kind_name(99), "unknown");
}

TEST_F(MemoryTest, ConcurrentThreadsKeepTheBooksStraight) {
  const uint64_t used = fakecuda_used_bytes(0);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t, &failures] {
      cuCtxSetCurrent(primary_);
      for (int i = 0; i < 200; ++i) {
        CUdeviceptr p = 0;
        size_t size = (i % 3 == 0) ? 3 * kMiB : 512 * (i + 1);
        if (cuMemAlloc(&p, size) != CUDA_SUCCESS || cuMemsetD8(p, 1, size) != CUDA_SUCCESS ||
            cuMemFree(p) != CUDA_SUCCESS) {
          ++failures[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
  EXPECT_EQ(fakecuda_live_count(0), 0u);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
}

}  // namespace
}  // namespace fakecuda_test
