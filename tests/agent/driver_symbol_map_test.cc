// cuGetProcAddress version mapping: the newest ABI at or below the requested version, the
// per-thread export only when asked for, never blindly the newest.
#include "hooks/driver_symbol_map.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

namespace fragscope::agent {
namespace {

std::string Map(const char* base, int version, uint64_t flags = 0) {
  const char* s = DriverSymbolForVersion(base, version, flags);
  return s != nullptr ? s : "(none)";
}

TEST(DriverSymbolMapTest, LegacyAndCurrentAbisAreKeptApart) {
  EXPECT_EQ(Map("cuMemAlloc", 2000), "cuMemAlloc");
  EXPECT_EQ(Map("cuMemAlloc", 3010), "cuMemAlloc");
  EXPECT_EQ(Map("cuMemAlloc", 3020), "cuMemAlloc_v2");
  EXPECT_EQ(Map("cuMemAlloc", 13000), "cuMemAlloc_v2");
  EXPECT_EQ(Map("cuMemFree", 2000), "cuMemFree");
  EXPECT_EQ(Map("cuMemFree", 12000), "cuMemFree_v2");
  EXPECT_EQ(Map("cuMemAllocPitch", 3020), "cuMemAllocPitch_v2");
  EXPECT_EQ(Map("cuMemAlloc", 1000), "(none)");
}

TEST(DriverSymbolMapTest, NewestAtOrBelowTheRequestedVersion) {
  EXPECT_EQ(Map("cuCtxCreate", 3020), "cuCtxCreate_v2");
  EXPECT_EQ(Map("cuCtxCreate", 11040), "cuCtxCreate_v3");
  EXPECT_EQ(Map("cuCtxCreate", 12040), "cuCtxCreate_v3");
  EXPECT_EQ(Map("cuCtxCreate", 12050), "cuCtxCreate_v4");
  EXPECT_EQ(Map("cuGetProcAddress", 11030), "cuGetProcAddress");
  EXPECT_EQ(Map("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
  EXPECT_EQ(Map("cuIpcOpenMemHandle", 4010), "cuIpcOpenMemHandle");
  EXPECT_EQ(Map("cuIpcOpenMemHandle", 11000), "cuIpcOpenMemHandle_v2");
}

TEST(DriverSymbolMapTest, PerThreadOnlyWhenRequested) {
  EXPECT_EQ(Map("cuMemAllocAsync", 11020, 0), "cuMemAllocAsync");
  EXPECT_EQ(Map("cuMemAllocAsync", 11020, kPerThreadDefaultStream), "cuMemAllocAsync_ptsz");
  EXPECT_EQ(Map("cuMemFreeAsync", 12000, kPerThreadDefaultStream), "cuMemFreeAsync_ptsz");
  EXPECT_EQ(Map("cuLaunchKernel", 12000, kPerThreadDefaultStream), "cuLaunchKernel_ptsz");
  // Flag 1 (legacy stream) is not per-thread.
  EXPECT_EQ(Map("cuMemAllocAsync", 11020, 1), "cuMemAllocAsync");
  // No per-thread ABI: the plain one.
  EXPECT_EQ(Map("cuMemAlloc", 12000, kPerThreadDefaultStream), "cuMemAlloc_v2");
}

TEST(DriverSymbolMapTest, TableIsSortedAndEveryLineIsReachable) {
  size_t count = 0;
  const VersionedDriverSymbol* lines = VersionedDriverSymbols(&count);
  ASSERT_GT(count, 400u);
  for (size_t i = 0; i < count; ++i) {
    const VersionedDriverSymbol& v = lines[i];
    if (i > 0) {
      int c = strcmp(lines[i - 1].base, v.base);
      ASSERT_LE(c, 0) << v.base;
      if (c == 0) {
        ASSERT_LE(lines[i - 1].version, v.version) << v.base;
      }
    }
    // Asking for exactly this line's version and thread mode returns this line's symbol.
    EXPECT_EQ(Map(v.base, v.version, v.per_thread ? kPerThreadDefaultStream : 0), v.symbol)
        << v.base << "@" << v.version;
  }
}

}  // namespace
}  // namespace fragscope::agent
