// Stream-ordered allocator: chunked reservations, pending frees, release threshold, trimming.
#include "driver_fixture.h"

namespace fakecuda_test {
namespace {

constexpr uint64_t kChunk = FAKECUDA_POOL_CHUNK_BYTES;

class PoolTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&other_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  uint64_t Attr(CUmemPool_attribute attr, CUmemoryPool pool = nullptr) {
    cuuint64_t value = 0;
    EXPECT_EQ(cuMemPoolGetAttribute(pool ? pool : pool_, attr, &value), CUDA_SUCCESS);
    return value;
  }
  CUmemoryPool pool_ = nullptr;
  CUstream stream_ = nullptr, other_ = nullptr;
};

TEST_F(PoolTest, ReservesWholeChunksAndCountsUse) {
  const uint64_t used = fakecuda_used_bytes(0);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, 1000, stream_), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 1024u);
  EXPECT_EQ(fakecuda_used_bytes(0), used + kChunk);
  ASSERT_EQ(cuMemAllocAsync(&b, 40 * kMiB, stream_), CUDA_SUCCESS);  // rounds to 2 chunks
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 3 * kChunk);
  EXPECT_EQ(fakecuda_live_count(0), 2u);
  ASSERT_EQ(cuMemFreeAsync(a, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(b, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(b, stream_), CUDA_ERROR_INVALID_VALUE);  // already freed
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  // Default release threshold 0: everything idle goes back at synchronize.
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 3 * kChunk);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), 1024u + 40 * kMiB);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
}

TEST_F(PoolTest, PendingFreesAreNotReusableUntilTheStreamIsSynchronized) {
  cuuint64_t keep = ~0ull;  // never release
  ASSERT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, kChunk, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(a, stream_), CUDA_SUCCESS);
  std::vector<fakecuda_live_entry> live(fakecuda_live_list(nullptr, 0));
  fakecuda_live_list(live.data(), live.size());
  bool pending = false;
  for (const auto& e : live) pending |= e.kind == FAKECUDA_KIND_ASYNC_PENDING && e.address == a;
  EXPECT_TRUE(pending);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), kChunk);
  // Another allocation cannot take the pending block: the pool grows.
  ASSERT_EQ(cuMemAllocAsync(&b, kChunk, other_), CUDA_SUCCESS);
  EXPECT_NE(b, a);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * kChunk);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), kChunk);
  // Now the block is free and is reused; the reservation is kept (threshold).
  ASSERT_EQ(cuMemAllocAsync(&c, kChunk, other_), CUDA_SUCCESS);
  EXPECT_EQ(c, a);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * kChunk);
}

TEST_F(PoolTest, EventSynchronizeCompletesFreesUpToTheEvent) {
  CUevent event = nullptr;
  ASSERT_EQ(cuEventCreate(&event, 0), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, 4096, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&b, 4096, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(a, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(event, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(b, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(event), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 4096u);  // b still pending
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(cuEventDestroy(event), CUDA_SUCCESS);
}

TEST_F(PoolTest, ReleaseThresholdAndTrimTo) {
  cuuint64_t threshold = 2 * kChunk;
  ASSERT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 2 * kChunk);
  CUdeviceptr p[4];
  for (auto& ptr : p) ASSERT_EQ(cuMemAllocAsync(&ptr, kChunk, stream_), CUDA_SUCCESS);
  for (auto ptr : p) ASSERT_EQ(cuMemFreeAsync(ptr, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * kChunk);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, kChunk), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 0), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  cuuint64_t nonzero = 5;
  EXPECT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &nonzero),
            CUDA_ERROR_INVALID_VALUE);
  cuuint64_t zero = 0;
  ASSERT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0u);
}

TEST_F(PoolTest, CreatedPoolsAreSeparateAndOutliveTheirDestroyUntilFreed) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool mine = nullptr;
  ASSERT_EQ(cuMemPoolCreate(&mine, &props), CUDA_SUCCESS);
  props.location.id = 7;
  CUmemoryPool bad = nullptr;
  EXPECT_EQ(cuMemPoolCreate(&bad, &props), CUDA_ERROR_INVALID_DEVICE);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&p, 100, mine, stream_), CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, mine), kChunk);
  EXPECT_EQ(Attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);  // default pool untouched
  const uint64_t used = fakecuda_used_bytes(0);
  ASSERT_EQ(cuMemPoolDestroy(mine), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used);  // block still live
  ASSERT_EQ(cuMemFreeAsync(p, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used - kChunk);
  EXPECT_EQ(cuMemPoolDestroy(pool_), CUDA_ERROR_INVALID_VALUE);  // default pool
}

TEST_F(PoolTest, PoolsFailWhenTheDeviceIsFull) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocAsync(&p, 2ull << 30, stream_), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocAsync(&p, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocAsync(&p, 16, reinterpret_cast<CUstream>(0x1234)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemPoolImportPointer(&p, pool_, nullptr), CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace
}  // namespace fakecuda_test
