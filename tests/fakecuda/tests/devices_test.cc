// Several devices, CUDA_VISIBLE_DEVICES renumbering, and null mode.
#include <cstring>
#include <set>

#include "driver_fixture.h"

namespace fakecuda_test {
namespace {

class TwoDeviceTest : public DriverTest {
  std::map<std::string, std::string> Env() override {
    auto env = DriverTest::Env();
    env["FAKECUDA_DEVICES"] = "2";
    return env;
  }
};

TEST_F(TwoDeviceTest, DevicesHaveSeparateMemoryAndStableUuids) {
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  ASSERT_EQ(count, 2);
  CUuuid u0, u1;
  ASSERT_EQ(cuDeviceGetUuid(&u0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid(&u1, 1), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(u0.bytes, u1.bytes, sizeof u0.bytes), 0);
  CUuuid again;
  ASSERT_EQ(cuDeviceGetUuid(&again, 1), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(u1.bytes, again.bytes, sizeof u1.bytes), 0);
  EXPECT_EQ(cuDeviceGetUuid(&again, 2), CUDA_ERROR_INVALID_DEVICE);

  CUcontext ctx1 = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx1, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent(ctx1), CUDA_SUCCESS);
  CUdeviceptr on1 = 0;
  ASSERT_EQ(cuMemAlloc(&on1, 6 * kMiB), CUDA_SUCCESS);
  CUdevice dev = -1;
  ASSERT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, ctx1);
  CUdeviceptr on0 = 0;
  ASSERT_EQ(cuMemAlloc(&on0, 6 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_count(0), 1u);
  EXPECT_EQ(fakecuda_live_count(1), 1u);
  EXPECT_EQ(fakecuda_used_bytes(1), 5 * kPage + 3 * kPage);
  int ordinal = -1;
  ASSERT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, on1),
            CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(cuMemFree(on1), CUDA_SUCCESS);  // freeing another device's memory is allowed
  EXPECT_EQ(cuMemFree(on0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(1), 0u);
}

class VisibleDevicesTest : public DriverTest {
  std::map<std::string, std::string> Env() override {
    auto env = DriverTest::Env();
    env["FAKECUDA_DEVICES"] = "4";
    env["CUDA_VISIBLE_DEVICES"] = "3,1";
    return env;
  }
};

TEST_F(VisibleDevicesTest, VisibleDevicesRenumberButKeepIdentity) {
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  ASSERT_EQ(count, 2);
  CUuuid visible0;
  ASSERT_EQ(cuDeviceGetUuid(&visible0, 0), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<unsigned char>(visible0.bytes[15]), 3u);  // physical GPU 3
  char name[64];
  ASSERT_EQ(cuDeviceGetName(name, sizeof name, 1), CUDA_SUCCESS);
  EXPECT_STREQ(name, "fakecuda GPU 1");
  char bus[32];
  ASSERT_EQ(cuDeviceGetPCIBusId(bus, sizeof bus, 0), CUDA_SUCCESS);
  CUdevice found = -1;
  ASSERT_EQ(cuDeviceGetByPCIBusId(&found, bus), CUDA_SUCCESS);
  EXPECT_EQ(found, 0);
}

class NullModeTest : public DriverTest {
  std::map<std::string, std::string> Env() override {
    auto env = DriverTest::Env();
    env["FAKECUDA_NULL"] = "1";
    return env;
  }
};

TEST_F(NullModeTest, DistinctAddressesNoAccounting) {
  const uint64_t used = fakecuda_used_bytes(0);
  std::set<CUdeviceptr> seen;
  for (int i = 0; i < 1000; ++i) {
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAlloc(&p, 64ull << 30), CUDA_SUCCESS);  // beyond capacity: no accounting
    EXPECT_TRUE(seen.insert(p).second);
    EXPECT_NE(p, 0u);
  }
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 100, nullptr), CUDA_SUCCESS);
  EXPECT_TRUE(seen.insert(p).second);
  EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(*seen.begin()), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
  EXPECT_EQ(fakecuda_live_count(0), 0u);
}

}  // namespace
}  // namespace fakecuda_test
