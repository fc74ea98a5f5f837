// Shared fixture for tests that drive the fake libcuda.so.1 directly: configures the fake
// through FAKECUDA_* variables, resets it, and makes the primary context of device 0 current.
#pragma once

#include <cuda.h>
#include <fakecuda/fakecuda.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <string>

namespace fakecuda_test {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kPage = FAKECUDA_PAGE_BYTES;

class DriverTest : public ::testing::Test {
 protected:
  // Variables applied before fakecuda_reset(); tests override Env() to change them.
  virtual std::map<std::string, std::string> Env() {
    return {{"FAKECUDA_CAPACITY", "1G"},
            {"FAKECUDA_CTX_OVERHEAD", "10M"},
            {"FAKECUDA_OTHER_USED", "0"},
            {"FAKECUDA_DEVICES", "1"}};
  }

  void SetUp() override {
    for (const char* name :
         {"FAKECUDA_CAPACITY", "FAKECUDA_CTX_OVERHEAD", "FAKECUDA_OTHER_USED", "FAKECUDA_DEVICES",
          "FAKECUDA_FAIL_AT", "FAKECUDA_FAIL_CALLS", "FAKECUDA_NULL", "CUDA_VISIBLE_DEVICES"}) {
      unsetenv(name);
    }
    for (const auto& [name, value] : Env()) setenv(name.c_str(), value.c_str(), 1);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    fakecuda_reset();
    // Leave no context from an earlier test current on this thread.
    CUcontext ctx = nullptr;
    while (cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) {
      if (cuCtxPopCurrent(&ctx) != CUDA_SUCCESS) break;
    }
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(primary_), CUDA_SUCCESS);
  }

  void TearDown() override {
    cuCtxSetCurrent(nullptr);
    cuDevicePrimaryCtxRelease(0);
  }

  static uint64_t FreeBytes() {
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
    return free_bytes;
  }

  CUcontext primary_ = nullptr;
};

}  // namespace fakecuda_test
