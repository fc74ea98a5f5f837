// OOM analysis: one test per class (definitions and rules in collector/REPORT.md),
// recovery, and what a post-mortem carries. Device: 16 GiB total in every test.
#include <gtest/gtest.h>

#include <map>

#include "fragscope/model/oom_analyzer.h"
#include "fragscope/model/process_model.h"
#include "model_test_frames.h"

namespace fragscope {
namespace {

using testing::FrameFeed;
using testing::kGiB;
using testing::kMiB;

constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kTotal = 16 * kGiB;

bool Contains(const std::vector<std::string>& lines, std::string_view needle) {
  for (const std::string& l : lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

// A copy, so it cannot dangle when taken from a temporary summary.
OomPostMortem OnlyOom(const ModelSummary& s) {
  EXPECT_EQ(s.ooms.size(), 1u);
  return s.ooms.empty() ? OomPostMortem{} : s.ooms[0];
}

TEST(ModelOomTest, Capacity) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, 15 * kGiB, 0, 1);
  // 15 GiB held + 2 GiB asked = 17 GiB > 16 GiB: it never fits.
  feed.Failed(2 * kGiB, 0, false, /*free=*/512 * kMiB, kTotal);
  feed.End();
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.failed_allocations.size(), 1u);
  EXPECT_TRUE(s.failed_allocations[0].is_oom);
  EXPECT_FALSE(s.failed_allocations[0].recovered);
  EXPECT_TRUE(s.failed_allocations[0].has_postmortem);
  const OomPostMortem o = OnlyOom(s);
  EXPECT_EQ(o.oom_class, OomClass::kCapacity);
  EXPECT_EQ(o.headline, "OOM on device 0: requested 2.00 GiB \xe2\x80\x94 class: capacity");
  EXPECT_EQ(o.figures.allocated_bytes, 15 * kGiB);
  EXPECT_TRUE(Contains(o.advice, "activation checkpointing"));
  // The post-mortem names who holds the memory.
  ASSERT_FALSE(o.sites_at_failure.empty());
  EXPECT_EQ(o.sites_at_failure[0].stack_id, 1u);
  EXPECT_EQ(o.sites_at_failure[0].live_bytes, 15 * kGiB);
}

TEST(ModelOomTest, External) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, 4 * kGiB);
  // Held 4 + asked 4 = 8 GiB fits the 16 GiB device, but this process can reach only
  // free 2 + reserved 4 = 6 GiB: 16 - 2 - 4 = 10 GiB is held outside it.
  feed.Failed(4 * kGiB, 0, false, 2 * kGiB, kTotal);
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kExternal);
  EXPECT_EQ(o.figures.untracked_bytes.value, 10 * kGiB);
  EXPECT_NE(o.explanation.find("10.00 GiB of the device is outside"), std::string::npos)
      << o.explanation;
  EXPECT_TRUE(Contains(o.advice, "nvidia-smi"));
}

// Two 1 GiB segments, each with a 512 MiB block at its start: 1 GiB cached in two 512 MiB
// pieces that cannot merge across segments.
void BuildTwoHalfFullSegments(FrameFeed& feed) {
  feed.Device(0, kTotal);
  feed.Malloc(kBase, kGiB);
  feed.Malloc(kBase + 4 * kGiB, kGiB);
  feed.BlockAlloc(kBase, 512 * kMiB, /*stack=*/21);
  feed.BlockAlloc(kBase + 4 * kGiB, 512 * kMiB, /*stack=*/22);
}

TEST(ModelOomTest, Fragmentation) {
  ProcessModel model;
  FrameFeed feed(&model);
  BuildTwoHalfFullSegments(feed);
  // 768 MiB <= cached 1 GiB + free 256 MiB, but > largest free 512 MiB and > free 256 MiB.
  feed.Failed(768 * kMiB, 0, /*from_sub_allocator=*/true, 256 * kMiB, kTotal);
  const ModelSummary s = model.Summarize();
  const OomPostMortem o = OnlyOom(s);
  EXPECT_EQ(o.oom_class, OomClass::kFragmentation);
  EXPECT_EQ(o.headline, "OOM on device 0: requested 768.00 MiB \xe2\x80\x94 class: fragmentation");
  EXPECT_EQ(o.figures.cached_bytes, kGiB);
  EXPECT_EQ(o.figures.largest_free_range_bytes, 512 * kMiB);
  EXPECT_EQ(o.figures.device_free_bytes.value, 256 * kMiB);
  EXPECT_TRUE(o.figures.mem_info_from_failure);
  EXPECT_TRUE(Contains(o.advice, "expandable_segments:True"));
  EXPECT_TRUE(Contains(o.advice, "max_split_size_mb"));
  // Live set: the two blocks, 512 MiB each (ties by stack id).
  ASSERT_EQ(o.sites_at_failure.size(), 2u);
  EXPECT_EQ(o.sites_at_failure[0].stack_id, 21u);
  EXPECT_EQ(o.sites_at_failure[1].stack_id, 22u);
  // The last event is the failure itself, the ones before are the blocks.
  ASSERT_GE(o.recent_events.size(), 2u);
  EXPECT_EQ(o.recent_events.back().kind, EventKind::kFailedAlloc);
  EXPECT_EQ(o.recent_events.back().size, 768 * kMiB);
  EXPECT_EQ(o.recent_events[o.recent_events.size() - 2].kind, EventKind::kBlockAlloc);
}

TEST(ModelOomTest, FragmentationAdviceSkipsExpandableSegmentsWhenAlreadyOn) {
  ModelOptions options;
  options.expandable_segments = true;
  ProcessModel model(options);
  FrameFeed feed(&model);
  BuildTwoHalfFullSegments(feed);
  feed.Failed(768 * kMiB, 0, true, 256 * kMiB, kTotal);
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kFragmentation);
  EXPECT_FALSE(Contains(o.advice, "expandable_segments:True"));
  EXPECT_TRUE(Contains(o.advice, "max_split_size_mb"));
}

// A sub-allocator that carves VMM reservations already grows its segments in place (PyTorch's
// expandable segments): the trace says so even when no option does.
TEST(ModelOomTest, FragmentationAdviceSkipsExpandableSegmentsWhenTheTraceShowsThem) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Map(v1::MapEvent::OP_RESERVE, kBase, 4 * kGiB, 0, 0, -1);
  feed.Handle(v1::HandleEvent::OP_CREATE, 1, kGiB);
  feed.Map(v1::MapEvent::OP_MAP, kBase, kGiB, 1);
  // Blocks at 0, 512 and 1024 - 256 MiB: free runs of 256 MiB between them.
  feed.BlockAlloc(kBase, 256 * kMiB, 21);
  feed.BlockAlloc(kBase + 512 * kMiB, 256 * kMiB, 22);
  feed.Failed(384 * kMiB, 0, /*from_sub_allocator=*/true, 128 * kMiB, kTotal);
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kFragmentation);
  EXPECT_EQ(o.figures.carved_reservation_bytes, kGiB);
  EXPECT_FALSE(Contains(o.advice, "expandable_segments:True"));
  EXPECT_TRUE(Contains(o.advice, "max_split_size_mb"));
}

TEST(ModelOomTest, UnusableCacheOfAnotherStream) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, kGiB);
  // The segment belongs to stream 1: 768 MiB free there.
  feed.BlockAlloc(kBase, 256 * kMiB, 0, /*stream=*/1);
  // A 512 MiB request on stream 2 cannot use it.
  feed.Failed(512 * kMiB, 0, true, 100 * kMiB, kTotal, v1::API_fragscope_alloc_failed, 2,
              /*stream=*/2);
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kUnusableCache);
  EXPECT_EQ(o.figures.largest_free_range_bytes, 768 * kMiB);
  EXPECT_EQ(o.figures.largest_compatible_free_range_bytes, 0u);
  EXPECT_NE(o.explanation.find("another stream"), std::string::npos);
}

TEST(ModelOomTest, UnusableCachePendingFree) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, kGiB);
  // [0, 256) live, [256, 768) freed but pending, [768, 1024) free.
  feed.BlockAlloc(kBase, 256 * kMiB);
  feed.BlockAlloc(kBase + 256 * kMiB, 512 * kMiB);
  feed.Block(v1::BlockEvent::OP_FREE_PENDING, kBase + 256 * kMiB, 512 * kMiB);
  {
    const DeviceSummary d = model.Summarize().devices.at(0);
    EXPECT_EQ(d.pending_free_bytes, 512 * kMiB);
    EXPECT_EQ(d.allocated_bytes, 256 * kMiB);
    EXPECT_EQ(d.cached_bytes, 256 * kMiB);  // pending is not free yet
  }
  // 600 MiB with 400 MiB free on the device: held 768 MiB (live + pending) + 600 fits the
  // reach (400 free + 1 GiB reserved), no free range fits (256 MiB), but 512 + 256 = 768 MiB
  // would once the pending free lands.
  feed.Failed(600 * kMiB, 0, true, 400 * kMiB, kTotal);
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kUnusableCache);
  EXPECT_EQ(o.figures.largest_free_range_if_pending_completed_bytes, 768 * kMiB);
  EXPECT_TRUE(Contains(o.advice, "Synchronize"));
}

TEST(ModelOomTest, UnusableCacheHeldByAPool) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  // A cudaMallocAsync pool keeps 2 GiB reserved with nothing in use.
  feed.MemInfo(0, 512 * kMiB, kTotal, /*pool=*/0xAA, 2 * kGiB, 0);
  // A plain cudaMalloc of 1 GiB: more than the 512 MiB free, no cache, but the pool's 2 GiB.
  feed.Failed(kGiB, 0, false, 512 * kMiB, kTotal);
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kUnusableCache);
  EXPECT_EQ(o.figures.pool_free_bytes, 2 * kGiB);
  EXPECT_TRUE(Contains(o.advice, "cudaMemPoolTrimTo"));
}

TEST(ModelOomTest, UnknownWithOpaqueSegments) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Module("/usr/lib/libc10_cuda.so", 0x7000000000, 0x100000);
  feed.Stack(3, {0x7000000042});
  feed.Malloc(kBase, 4 * kGiB, 0, 3);
  // 1 GiB with 512 MiB free: whether the 4 GiB opaque segment has room decides it.
  feed.Failed(kGiB, 0, false, 512 * kMiB, kTotal);
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kUnknown);
  EXPECT_EQ(o.figures.opaque_bytes, 4 * kGiB);
  EXPECT_TRUE(Contains(o.advice, "PyTorch adapter"));
}

TEST(ModelOomTest, UnknownWithoutMemInfo) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Malloc(kBase, kGiB);
  feed.Failed(kGiB, 0, true);  // no free/total with it, none before
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kUnknown);
  EXPECT_FALSE(o.figures.device_free_bytes.known());
  EXPECT_NE(o.explanation.find("No device free/total sample"), std::string::npos);
}

TEST(ModelOomTest, UsesLatestSampleWhenTheFailureHasNone) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, 4 * kGiB);
  feed.MemInfo(0, 2 * kGiB, kTotal);
  feed.Failed(4 * kGiB, 0, false);  // same numbers as External, from the earlier sample
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.oom_class, OomClass::kExternal);
  EXPECT_FALSE(o.figures.mem_info_from_failure);
}

TEST(ModelOomTest, RetriedDriverFailureIsRecovered) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Failed(kGiB, 0, false, 512 * kMiB, kTotal);  // seq 1
  feed.Malloc(kBase, 512 * kMiB);  // seq 2: smaller, not a retry of the same request
  {
    const ModelSummary s = model.Summarize();
    EXPECT_FALSE(s.failed_allocations[0].recovered);
    EXPECT_EQ(s.ooms.size(), 1u);
  }
  feed.Malloc(kBase + 2 * kGiB, kGiB);  // seq 3: the retry succeeded
  feed.End();
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.failed_allocations.size(), 1u);
  EXPECT_TRUE(s.failed_allocations[0].recovered);
  EXPECT_EQ(s.failed_allocations[0].recovered_by_seq, 3u);
  EXPECT_FALSE(s.failed_allocations[0].has_postmortem);
  EXPECT_TRUE(s.ooms.empty());
}

// A refused release shipped before its call (format 1.7): the free, then the same allocation
// put back. The memory is held again, and the put-back is no granted request, so it does not
// make an OOM before it "recovered".
TEST(ModelOomTest, AnAllocationPutBackAfterARefusedFreeIsNoRecovery) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, kGiB, 0, /*stack=*/7);         // seq 1
  feed.Failed(kGiB, 0, false, 512 * kMiB, kTotal);  // seq 2
  feed.Free(kBase);                                 // seq 3, shipped before the call
  feed.Malloc(kBase, kGiB, 0, /*stack=*/7, /*failed_release_result=*/900);  // seq 4: put back
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.failed_allocations.size(), 1u);
  EXPECT_FALSE(s.failed_allocations[0].recovered);
  EXPECT_EQ(s.ooms.size(), 1u);
  EXPECT_EQ(testing::DeviceOf(s, 0).reserved_bytes, kGiB);
  EXPECT_EQ(s.unmatched_events, 0u);
  // A post-mortem after it lists it as what it was, with the release's result.
  feed.Failed(kGiB, 0, false, 512 * kMiB, kTotal);  // seq 5
  {
    const ModelSummary after = model.Summarize();
    ASSERT_EQ(after.ooms.size(), 2u);
    const std::vector<RecentEvent>& recent = after.ooms[1].recent_events;
    ASSERT_GE(recent.size(), 2u);
    const RecentEvent& put_back = recent[recent.size() - 2];
    EXPECT_EQ(put_back.kind, EventKind::kPutBack);
    EXPECT_STREQ(EventKindName(put_back.kind), "put_back");
    EXPECT_EQ(put_back.result, 900);
    EXPECT_EQ(put_back.stack_id, 7u);
    EXPECT_EQ(put_back.seq, 4u);
  }
  feed.Free(kBase);  // seq 6: the free that went through
  EXPECT_EQ(testing::DeviceOf(model, 0).reserved_bytes, 0u);
  EXPECT_EQ(model.Summarize().unmatched_events, 0u);
}

TEST(ModelOomTest, SuccessOnAnotherDeviceDoesNotRecover) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Failed(kGiB, 0, false, 512 * kMiB, kTotal);
  feed.Malloc(kBase, 2 * kGiB, /*device=*/1);
  const ModelSummary s = model.Summarize();
  EXPECT_FALSE(s.failed_allocations[0].recovered);
  EXPECT_EQ(s.ooms.size(), 1u);
}

TEST(ModelOomTest, DriverFailuresBeforeASubAllocatorOomAreExplainedByIt) {
  ProcessModel model;
  FrameFeed feed(&model);
  BuildTwoHalfFullSegments(feed);  // seqs 1..4
  // PyTorch: cudaMalloc fails, cache freed, cudaMalloc fails again, OOM raised.
  feed.Failed(kGiB, 0, false, 256 * kMiB, kTotal);                                       // 5
  feed.Failed(kGiB, 0, false, 256 * kMiB, kTotal);                                       // 6
  feed.Failed(768 * kMiB, 0, true, 256 * kMiB, kTotal, v1::API_fragscope_alloc_failed);  // 7
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.failed_allocations.size(), 3u);
  EXPECT_EQ(s.failed_allocations[0].superseded_by_seq, 7u);
  EXPECT_EQ(s.failed_allocations[1].superseded_by_seq, 7u);
  EXPECT_FALSE(s.failed_allocations[0].has_postmortem);
  EXPECT_TRUE(s.failed_allocations[2].has_postmortem);
  const OomPostMortem o = OnlyOom(s);
  EXPECT_EQ(o.failure.seq, 7u);
  EXPECT_EQ(o.oom_class, OomClass::kFragmentation);
}

TEST(ModelOomTest, SubAllocatorOomKeepsItsPostMortemWhenTheProgramGoesOn) {
  ProcessModel model;
  FrameFeed feed(&model);
  BuildTwoHalfFullSegments(feed);
  feed.Failed(768 * kMiB, 0, true, 256 * kMiB, kTotal);
  feed.Malloc(kBase + 8 * kGiB, kGiB);  // a batch-size finder caught it and went on
  const ModelSummary s = model.Summarize();
  EXPECT_TRUE(s.failed_allocations[0].recovered);
  EXPECT_EQ(s.ooms.size(), 1u);
}

TEST(ModelOomTest, NonOomErrorsAreListedWithoutPostMortem) {
  ProcessModel model;
  FrameFeed feed(&model);
  // CUDA_ERROR_NOT_SUPPORTED from a cuMemCreate probe (PyTorch retries another handle type).
  feed.Failed(20 * kMiB, 0, false, 0, 0, v1::API_cuMemCreate, /*result=*/801);
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.failed_allocations.size(), 1u);
  EXPECT_FALSE(s.failed_allocations[0].is_oom);
  EXPECT_EQ(s.failed_allocations[0].api_name, "cuMemCreate");
  EXPECT_TRUE(s.ooms.empty());
}

TEST(ModelOomTest, PostMortemsAreBounded) {
  ModelOptions options;
  options.max_postmortems = 2;
  ProcessModel model(options);
  FrameFeed feed(&model);
  for (int i = 0; i < 5; ++i) feed.Failed(kGiB, 0, true, 0, kTotal);
  const ModelSummary s = model.Summarize();
  EXPECT_EQ(s.failed_allocations.size(), 5u);
  EXPECT_EQ(s.ooms.size(), 2u);
  EXPECT_EQ(s.ooms_without_postmortem, 3u);
}

// The post-mortem keeps the device's segments as they were at the failure: the map that
// shows why no free range was large enough, gone by the end (the program frees its cache).
TEST(ModelOomTest, PostMortemKeepsTheSegmentMapOfTheFailure) {
  ProcessModel model;
  FrameFeed feed(&model);
  BuildTwoHalfFullSegments(feed);
  feed.Failed(768 * kMiB, 0, true, 256 * kMiB, kTotal);
  feed.BlockFree(kBase, 512 * kMiB);
  feed.BlockFree(kBase + 4 * kGiB, 512 * kMiB);
  feed.Free(kBase);
  feed.Free(kBase + 4 * kGiB);
  const ModelSummary s = model.Summarize();
  EXPECT_EQ(testing::DeviceOf(s, 0).segments, 0u) << "the end holds nothing";
  const OomPostMortem o = OnlyOom(s);
  ASSERT_NE(o.segments_at_failure, nullptr);
  EXPECT_EQ(o.map_missing, "");
  EXPECT_EQ(o.segments_left_out, 0u);
  const std::vector<SegmentLayout>& map = *o.segments_at_failure;
  ASSERT_EQ(map.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const uint64_t base = kBase + static_cast<uint64_t>(i) * 4 * kGiB;
    EXPECT_EQ(map[i].base, base);
    EXPECT_EQ(map[i].coverage, Coverage::kAnnotated);
    ASSERT_EQ(map[i].blocks.size(), 1u);
    EXPECT_EQ(map[i].blocks[0].address, base);
    EXPECT_EQ(map[i].blocks[0].size, 512 * kMiB);
    EXPECT_EQ(map[i].blocks[0].stack_id, 21u + i);
    ASSERT_EQ(map[i].free_ranges.size(), 1u);
    EXPECT_EQ(map[i].free_ranges[0].address, base + 512 * kMiB);
    EXPECT_EQ(map[i].free_ranges[0].size, 512 * kMiB);
  }
}

// Each map costs memory in proportion to the live blocks: the latest max_postmortem_maps
// post-mortems keep theirs (the last OOM is the one a run died of), the others say it was let
// go; a map keeps the largest postmortem_map_segments segments and counts the rest.
TEST(ModelOomTest, PostMortemMapsAreBounded) {
  ModelOptions options;
  options.max_postmortem_maps = 2;
  options.postmortem_map_segments = 1;
  ProcessModel model(options);
  FrameFeed feed(&model);
  BuildTwoHalfFullSegments(feed);
  for (int i = 0; i < 4; ++i) feed.Failed(768 * kMiB, 0, true, 256 * kMiB, kTotal);
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.ooms.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const OomPostMortem& o = s.ooms[i];
    const bool kept = i >= 2;
    EXPECT_EQ(o.segments_at_failure != nullptr, kept) << i;
    EXPECT_EQ(o.map_missing.find("let go: only the latest 2 OOMs") == 0, !kept) << o.map_missing;
    if (kept) {
      EXPECT_EQ(o.segments_at_failure->size(), 1u);
      EXPECT_EQ(o.segments_left_out, 1u);
    }
  }
  options.max_postmortem_maps = 0;  // none at all
  ProcessModel without(options);
  FrameFeed feed2(&without);
  BuildTwoHalfFullSegments(feed2);
  feed2.Failed(768 * kMiB, 0, true, 256 * kMiB, kTotal);
  const OomPostMortem o = OnlyOom(without.Summarize());
  EXPECT_EQ(o.segments_at_failure, nullptr);
  EXPECT_NE(o.map_missing.find("turned off"), std::string::npos) << o.map_missing;
}

// A map copies every block of the device: a device with more than postmortem_map_max_entries
// segments and blocks gets none, and a run that fails over and over stops copying them once
// they would cost more than 64 entries per event applied (plus one map of the largest size):
// replay stays O(events), whatever the failures.
TEST(ModelOomTest, PostMortemMapsCostBoundedWork) {
  ModelOptions options;
  options.postmortem_map_max_entries = 3;  // 2 segments + 2 blocks are 4
  ProcessModel too_big(options);
  FrameFeed feed(&too_big);
  BuildTwoHalfFullSegments(feed);
  feed.Failed(768 * kMiB, 0, true, 256 * kMiB, kTotal);
  OomPostMortem o = OnlyOom(too_big.Summarize());
  EXPECT_EQ(o.segments_at_failure, nullptr);
  EXPECT_NE(o.map_missing.find("held 4 segments and blocks"), std::string::npos) << o.map_missing;

  // 200 blocks in one segment (201 entries, 202 events with the device), then 200 failures:
  // copying a map at each would be 201 entries per event, against a budget of 64 per event.
  options.postmortem_map_max_entries = 1000;
  options.max_postmortem_maps = 1000;
  options.max_postmortems = 1000;
  ProcessModel often(options);
  FrameFeed feed2(&often);
  feed2.Device(0, kTotal);
  feed2.Malloc(kBase, kGiB);
  for (uint64_t i = 0; i < 200; ++i) feed2.BlockAlloc(kBase + i * 4 * kMiB, 2 * kMiB, 21);
  constexpr uint64_t kFailures = 200;
  for (uint64_t i = 0; i < kFailures; ++i) {
    feed2.Failed(768 * kMiB, 0, true, 256 * kMiB, kTotal);
  }
  const ModelSummary s = often.Summarize();
  ASSERT_EQ(s.ooms.size(), kFailures);
  uint64_t with_map = 0;
  for (const OomPostMortem& pm : s.ooms) {
    if (pm.segments_at_failure != nullptr) {
      ++with_map;
    } else {
      EXPECT_NE(pm.map_missing.find("too often"), std::string::npos) << pm.map_missing;
    }
  }
  EXPECT_GT(with_map, 0u);
  EXPECT_LT(with_map, kFailures);
  // What was copied stays within the budget: 64 entries per event, plus one large map.
  EXPECT_LE(with_map * 201, 64 * s.events + 1000) << with_map;
}

// The classifier alone, on figures written out by hand.
TEST(ClassifyOomTest, ContextOverheadTurnsExternalIntoCapacity) {
  OomFigures f;
  f.requested_bytes = 2 * kGiB;
  f.device_total_bytes = Measured<uint64_t>::Known(16 * kGiB);
  f.device_free_bytes = Measured<uint64_t>::Known(kGiB);
  f.allocated_bytes = 14 * kGiB + 512 * kMiB;
  f.reserved_bytes = 14 * kGiB + 512 * kMiB;
  FailedAllocation failure;
  // Held 14.5 + 2 = 16.5 GiB > 16 GiB: capacity whatever the allowance.
  EXPECT_EQ(ClassifyOom(f, failure, ModelOptions{}).oom_class, OomClass::kCapacity);
  f.allocated_bytes = f.reserved_bytes = 13 * kGiB + 768 * kMiB;
  // Held 13.75 + 2 = 15.75 GiB fits 16 GiB but not free 1 + reserved 13.75: external ...
  EXPECT_EQ(ClassifyOom(f, failure, ModelOptions{}).oom_class, OomClass::kExternal);
  // ... unless the 512 MiB a CUDA context costs is set aside: then 15.75 > 15.5, capacity.
  ModelOptions with_context;
  with_context.context_overhead_bytes = 512 * kMiB;
  EXPECT_EQ(ClassifyOom(f, failure, with_context).oom_class, OomClass::kCapacity);
}

TEST(ClassifyOomTest, EnoughFreeMemoryIsUnknownNotFragmentation) {
  OomFigures f;
  f.requested_bytes = kGiB;
  f.device_total_bytes = Measured<uint64_t>::Known(16 * kGiB);
  f.device_free_bytes = Measured<uint64_t>::Known(4 * kGiB);
  FailedAllocation failure;
  const OomVerdict v = ClassifyOom(f, failure, ModelOptions{});
  EXPECT_EQ(v.oom_class, OomClass::kUnknown);
  EXPECT_NE(v.explanation.find("4.00 GiB free"), std::string::npos);
}

// A sub-allocator's adapter that learns blocks' sites after the fact (BlockEvent.OP_SITE, the
// PyTorch adapter's Python frames): the bytes move to the new site, live and at the failure,
// and a site for a block that is gone changes nothing.
TEST(ModelOomTest, BlockSitesLearnedLaterMoveTheBlocksBytes) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, 8 * kGiB, 0, 1);
  feed.BlockAlloc(kBase, 3 * kGiB, /*stack=*/5);
  feed.BlockAlloc(kBase + 4 * kGiB, 1 * kGiB, /*stack=*/5);
  feed.BlockAlloc(kBase + 6 * kGiB, 1 * kGiB, /*stack=*/5);
  const uint64_t python_site = (uint64_t{1} << 40) + 3;
  feed.Block(v1::BlockEvent::OP_SITE, kBase, 0, 0, python_site);
  feed.Block(v1::BlockEvent::OP_SITE, kBase + 4 * kGiB, 0, 0, python_site);
  feed.Block(v1::BlockEvent::OP_SITE, kBase + 5 * kGiB, 0, 0, python_site);  // no block there
  feed.Failed(2 * kGiB, 0, /*from_sub_allocator=*/true);
  feed.End();
  const ModelSummary s = model.Summarize();
  EXPECT_EQ(s.unmatched_events, 0u);
  const OomPostMortem o = OnlyOom(s);
  ASSERT_EQ(o.sites_at_failure.size(), 2u);
  EXPECT_EQ(o.sites_at_failure[0].stack_id, python_site);
  EXPECT_EQ(o.sites_at_failure[0].live_bytes, 4 * kGiB);
  EXPECT_EQ(o.sites_at_failure[0].count, 2u);
  EXPECT_EQ(o.sites_at_failure[1].stack_id, 5u);
  EXPECT_EQ(o.sites_at_failure[1].live_bytes, 1 * kGiB);
  // Figures are the blocks', whoever they are attributed to.
  EXPECT_EQ(o.figures.allocated_bytes, 5 * kGiB);
}

// The sites at the peak of reserved: a block live at the peak and still live when its site
// arrives is counted there under its new site; one placed after the peak is not there at all.
TEST(ModelOomTest, BlockSitesLearnedLaterMoveThePeaksSitesWhenLiveAtThePeak) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, 8 * kGiB, 0, 1);
  feed.BlockAlloc(kBase, 3 * kGiB, /*stack=*/5);
  feed.Malloc(kBase + 8 * kGiB, 4 * kGiB, 0, 2);  // the peak of reserved: 12 GiB
  feed.Free(kBase + 8 * kGiB);
  feed.BlockAlloc(kBase + 4 * kGiB, 1 * kGiB, /*stack=*/5);  // after the peak
  const uint64_t weights = (uint64_t{1} << 40) + 1, activations = (uint64_t{1} << 40) + 2;
  feed.Block(v1::BlockEvent::OP_SITE, kBase, 0, 0, weights);
  feed.Block(v1::BlockEvent::OP_SITE, kBase + 4 * kGiB, 0, 0, activations);
  feed.Failed(6 * kGiB, 0, /*from_sub_allocator=*/true);
  feed.End();
  const OomPostMortem o = OnlyOom(model.Summarize());
  EXPECT_EQ(o.peak_reserved_bytes, 12 * kGiB);
  std::map<uint64_t, uint64_t> at_peak;  // stack -> bytes
  for (const SiteEntry& e : o.sites_at_peak) at_peak[e.stack_id] = e.live_bytes;
  // (The annotated segment itself is no site: its blocks are.)
  EXPECT_EQ(at_peak, (std::map<uint64_t, uint64_t>{{2, 4 * kGiB}, {weights, 3 * kGiB}}));
  std::map<uint64_t, uint64_t> at_failure;
  for (const SiteEntry& e : o.sites_at_failure) at_failure[e.stack_id] = e.live_bytes;
  EXPECT_EQ(at_failure,
            (std::map<uint64_t, uint64_t>{{weights, 3 * kGiB}, {activations, 1 * kGiB}}));
}

// The per-device OOM count `top` shows is the analyzer's: a sub-allocator OOM counts even when
// a later allocation succeeded (the program caught it), a driver failure counts unless a retry
// recovered it or a sub-allocator OOM right after explains it, and other errors never count.
TEST(ModelOomTest, OomCountPerDeviceIsTheAnalyzersRule) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Device(1, kTotal);
  feed.Failed(4 * kGiB, 0, false);  // explained by the sub-allocator OOM after it
  feed.Failed(4 * kGiB, 0, true);   // counts
  feed.Failed(2 * kGiB, 1, true);   // counts, though caught: the malloc below recovers it
  feed.Failed(1 * kGiB, 1, false);  // recovered by the malloc below: a retry that worked
  feed.Malloc(kBase, 2 * kGiB, 1);
  feed.Failed(8 * kGiB, 1, false);                                         // counts
  feed.Failed(0, 1, false, 0, 0, v1::API_cuLaunchKernel, /*result=*/209);  // not an OOM
  feed.End();
  const ModelSummary s = model.Summarize();
  std::map<int, uint64_t> counts;
  for (const DeviceSummary& d : s.devices) counts[d.ordinal] = d.oom_count;
  EXPECT_EQ(counts, (std::map<int, uint64_t>{{0, 1}, {1, 2}}));
  // The same failures the analyzer keeps a post-mortem for.
  EXPECT_EQ(s.ooms.size(), 3u);
}

}  // namespace
}  // namespace fragscope
