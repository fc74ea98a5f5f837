// Metrics of the collector model against hand-computed layouts. Each test builds a layout by
// feeding synthetic frames and checks collector/REPORT.md's definitions byte for byte.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <tuple>

#include "fragscope/model/process_model.h"
#include "model_test_frames.h"

namespace fragscope {
namespace {

using testing::DeviceOf;
using testing::FrameFeed;
using testing::kGiB;
using testing::kMiB;

constexpr uint64_t kBase = 0x7f0000000000;

TEST(ModelMetricsTest, EmptyDeviceIsZeroWithUnknownsExplained) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, 16 * kGiB);
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  EXPECT_EQ(d.uuid_hex, "01010101010101010101010101010101");
  EXPECT_EQ(d.total_bytes.value, 16 * kGiB);
  EXPECT_EQ(d.reserved_bytes, 0u);
  EXPECT_EQ(d.allocated_bytes, 0u);
  EXPECT_EQ(d.cached_bytes, 0u);
  EXPECT_EQ(d.largest_free_range_bytes, 0u);
  EXPECT_EQ(d.segments, 0u);
  EXPECT_EQ(d.blocks, 0u);
  // Nothing cached: no ratio, and the reason says why instead of a 0 %.
  EXPECT_FALSE(d.fragmentation.known());
  EXPECT_NE(d.fragmentation.unknown_reason.find("floor"), std::string::npos);
  // No MemInfo sample: untracked is unknown, not 0.
  EXPECT_FALSE(d.untracked_bytes.known());
  EXPECT_NE(d.untracked_bytes.unknown_reason.find("MemInfo"), std::string::npos);
}

// A free figure without any total (the OOM entries of a PyTorch snapshot carry free bytes
// only) says nothing of the memory used: untracked is unknown, not 0 B.
TEST(ModelMetricsTest, FreeBytesWithoutATotalLeaveUntrackedUnknown) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, 0);
  feed.Malloc(kBase, 100 * kMiB, 0, 0);
  feed.MemInfo(0, 2 * kGiB, /*total=*/0);
  DeviceSummary d = DeviceOf(model.Summarize(), 0);
  EXPECT_FALSE(d.total_bytes.known());
  EXPECT_FALSE(d.untracked_bytes.known());
  EXPECT_NE(d.untracked_bytes.unknown_reason.find("total is not in the stream"), std::string::npos)
      << d.untracked_bytes.unknown_reason;
  // A total from the device's description completes the sample.
  ProcessModel described;
  FrameFeed feed2(&described);
  feed2.Device(0, 16 * kGiB);
  feed2.Malloc(kBase, 100 * kMiB, 0, 0);
  feed2.MemInfo(0, 2 * kGiB, /*total=*/0);
  d = DeviceOf(described.Summarize(), 0);
  ASSERT_TRUE(d.untracked_bytes.known());
  EXPECT_EQ(*d.untracked_bytes.value, 14 * kGiB - 100 * kMiB);
}

TEST(ModelMetricsTest, PlainCudaMallocIsExact) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 100 * kMiB, 0, 0);
  feed.Malloc(kBase + kGiB, 28 * kMiB, 0, 0);
  const DeviceSummary d = DeviceOf(model, 0);
  // Two exact segments: each one block filling its segment.
  EXPECT_EQ(d.reserved_bytes, 128 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 128 * kMiB);
  EXPECT_EQ(d.cached_bytes, 0u);
  EXPECT_EQ(d.exact_segments, 2u);
  EXPECT_EQ(d.blocks, 2u);
}

TEST(ModelMetricsTest, FullyFreeAnnotatedSegment) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 128 * kMiB);
  feed.BlockAlloc(kBase, 128 * kMiB);
  feed.BlockFree(kBase, 128 * kMiB);
  const DeviceSummary d = DeviceOf(model, 0);
  // The sub-allocator keeps the whole segment cached as one free range.
  EXPECT_EQ(d.reserved_bytes, 128 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 0u);
  EXPECT_EQ(d.cached_bytes, 128 * kMiB);
  EXPECT_EQ(d.largest_free_range_bytes, 128 * kMiB);
  EXPECT_EQ(d.stranded_bytes, 0u);
  ASSERT_TRUE(d.fragmentation.known());
  EXPECT_DOUBLE_EQ(*d.fragmentation.value, 0.0);
  EXPECT_EQ(d.annotated_segments, 1u);
  EXPECT_EQ(d.exact_segments, 0u);
  EXPECT_EQ(d.free_ranges, 1u);
  EXPECT_EQ(d.blocks, 0u);
}

TEST(ModelMetricsTest, ManySmallGaps) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 256 * kMiB);
  // 128 blocks of 1 MiB at every even MiB: [0,1) [2,3) ... [254,255). Free: the 127 odd MiB
  // between them plus [255, 256): 128 gaps of 1 MiB.
  for (uint64_t i = 0; i < 128; ++i) feed.BlockAlloc(kBase + 2 * i * kMiB, kMiB, /*stack=*/5);
  {
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.allocated_bytes, 128 * kMiB);
    EXPECT_EQ(d.cached_bytes, 128 * kMiB);
    EXPECT_EQ(d.largest_free_range_bytes, kMiB);
    EXPECT_EQ(d.free_ranges, 128u);
    EXPECT_EQ(d.blocks, 128u);
    EXPECT_EQ(d.stranded_bytes, 127 * kMiB);
    ASSERT_TRUE(d.fragmentation.known());
    EXPECT_DOUBLE_EQ(*d.fragmentation.value, 1.0 - 1.0 / 128.0);
    ASSERT_EQ(d.sites.size(), 1u);
    EXPECT_EQ(d.sites[0].stack_id, 5u);
    EXPECT_EQ(d.sites[0].live_bytes, 128 * kMiB);
    EXPECT_EQ(d.sites[0].count, 128u);
  }
  // Freeing the block at [2, 3) joins the gaps [1,2) and [3,4): one 3 MiB range.
  feed.BlockFree(kBase + 2 * kMiB, kMiB);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.cached_bytes, 129 * kMiB);
  EXPECT_EQ(d.largest_free_range_bytes, 3 * kMiB);
  EXPECT_EQ(d.free_ranges, 127u);
  EXPECT_DOUBLE_EQ(*d.fragmentation.value, 1.0 - 3.0 / 129.0);
  // The worst moment was with all 128 blocks placed.
  ASSERT_TRUE(d.max_fragmentation.known());
  EXPECT_DOUBLE_EQ(*d.max_fragmentation.value, 1.0 - 1.0 / 128.0);
  // Before its first block the segment was exact (nothing said a sub-allocator carves it), so
  // it counted as one allocated 256 MiB block then.
  EXPECT_EQ(d.peak_allocated_bytes, 256 * kMiB);
}

TEST(ModelMetricsTest, CachedBelowFloorHasNoRatio) {
  // 32 MiB segment, one 8 MiB block at [8, 16): free [0, 8) and [16, 32) = 24 MiB cached,
  // largest 16 MiB.
  auto build = [](ModelOptions options) {
    auto model = std::make_unique<ProcessModel>(options);
    FrameFeed feed(model.get());
    feed.Malloc(kBase, 32 * kMiB);
    feed.BlockAlloc(kBase + 8 * kMiB, 8 * kMiB);
    return model;
  };
  {
    auto model = build(ModelOptions{});  // default floor 64 MiB
    const DeviceSummary d = DeviceOf(*model, 0);
    EXPECT_EQ(d.cached_bytes, 24 * kMiB);
    EXPECT_EQ(d.largest_free_range_bytes, 16 * kMiB);
    EXPECT_EQ(d.stranded_bytes, 8 * kMiB);
    EXPECT_FALSE(d.fragmentation.known());
    EXPECT_NE(d.fragmentation.unknown_reason.find("24.00 MiB is below the 64.00 MiB floor"),
              std::string::npos)
        << d.fragmentation.unknown_reason;
    EXPECT_FALSE(d.max_fragmentation.known());
  }
  {
    ModelOptions low_floor;
    low_floor.fragmentation_floor_bytes = 16 * kMiB;
    auto model = build(low_floor);
    const DeviceSummary d = DeviceOf(*model, 0);
    ASSERT_TRUE(d.fragmentation.known());
    EXPECT_DOUBLE_EQ(*d.fragmentation.value, 1.0 - 16.0 / 24.0);
  }
}

TEST(ModelMetricsTest, OpaqueSegmentHidesFragmentationUntilAnnotated) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Module("/opt/conda/lib/python3.11/site-packages/torch/lib/libc10_cuda.so", 0x7000000000,
              0x100000);
  feed.Module("/usr/bin/python3.11", 0x400000, 0x100000);
  feed.Stack(9, {0x7000001234, 0x400100});  // through libc10_cuda
  feed.Stack(10, {0x400200});               // plain program
  feed.Malloc(kBase, 512 * kMiB, 0, 9);
  // An annotated segment with 64 MiB cached in one piece: fragmentation would be 0 % ...
  feed.Malloc(kBase + kGiB, 128 * kMiB, 0, 10);
  feed.BlockAlloc(kBase + kGiB, 64 * kMiB);
  {
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.opaque_segments, 1u);
    EXPECT_EQ(d.opaque_bytes, 512 * kMiB);
    EXPECT_EQ(d.reserved_bytes, 640 * kMiB);
    // Opaque bytes are neither allocated nor free.
    EXPECT_EQ(d.allocated_bytes, 64 * kMiB);
    EXPECT_EQ(d.cached_bytes, 64 * kMiB);
    // ... but the opaque segment may hide any amount of fragmentation: null, never 0 %.
    EXPECT_FALSE(d.fragmentation.known());
    EXPECT_NE(d.fragmentation.unknown_reason.find("opaque"), std::string::npos);
    EXPECT_FALSE(d.max_fragmentation.known());
  }
  // Annotations arriving for the opaque segment make it annotated: 256 MiB block at its start
  // leaves [256, 512) free. Cached = 64 + 256 = 320 MiB, largest 256 MiB.
  feed.BlockAlloc(kBase, 256 * kMiB);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.opaque_segments, 0u);
  EXPECT_EQ(d.opaque_bytes, 0u);
  EXPECT_EQ(d.annotated_segments, 2u);
  EXPECT_EQ(d.cached_bytes, 320 * kMiB);
  EXPECT_EQ(d.largest_free_range_bytes, 256 * kMiB);
  ASSERT_TRUE(d.fragmentation.known());
  EXPECT_DOUBLE_EQ(*d.fragmentation.value, 1.0 - 256.0 / 320.0);
}

TEST(ModelMetricsTest, CachingAllocatorIsMatchedOnFileNameOnly) {
  ProcessModel model;
  FrameFeed feed(&model);
  // "rmm" in the directory must not make a plain library a caching allocator.
  feed.Module("/home/rmm/lib/libplain.so", 0x7000000000, 0x100000);
  feed.Module("/opt/rapids/lib/librmm.so", 0x7100000000, 0x100000);
  feed.Stack(1, {0x7000000010});
  feed.Stack(2, {0x7100000010});
  feed.Malloc(kBase, 10 * kMiB, 0, 1);
  feed.Malloc(kBase + kGiB, 20 * kMiB, 0, 2);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.exact_segments, 1u);
  EXPECT_EQ(d.opaque_segments, 1u);
  EXPECT_EQ(d.opaque_bytes, 20 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 10 * kMiB);
}

// Who asked for the memory decides, not who is anywhere on the stack: cuBLAS's own workspace,
// made in cublasCreate called from libtorch_cuda (a stack seen with PyTorch 2.15 and cuBLAS
// 13.4), is cuBLAS's and exact; PyTorch's caching allocator calling cudaMalloc through the CUDA
// runtime is the allocator's and opaque until annotated.
TEST(ModelMetricsTest, ALibraryCalledFromACachingAllocatorModuleOwnsItsMemory) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Module("/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so", 0x7000000000,
              0x100000);
  feed.Module("/venv/lib/python3.11/site-packages/torch/lib/libc10_cuda.so", 0x7100000000,
              0x100000);
  feed.Module("/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcublas.so.13", 0x7200000000,
              0x100000);
  feed.Module("/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13", 0x7300000000,
              0x100000);
  feed.Stack(1, {0x7200000100, 0x7200000200, 0x7000000300});  // cublasCreate from libtorch_cuda
  feed.Stack(2, {0x7300000100, 0x7100000200, 0x7000000300});  // via libcudart from libc10_cuda
  feed.Stack(3, {0x1234, 0x7100000200});  // a frame in no known module, then libc10_cuda
  feed.Malloc(kBase, 64 * kMiB, 0, 1);
  feed.Malloc(kBase + kGiB, 20 * kMiB, 0, 2);
  feed.Malloc(kBase + 2 * kGiB, 2 * kMiB, 0, 3);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.exact_segments, 1u);
  EXPECT_EQ(d.exact_bytes, 64 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 64 * kMiB);
  EXPECT_EQ(d.opaque_segments, 2u);
  EXPECT_EQ(d.opaque_bytes, 22 * kMiB);
}

TEST(ModelMetricsTest, StackArrivingAfterTheAllocationReclassifies) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Module("/usr/lib/libtorch_cuda.so", 0x7000000000, 0x100000);
  feed.Malloc(kBase, 10 * kMiB, 0, 77);  // stack 77 not sent yet
  EXPECT_EQ(DeviceOf(model, 0).opaque_segments, 0u);
  feed.Stack(77, {0x7000000100});
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.opaque_segments, 1u);
  EXPECT_EQ(d.allocated_bytes, 0u);
}

TEST(ModelMetricsTest, PoolReservationFromSamplesAndPendingFrees) {
  ProcessModel model;
  FrameFeed feed(&model);
  constexpr uint64_t kPool = 0xAA;
  feed.AllocKind(kBase, 10 * kMiB, v1::MEMORY_KIND_POOL, v1::API_cudaMallocAsync, 0, kPool, 3);
  feed.AllocKind(kBase + 10 * kMiB, 6 * kMiB, v1::MEMORY_KIND_POOL, v1::API_cudaMallocAsync, 0,
                 kPool, 4);
  {
    const DeviceSummary d = DeviceOf(model, 0);
    // Never sampled: the pool counts what its blocks occupy, a lower bound.
    EXPECT_EQ(d.reserved_bytes, 16 * kMiB);
    EXPECT_EQ(d.allocated_bytes, 16 * kMiB);
    ASSERT_EQ(d.pools.size(), 1u);
    EXPECT_FALSE(d.pools[0].sampled_reserved_bytes.known());
    EXPECT_EQ(d.pools[0].blocks, 2u);
    // A pool's layout is unknown: it adds nothing to cached or largest free.
    EXPECT_EQ(d.cached_bytes, 0u);
    EXPECT_EQ(d.largest_free_range_bytes, 0u);
  }
  // The pool's attributes say it holds 64 MiB.
  feed.MemInfo(0, 10 * kGiB, 16 * kGiB, kPool, 64 * kMiB, 16 * kMiB);
  // cudaFreeAsync: pending until the next sample of the pool.
  feed.Free(kBase, v1::API_cudaFreeAsync);
  {
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.reserved_bytes, 64 * kMiB);
    EXPECT_EQ(d.allocated_bytes, 6 * kMiB);
    EXPECT_EQ(d.pool_pending_free_bytes, 10 * kMiB);
    EXPECT_EQ(d.pending_free_bytes, 10 * kMiB);
    EXPECT_EQ(d.pools[0].sampled_reserved_bytes.value, 64 * kMiB);
    // Memory pending free is still held by its site.
    uint64_t site3 = 0;
    for (const SiteEntry& e : d.sites) {
      if (e.stack_id == 3) site3 = e.live_bytes;
    }
    EXPECT_EQ(site3, 10 * kMiB);
  }
  // Next sample: the free has completed, and the pool shrank to 32 MiB.
  feed.MemInfo(0, 10 * kGiB, 16 * kGiB, kPool, 32 * kMiB, 6 * kMiB);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.pool_pending_free_bytes, 0u);
  EXPECT_EQ(d.reserved_bytes, 32 * kMiB);
  EXPECT_EQ(d.pools[0].blocks, 1u);
  EXPECT_EQ(d.pool_used_bytes, 6 * kMiB);
  ASSERT_EQ(d.sites.size(), 1u);
  EXPECT_EQ(d.sites[0].stack_id, 4u);
}

TEST(ModelMetricsTest, GraphManagedAndIpcImportsHaveTheirOwnBuckets) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 100 * kMiB);
  feed.AllocKind(kBase + kGiB, 40 * kMiB, v1::MEMORY_KIND_GRAPH, v1::API_cudaMallocAsync);
  feed.AllocKind(kBase + 2 * kGiB, 30 * kMiB, v1::MEMORY_KIND_MANAGED, v1::API_cudaMallocManaged);
  feed.AllocKind(kBase + 3 * kGiB, 200 * kMiB, v1::MEMORY_KIND_IPC_IMPORT,
                 v1::API_cuIpcOpenMemHandle);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.graph_bytes, 40 * kMiB);
  EXPECT_EQ(d.managed_bytes, 30 * kMiB);
  EXPECT_EQ(d.imported_bytes, 200 * kMiB);
  // Reserved: the driver segment and graph memory; never managed or another process's memory.
  EXPECT_EQ(d.reserved_bytes, 140 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 140 * kMiB);
  feed.Free(kBase + 3 * kGiB, v1::API_cuIpcCloseMemHandle);
  EXPECT_EQ(DeviceOf(model, 0).imported_bytes, 0u);
}

TEST(ModelMetricsTest, OrphanBlockIsReportedNotDropped) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 64 * kMiB);
  feed.Block(v1::BlockEvent::OP_ALLOC, kBase + kGiB, 4 * kMiB, 0, /*stack=*/12);
  ModelSummary s = model.Summarize();
  ASSERT_EQ(s.orphan_blocks.size(), 1u);
  EXPECT_EQ(s.orphan_blocks[0].address, kBase + kGiB);
  EXPECT_EQ(s.orphan_blocks[0].size, 4 * kMiB);
  EXPECT_EQ(s.orphan_blocks[0].stack_id, 12u);
  EXPECT_EQ(s.orphan_blocks_total, 1u);
  // It lies in no segment, so it changes no segment's figures.
  EXPECT_EQ(DeviceOf(s, 0).allocated_bytes, 64 * kMiB);
  EXPECT_EQ(DeviceOf(s, 0).annotated_segments, 0u);
  feed.BlockFree(kBase + kGiB, 4 * kMiB);
  s = model.Summarize();
  EXPECT_TRUE(s.orphan_blocks.empty());
  EXPECT_EQ(s.orphan_blocks_total, 1u);
  EXPECT_EQ(s.unmatched_events, 0u);
}

// A sub-allocator that reports by snapshot diffs frees blocks after their segment went back to
// the driver (PyTorch's empty_cache between two diffs): the blocks died with the segment, and
// their late frees are no mismatch. A free of an address that never held a block still is,
// and so is a second free of one that did.
TEST(ModelMetricsTest, LateFreesOfBlocksThatDiedWithTheirSegmentMatch) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 64 * kMiB);
  feed.BlockAlloc(kBase, 4 * kMiB);
  feed.BlockAlloc(kBase + 8 * kMiB, 4 * kMiB);
  feed.Free(kBase);
  EXPECT_EQ(DeviceOf(model, 0).allocated_bytes, 0u);
  feed.BlockFree(kBase, 4 * kMiB);
  feed.Block(v1::BlockEvent::OP_FREE_PENDING, kBase + 8 * kMiB, 4 * kMiB);
  feed.BlockFree(kBase + 8 * kMiB, 4 * kMiB);
  EXPECT_EQ(model.Summarize().unmatched_events, 0u);
  feed.BlockFree(kBase, 4 * kMiB);              // its late free came already
  feed.BlockFree(kBase + 32 * kMiB, 4 * kMiB);  // never a block
  // A new segment at the same address: its block's free is its own, the died one forgotten.
  feed.Malloc(kBase, 64 * kMiB);
  feed.BlockAlloc(kBase + 16 * kMiB, kMiB);
  feed.Free(kBase);
  feed.Malloc(kBase, 64 * kMiB);
  feed.BlockAlloc(kBase + 16 * kMiB, kMiB);
  feed.BlockFree(kBase + 16 * kMiB, kMiB);
  feed.BlockFree(kBase + 16 * kMiB, kMiB);  // the died block's late free came before the alloc
  const ModelSummary s = model.Summarize();
  EXPECT_EQ(s.unmatched_events, 3u);
  EXPECT_EQ(DeviceOf(s, 0).allocated_bytes, 0u);
}

TEST(ModelMetricsTest, UntrackedFromMemInfoAndUnknownAfterAttach) {
  {
    ProcessModel model;
    FrameFeed feed(&model);
    feed.Hello(/*attached=*/false);
    feed.Device(0, 16 * kGiB);
    feed.Malloc(kBase, kGiB);
    feed.MemInfo(0, 14 * kGiB, 16 * kGiB);
    // 16 total - 14 free - 1 reserved = 1 GiB outside this process's segments.
    const DeviceSummary d = DeviceOf(model, 0);
    ASSERT_TRUE(d.untracked_bytes.known());
    EXPECT_EQ(*d.untracked_bytes.value, kGiB);
    // Freeing after the sample must not turn the freed GiB into "untracked": the sample is
    // compared with what was reserved when it was taken (1 GiB), so it stays 1 GiB.
    feed.Free(kBase);
    const DeviceSummary after = DeviceOf(model, 0);
    EXPECT_EQ(after.reserved_bytes, 0u);
    ASSERT_TRUE(after.untracked_bytes.known());
    EXPECT_EQ(*after.untracked_bytes.value, kGiB);
  }
  {
    ProcessModel model;
    FrameFeed feed(&model);
    feed.Hello(/*attached=*/true);
    feed.Malloc(kBase, kGiB);
    const ModelSummary s = model.Summarize();
    EXPECT_FALSE(s.history_complete);
    const DeviceSummary d = DeviceOf(s, 0);
    EXPECT_FALSE(d.untracked_bytes.known());
    EXPECT_NE(d.untracked_bytes.unknown_reason.find("started after the program"),
              std::string::npos);
  }
}

TEST(ModelMetricsTest, AttachedStreamWithCompleteStartSnapshotHasCompleteHistory) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Hello(/*attached=*/true);
  EXPECT_FALSE(model.Summarize().history_complete);
  v1::Frame f;
  f.mutable_snapshot()->set_seq(10);
  f.mutable_snapshot()->set_reason(v1::Snapshot::REASON_STREAM_START);
  f.mutable_snapshot()->set_complete_history(true);
  model.Apply(f);
  EXPECT_TRUE(model.Summarize().history_complete) << "a dormant agent saw everything";
  f.mutable_snapshot()->set_complete_history(false);
  model.Apply(f);
  EXPECT_FALSE(model.Summarize().history_complete);
}

// A reconnected stream's snapshot (STREAM_START) replaces the state; so do RESYNC, IMPORTED
// and a PERIODIC one the reader needs (below).
TEST(ModelMetricsTest, SnapshotReplacesState) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 100 * kMiB, 0, 1);
  feed.Malloc(kBase + kGiB, 50 * kMiB, 0, 2);
  v1::Snapshot snap;
  snap.set_reason(v1::Snapshot::REASON_STREAM_START);
  snap.set_complete_history(true);
  v1::LiveAllocation* a = snap.add_allocations();
  a->set_address(kBase + 2 * kGiB);
  a->set_size(30 * kMiB);
  a->set_device(0);
  a->set_api(v1::API_cudaMalloc);
  a->set_kind(v1::MEMORY_KIND_DEVICE);
  a->set_stack_id(3);
  v1::LiveBlock* b = snap.add_blocks();
  b->set_address(kBase + 2 * kGiB);
  b->set_size(10 * kMiB);
  b->set_device(0);
  b->set_stack_id(4);
  feed.Snapshot(snap);
  ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  // Only the snapshot's 30 MiB segment is left, with a 10 MiB block at its start.
  EXPECT_EQ(d.reserved_bytes, 30 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 10 * kMiB);
  EXPECT_EQ(d.cached_bytes, 20 * kMiB);
  EXPECT_EQ(d.segments, 1u);
  // History is kept: the peak was before the snapshot, with sites 1 and 2.
  EXPECT_EQ(d.peak_reserved_bytes, 150 * kMiB);
  ASSERT_EQ(d.sites_at_peak.size(), 2u);
  EXPECT_EQ(d.sites_at_peak[0].stack_id, 1u);
  EXPECT_EQ(d.sites_at_peak[1].stack_id, 2u);
  ASSERT_EQ(d.sites.size(), 1u);
  EXPECT_EQ(d.sites[0].stack_id, 4u);
  EXPECT_TRUE(s.approximate_intervals.empty());
  // The old segment is gone: its free matches nothing.
  feed.Free(kBase);
  s = model.Summarize();
  EXPECT_EQ(s.unmatched_events, 1u);
  EXPECT_EQ(DeviceOf(s, 0).reserved_bytes, 30 * kMiB);
}

// The agent's snapshot is exact at the hooks' seq, which runs ahead of what its drain has
// written: the events up to it follow the snapshot. For a reader that followed the stream from
// its start, a PERIODIC snapshot is only a seek point: those events are applied as they come and
// their history (the peak among them) is kept.
TEST(ModelMetricsTest, PeriodicSnapshotOfAFollowedStreamIsASeekPoint) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 100 * kMiB, 0, 1);  // seq 1
  // Taken when the hooks were at seq 4 (seqs 2..4 still in the agent's ring): A and C live,
  // B allocated and freed again.
  v1::Snapshot snap;
  snap.set_reason(v1::Snapshot::REASON_PERIODIC);
  snap.set_complete_history(true);
  for (auto [address, size] : {std::pair{kBase, 100 * kMiB}, {kBase + 2 * kGiB, 20 * kMiB}}) {
    v1::LiveAllocation* a = snap.add_allocations();
    a->set_address(address);
    a->set_size(size);
    a->set_device(0);
    a->set_api(v1::API_cudaMalloc);
    a->set_kind(v1::MEMORY_KIND_DEVICE);
  }
  feed.SnapshotAt(snap, 4);
  feed.Malloc(kBase + kGiB, 300 * kMiB, 0, 2);     // seq 2: B, the peak
  feed.Free(kBase + kGiB);                         // seq 3
  feed.Malloc(kBase + 2 * kGiB, 20 * kMiB, 0, 3);  // seq 4: C
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  EXPECT_EQ(d.reserved_bytes, 120 * kMiB);
  EXPECT_EQ(d.peak_reserved_bytes, 400 * kMiB);
  ASSERT_EQ(d.sites_at_peak.size(), 2u);
  EXPECT_EQ(d.sites_at_peak[0].stack_id, 2u);
  EXPECT_EQ(s.unmatched_events, 0u);
  EXPECT_EQ(s.events, 4u);
  EXPECT_TRUE(s.approximate_intervals.empty());
  // The stream began with its first event: its history is all there.
  EXPECT_FALSE(s.history_from_seq.has_value());
}

// A flight-recorder file starts with a PERIODIC snapshot and no event before it: that snapshot
// is the reader's starting state.
TEST(ModelMetricsTest, PeriodicSnapshotBeforeAnyEventIsTheStartingState) {
  ProcessModel model;
  FrameFeed feed(&model);
  v1::Snapshot snap;
  snap.set_reason(v1::Snapshot::REASON_PERIODIC);
  snap.set_complete_history(true);
  v1::LiveAllocation* a = snap.add_allocations();
  a->set_address(kBase);
  a->set_size(64 * kMiB);
  a->set_device(0);
  a->set_api(v1::API_cudaMalloc);
  a->set_kind(v1::MEMORY_KIND_DEVICE);
  feed.Snapshot(snap);  // seq 1
  EXPECT_EQ(DeviceOf(model.Summarize(), 0).reserved_bytes, 64 * kMiB);
  // From there on the stream is followed: a later PERIODIC snapshot changes nothing.
  feed.Malloc(kBase + kGiB, 32 * kMiB);
  v1::Snapshot stale = snap;
  feed.Snapshot(stale);
  const ModelSummary s = model.Summarize();
  EXPECT_EQ(DeviceOf(s, 0).reserved_bytes, 96 * kMiB);
  // Peaks and failures before the file's first snapshot are in an older file, not here.
  EXPECT_EQ(s.history_from_seq, std::optional<uint64_t>(1));
}

// Lost events make the next PERIODIC snapshot a repair, as a RESYNC is.
TEST(ModelMetricsTest, PeriodicSnapshotAfterLostEventsReplacesState) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 100 * kMiB);
  feed.Drops(3);
  v1::Snapshot snap;
  snap.set_reason(v1::Snapshot::REASON_PERIODIC);
  snap.set_complete_history(true);
  feed.Snapshot(snap);
  ModelSummary s = model.Summarize();
  EXPECT_EQ(DeviceOf(s, 0).reserved_bytes, 0u);
  ASSERT_EQ(s.approximate_intervals.size(), 1u);
  EXPECT_TRUE(s.approximate_intervals[0].to_seq.has_value());
  // Repaired: the next PERIODIC one is a seek point again.
  feed.Malloc(kBase, 8 * kMiB);
  feed.Snapshot(snap);
  EXPECT_EQ(DeviceOf(model.Summarize(), 0).reserved_bytes, 8 * kMiB);
}

// A snapshot says which segments are live, not which a sub-allocator carves. After a resync, a
// carved segment with no block in it (all of it cached) came back as a plain allocation, all of
// it allocated. Segments from a site whose segments were carved before come back annotated; a
// segment without a stack (id 0) cannot be told apart and comes back plain.
TEST(ModelMetricsTest, ResyncKeepsAnEmptySubAllocatorSegmentCached) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 100 * kMiB, 0, /*stack=*/5);
  feed.Malloc(kBase + kGiB, 50 * kMiB, 0, /*stack=*/0);
  feed.BlockAlloc(kBase, 10 * kMiB);
  feed.BlockAlloc(kBase + kGiB, 10 * kMiB);
  feed.BlockFree(kBase, 10 * kMiB);
  feed.BlockFree(kBase + kGiB, 10 * kMiB);
  DeviceSummary d = DeviceOf(model.Summarize(), 0);
  ASSERT_EQ(d.annotated_segments, 2u);
  ASSERT_EQ(d.cached_bytes, 150 * kMiB);
  feed.Drops(2);
  v1::Snapshot snap;
  snap.set_reason(v1::Snapshot::REASON_RESYNC);
  snap.set_complete_history(true);
  for (auto [address, size, stack] : {std::tuple{kBase, 100 * kMiB, uint64_t{5}},
                                      {kBase + kGiB, 50 * kMiB, uint64_t{0}},
                                      {kBase + 2 * kGiB, 20 * kMiB, uint64_t{5}}}) {
    v1::LiveAllocation* a = snap.add_allocations();
    a->set_address(address);
    a->set_size(size);
    a->set_device(0);
    a->set_stack_id(stack);
    a->set_api(v1::API_cudaMalloc);
    a->set_kind(v1::MEMORY_KIND_DEVICE);
  }
  feed.Snapshot(snap);
  d = DeviceOf(model.Summarize(), 0);
  // Site 5's two segments (one allocated during the lost events) are the sub-allocator's, with
  // nothing in them; the stackless one is a plain allocation again.
  EXPECT_EQ(d.annotated_segments, 2u);
  EXPECT_EQ(d.exact_segments, 1u);
  EXPECT_EQ(d.cached_bytes, 120 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 50 * kMiB);
  EXPECT_EQ(d.largest_free_range_bytes, 100 * kMiB);
}

TEST(ModelMetricsTest, DropsMarkAnIntervalApproximateUntilResync) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 10 * kMiB);         // seq 1
  feed.Malloc(kBase + kGiB, 10 * kMiB);  // seq 2: last good
  feed.Drops(5);                         // seqs 3..7 lost
  ModelSummary s = model.Summarize();
  EXPECT_EQ(s.drops, 5u);
  ASSERT_EQ(s.approximate_intervals.size(), 1u);
  EXPECT_EQ(s.approximate_intervals[0].from_seq, 2u);
  EXPECT_FALSE(s.approximate_intervals[0].to_seq.has_value());
  v1::Snapshot snap;
  snap.set_reason(v1::Snapshot::REASON_RESYNC);
  snap.set_complete_history(true);
  feed.Snapshot(snap);  // seq 8
  feed.Malloc(kBase, 1 * kMiB);
  feed.Drops(2);
  s = model.Summarize();
  EXPECT_EQ(s.drops, 7u);
  ASSERT_EQ(s.approximate_intervals.size(), 2u);
  EXPECT_EQ(s.approximate_intervals[0].from_seq, 2u);
  EXPECT_EQ(s.approximate_intervals[0].to_seq, 8u);
  EXPECT_EQ(s.approximate_intervals[0].dropped_events, 5u);
  EXPECT_EQ(s.approximate_intervals[1].from_seq, 9u);
  EXPECT_FALSE(s.approximate_intervals[1].to_seq.has_value());
  EXPECT_EQ(s.approximate_intervals[1].dropped_events, 2u);
}

TEST(ModelMetricsTest, PeakSitesAreTheSitesAtPeakReserved) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 100 * kMiB, 0, 1);
  feed.Malloc(kBase + kGiB, 200 * kMiB, 0, 2);  // peak: 300 MiB (sites 1, 2)
  feed.Free(kBase + kGiB);
  feed.Malloc(kBase + 2 * kGiB, 50 * kMiB, 0, 3);  // 150 MiB now (sites 1, 3)
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.peak_reserved_bytes, 300 * kMiB);
  EXPECT_EQ(d.peak_reserved_seq, 2u);
  ASSERT_EQ(d.sites_at_peak.size(), 2u);
  EXPECT_EQ(d.sites_at_peak[0].stack_id, 2u);
  EXPECT_EQ(d.sites_at_peak[0].live_bytes, 200 * kMiB);
  EXPECT_EQ(d.sites_at_peak[1].stack_id, 1u);
  ASSERT_EQ(d.sites.size(), 2u);
  EXPECT_EQ(d.sites[0].stack_id, 1u);
  EXPECT_EQ(d.sites[1].stack_id, 3u);
}

std::map<uint64_t, uint64_t> BytesBySite(const std::vector<SiteEntry>& sites) {
  std::map<uint64_t, uint64_t> out;
  for (const SiteEntry& e : sites) out[e.stack_id] = e.live_bytes;
  return out;
}

// A sub-allocator grows by one segment for the request that did not fit: the driver call sets
// the peak of reserved, and the block it was made for follows. The sites at the peak are taken
// after that block, so they list it, not the whole segment under the sub-allocator's own frame.
TEST(ModelMetricsTest, PeakSitesIncludeTheFirstBlockOfTheSegmentThatMadeThePeak) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 2 * kGiB, 0, /*stack=*/1);
  feed.BlockAlloc(kBase, 1 * kGiB, /*stack=*/7);
  feed.Malloc(kBase + 2 * kGiB, 4 * kGiB, 0, 1);   // the peak: 6 GiB (seq 3)
  feed.BlockAlloc(kBase + 2 * kGiB, 3 * kGiB, 8);  // seq 4: the block it was made for
  const uint64_t python_site = (uint64_t{1} << 40) + 1;
  feed.Block(v1::BlockEvent::OP_SITE, kBase + 2 * kGiB, 0, 0, python_site);
  feed.BlockFree(kBase + 2 * kGiB, 3 * kGiB);
  feed.BlockAlloc(kBase + 2 * kGiB, 4 * kGiB, 9);  // after the peak, reserved unchanged
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.peak_reserved_bytes, 6 * kGiB);
  EXPECT_EQ(d.peak_reserved_seq, 3u);
  // The block placed at the settled moment was live there: its site learned later moves it.
  EXPECT_EQ(BytesBySite(d.sites_at_peak),
            (std::map<uint64_t, uint64_t>{{7, 1 * kGiB}, {python_site, 3 * kGiB}}));
  EXPECT_EQ(BytesBySite(d.sites), (std::map<uint64_t, uint64_t>{{7, 1 * kGiB}, {9, 4 * kGiB}}));
}

// A site learned after the block's free (OP_SITE_FREED, a PyTorch step's short-lived tensors)
// moves its bytes among the sites at the peak when the block was live there, and changes
// nothing for any other block: one placed after the peak, one of another size at that address,
// or one that was live at an earlier peak only.
TEST(ModelMetricsTest, SitesOfFreedBlocksMoveThePeaksSitesOnlyForBlocksLiveThere) {
  ProcessModel model;
  FrameFeed feed(&model);
  const uint64_t logits = (uint64_t{1} << 40) + 1, other = (uint64_t{1} << 40) + 2;
  feed.Malloc(kBase, 8 * kGiB, 0, /*stack=*/1);
  // A stream with sites learned after the fact (an adapter's first report): from here on the
  // model remembers the blocks live at the peak when they are freed.
  feed.Block(v1::BlockEvent::OP_SITE, kBase + 7 * kGiB, 0, 0, other);  // no block there
  feed.BlockAlloc(kBase, 1 * kGiB, /*stack=*/7);                       // live at the peak
  feed.BlockAlloc(kBase + 1 * kGiB, 2 * kGiB, 7);                      // live at the peak
  feed.Malloc(kBase + 8 * kGiB, 2 * kGiB, 0, 2);                       // the peak: 10 GiB
  feed.Free(kBase + 8 * kGiB);
  feed.BlockFree(kBase, 1 * kGiB);
  feed.BlockFree(kBase + 1 * kGiB, 2 * kGiB);
  feed.BlockAlloc(kBase + 4 * kGiB, 1 * kGiB, 7);  // after the peak
  feed.BlockFree(kBase + 4 * kGiB, 1 * kGiB);
  const auto freed_site = [&](uint64_t address, uint64_t size, uint64_t site) {
    feed.Block(v1::BlockEvent::OP_SITE_FREED, address, size, 0, site);
  };
  freed_site(kBase + 4 * kGiB, 1 * kGiB, other);  // not live at the peak
  freed_site(kBase + 1 * kGiB, 1 * kGiB, other);  // a block of another size
  freed_site(kBase, 1 * kGiB, logits);
  freed_site(kBase, 1 * kGiB, other);  // once only
  DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(BytesBySite(d.sites_at_peak),
            (std::map<uint64_t, uint64_t>{{7, 2 * kGiB}, {logits, 1 * kGiB}, {2, 2 * kGiB}}));
  EXPECT_TRUE(d.sites.empty());
  EXPECT_EQ(model.Summarize().unmatched_events, 0u);
  // A new peak: blocks freed before it were not live there.
  feed.Malloc(kBase + 16 * kGiB, 4 * kGiB, 0, 3);
  freed_site(kBase + 1 * kGiB, 2 * kGiB, logits);
  d = DeviceOf(model, 0);
  EXPECT_EQ(BytesBySite(d.sites_at_peak), (std::map<uint64_t, uint64_t>{{3, 4 * kGiB}}));
}

// Expandable segments: the handle created for a request sets the peak, its mapping follows,
// then the block it was for; the sites at the peak are taken after that block. A block freed
// in between (not a mapping or handle event) leaves them at the peak's own event.
TEST(ModelMetricsTest, PeakSitesSettleAcrossTheMappingOfTheHandleThatMadeThePeak) {
  for (bool free_between : {false, true}) {
    ProcessModel model;
    FrameFeed feed(&model);
    const uint64_t va = kBase + 64 * kGiB;
    feed.Map(v1::MapEvent::OP_RESERVE, va, 8 * kGiB);
    feed.Handle(v1::HandleEvent::OP_CREATE, /*handle=*/1, 2 * kGiB);
    feed.Map(v1::MapEvent::OP_MAP, va, 2 * kGiB, 1);
    feed.BlockAlloc(va, 1 * kGiB, /*stack=*/7);
    feed.Handle(v1::HandleEvent::OP_CREATE, 2, 2 * kGiB);  // the peak: 4 GiB
    if (free_between) feed.BlockFree(va, 1 * kGiB);
    feed.Map(v1::MapEvent::OP_MAP, va + 2 * kGiB, 2 * kGiB, 2);
    feed.BlockAlloc(va + 2 * kGiB, 2 * kGiB, 8);
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.peak_reserved_bytes, 4 * kGiB);
    EXPECT_EQ(BytesBySite(d.sites_at_peak),
              free_between ? (std::map<uint64_t, uint64_t>{{7, 1 * kGiB}})
                           : (std::map<uint64_t, uint64_t>{{7, 1 * kGiB}, {8, 2 * kGiB}}))
        << "free between: " << free_between;
  }
}

// Only the device's next event settles its peak, and only when it places a block: another
// event of that device between keeps the moment of the driver call, one of another device does
// not.
TEST(ModelMetricsTest, PeakSitesStayAtThePeakWhenAnotherEventCameBetween) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 2 * kGiB, 0, /*stack=*/1);
  feed.BlockAlloc(kBase, 1 * kGiB, /*stack=*/7);
  feed.BlockAlloc(kBase + 1 * kGiB, 512 * kMiB, 7);
  feed.Malloc(kBase + 2 * kGiB, 4 * kGiB, 0, 2);     // device 0's peak: 6 GiB
  feed.BlockFree(kBase + 1 * kGiB, 512 * kMiB);      // not a placement
  feed.BlockAlloc(kBase + 2 * kGiB, 3 * kGiB, 8);    // too late to settle the peak
  feed.Malloc(kBase + 8 * kGiB, 1 * kGiB, 1, 3);     // device 1's peak
  feed.BlockAlloc(kBase + 1 * kGiB, 256 * kMiB, 9);  // device 0
  feed.BlockAlloc(kBase + 8 * kGiB, 256 * kMiB, 8);  // device 1's next event: settles
  EXPECT_EQ(BytesBySite(DeviceOf(model, 0).sites_at_peak),
            (std::map<uint64_t, uint64_t>{{7, 1536 * kMiB}, {2, 4 * kGiB}}));
  EXPECT_EQ(BytesBySite(DeviceOf(model, 1).sites_at_peak),
            (std::map<uint64_t, uint64_t>{{8, 256 * kMiB}}));
}

// A frame walk that leaves code without frame pointers reads one more "return address" that is
// data (under PyTorch's allocator, the block's own address): stacks that differ only in frames
// past the last one in a known module are one site, shown without those frames.
TEST(ModelMetricsTest, SitesDifferingOnlyInFramesOutsideEveryModuleAreOneSite) {
  constexpr uint64_t kText = 0x400000;
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Module("/usr/lib/libc10_cuda.so", kText, 0x100000);
  feed.Stack(5, {kText + 0x10, kText + 0x20, kBase});               // junk: block 1's address
  feed.Stack(6, {kText + 0x10, kText + 0x20, kBase + 64 * kMiB});   // junk: block 2's
  feed.Stack(7, {kText + 0x10, kText + 0x30, kBase + 128 * kMiB});  // another site
  feed.Stack(8, {0x10, 0x20});  // no frame in a module: nothing to judge it by, left whole
  feed.Malloc(kBase, kGiB, 0, 4);
  feed.BlockAlloc(kBase, 64 * kMiB, 6);
  feed.BlockAlloc(kBase + 64 * kMiB, 64 * kMiB, 5);
  feed.BlockAlloc(kBase + 128 * kMiB, 32 * kMiB, 7);
  feed.BlockAlloc(kBase + 192 * kMiB, 16 * kMiB, 8);
  feed.Malloc(kBase + 4 * kGiB, 16 * kMiB, 0, 9);  // the peak of reserved, with the blocks live
  feed.Failed(2 * kGiB, 0, /*from_sub_allocator=*/true, 0, 16 * kGiB);
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  ASSERT_EQ(d.sites.size(), 4u);
  EXPECT_EQ(d.sites[0].stack_id, 5u);  // the smaller id of the two merged
  EXPECT_EQ(d.sites[0].live_bytes, 128 * kMiB);
  EXPECT_EQ(d.sites[0].count, 2u);
  EXPECT_EQ(d.sites[1].stack_id, 7u);
  EXPECT_EQ(d.sites[2].stack_id, 8u);
  EXPECT_EQ(d.sites[3].stack_id, 9u);
  ASSERT_EQ(d.sites_at_peak.size(), 4u);
  EXPECT_EQ(d.sites_at_peak[0].stack_id, 5u);
  EXPECT_EQ(d.sites_at_peak[0].count, 2u);
  ASSERT_EQ(s.ooms.size(), 1u);
  ASSERT_EQ(s.ooms[0].sites_at_failure.size(), 4u);
  EXPECT_EQ(s.ooms[0].sites_at_failure[0].stack_id, 5u);
  EXPECT_EQ(s.ooms[0].sites_at_failure[0].count, 2u);
  // Shown without the frame that is data; a stack with no frame in a module is kept whole.
  ASSERT_TRUE(s.stacks.contains(5));
  EXPECT_EQ(s.stacks.at(5).pcs, (std::vector<uint64_t>{kText + 0x10, kText + 0x20}));
  ASSERT_TRUE(s.stacks.contains(8));
  EXPECT_EQ(s.stacks.at(8).pcs, (std::vector<uint64_t>{0x10, 0x20}));
  // Exports name stacks the summary does not list the same way.
  ASSERT_TRUE(model.FindStack(6).has_value());
  EXPECT_EQ(model.FindStack(6)->pcs, (std::vector<uint64_t>{kText + 0x10, kText + 0x20}));
}

TEST(ModelMetricsTest, TimelineStaysBoundedAndOrdered) {
  ModelOptions options;
  options.timeline_max_points = 8;
  ProcessModel model(options);
  FrameFeed feed(&model);
  for (uint64_t i = 0; i < 100; ++i) feed.Malloc(kBase + i * kGiB, kMiB);
  const DeviceSummary d = DeviceOf(model, 0);
  ASSERT_LT(d.timeline.size(), 8u);
  ASSERT_GE(d.timeline.size(), 4u);
  EXPECT_EQ(d.timeline.front().seq, 1u);
  EXPECT_EQ(d.timeline.front().reserved_bytes, kMiB);
  for (std::size_t i = 1; i < d.timeline.size(); ++i) {
    EXPECT_GT(d.timeline[i].seq, d.timeline[i - 1].seq);
    // Reserved only grows here: a point's reserved is seq MiB.
    EXPECT_EQ(d.timeline[i].reserved_bytes, d.timeline[i].seq * kMiB);
  }
}

TEST(ModelMetricsTest, DevicesAreSeparate) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, 16 * kGiB);
  feed.Device(1, 16 * kGiB, std::string(16, '\x02'));
  feed.Malloc(kBase, 10 * kMiB, 0);
  feed.Malloc(kBase + kGiB, 20 * kMiB, 1);
  // A block annotated by address lands on the device of its segment.
  feed.Block(v1::BlockEvent::OP_ALLOC, kBase + kGiB, 5 * kMiB, -1);
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(DeviceOf(s, 0).reserved_bytes, 10 * kMiB);
  EXPECT_EQ(DeviceOf(s, 1).reserved_bytes, 20 * kMiB);
  EXPECT_EQ(DeviceOf(s, 1).cached_bytes, 15 * kMiB);
  EXPECT_EQ(DeviceOf(s, 1).uuid_hex, "02020202020202020202020202020202");
}

// Ranges that cannot be placed consistently are counted as unmatched and not applied: two
// segments or two blocks sharing bytes would count those bytes twice (freeing one block freed
// bytes the other still held), and a range wrapping around 2^64 breaks every sum.
TEST(ModelMetricsTest, OverlappingSegmentsAndBlocksAreNotApplied) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 64 * kMiB);
  feed.Malloc(kBase + 32 * kMiB, 64 * kMiB);   // inside the first segment
  feed.Malloc(kBase - 16 * kMiB, 32 * kMiB);   // over its start
  feed.Malloc(~uint64_t{0} - kMiB, 2 * kMiB);  // wraps around the address space
  feed.BlockAlloc(kBase, 8 * kMiB);
  feed.BlockAlloc(kBase + 4 * kMiB, 8 * kMiB);   // over the block before
  feed.BlockAlloc(kBase + 60 * kMiB, 8 * kMiB);  // past the segment's end
  feed.BlockAlloc(kBase + 2 * kMiB, 0);          // inside the first block
  {
    const ModelSummary s = model.Summarize();
    const DeviceSummary d = DeviceOf(s, 0);
    EXPECT_EQ(s.unmatched_events, 6u);
    EXPECT_EQ(d.reserved_bytes, 64 * kMiB);
    EXPECT_EQ(d.segments, 1u);
    EXPECT_EQ(d.allocated_bytes, 8 * kMiB);
    EXPECT_EQ(d.cached_bytes, 56 * kMiB);
    EXPECT_EQ(d.blocks, 1u);
  }
  feed.BlockFree(kBase, 8 * kMiB);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.allocated_bytes, 0u);
  EXPECT_EQ(d.cached_bytes, 64 * kMiB);
  EXPECT_EQ(d.largest_free_range_bytes, 64 * kMiB);
}

// A block at the address of a live one replaces it (its free was lost), even when the two
// differ in size; only overlaps with other blocks are refused.
TEST(ModelMetricsTest, BlockAtALiveBlockAddressReplacesIt) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, 64 * kMiB);
  feed.BlockAlloc(kBase, 8 * kMiB);
  feed.BlockAlloc(kBase + 16 * kMiB, 8 * kMiB);
  feed.BlockAlloc(kBase, 16 * kMiB);
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  EXPECT_EQ(s.unmatched_events, 1u);
  EXPECT_EQ(d.allocated_bytes, 24 * kMiB);
  EXPECT_EQ(d.cached_bytes, 40 * kMiB);
}

// An mp.spawn worker learns its rank after start (init_process_group(rank=...)), with no
// launcher variable for the agent's Hello: the rank mark names the process from then on, and a
// later one (a re-initialised process group) replaces it, world size included.
TEST(ModelMetricsTest, ARankMarkNamesTheProcess) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Hello(/*attached=*/false);
  EXPECT_FALSE(model.Summarize().rank.has_value());
  feed.RankMark(3, 8);
  ModelSummary s = model.Summarize();
  ASSERT_TRUE(s.rank.has_value());
  EXPECT_EQ(*s.rank, 3u);
  ASSERT_TRUE(s.world_size.has_value());
  EXPECT_EQ(*s.world_size, 8u);
  feed.RankMark(0, -1);
  s = model.Summarize();
  ASSERT_TRUE(s.rank.has_value());
  EXPECT_EQ(*s.rank, 0u);  // rank 0 is a rank, not "none"
  EXPECT_FALSE(s.world_size.has_value());
  feed.Mark("step 1");  // a plain mark leaves it alone
  EXPECT_EQ(model.Summarize().rank, std::optional<uint32_t>(0));
}

}  // namespace
}  // namespace fragscope
