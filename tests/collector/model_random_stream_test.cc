// Random event streams, consistent or not (lost frees, double frees, blocks outside segments,
// unmaps of nothing): the model must not crash, its figures must stay coherent, and an empty
// Snapshot must bring every live figure back to exactly zero, which proves that every change
// taken out of the per-device sums matched what was put in.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>

#include "fragscope/model/process_model.h"
#include "fragscope/report/report_json.h"
#include "model_test_frames.h"

namespace fragscope {
namespace {

using testing::FrameFeed;
using testing::kMiB;
using v1::BlockEvent;
using v1::HandleEvent;
using v1::MapEvent;

void ExpectCoherent(const ModelSummary& s) {
  for (const DeviceSummary& d : s.devices) {
    EXPECT_LE(d.largest_free_range_bytes, d.cached_bytes) << "device " << d.ordinal;
    EXPECT_EQ(d.stranded_bytes, d.cached_bytes - d.largest_free_range_bytes);
    EXPECT_EQ(d.cached_bytes == 0, d.free_ranges == 0) << "device " << d.ordinal;
    EXPECT_EQ(d.segments, d.exact_segments + d.annotated_segments + d.opaque_segments);
    EXPECT_LE(d.exact_bytes, d.allocated_bytes);
    EXPECT_LE(d.reserved_bytes, d.peak_reserved_bytes);
    if (d.fragmentation.value) {
      EXPECT_GE(*d.fragmentation.value, 0.0);
      EXPECT_LE(*d.fragmentation.value, 1.0);
    }
  }
}

class RandomStreamTest : public ::testing::TestWithParam<uint32_t> {};

// One random event of the streams below (any kind, consistent or not).
void FeedRandomEvent(FrameFeed& feed, std::mt19937_64& rng) {
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  // A small address space (16 slots of 64 MiB) so events collide often.
  const uint64_t base = 0x7f0000000000;
  auto address = [&] { return base + pick(16) * 64 * kMiB + pick(4) * 16 * kMiB; };
  auto size = [&] { return (1 + pick(8)) * 8 * kMiB; };
  const int device = static_cast<int>(pick(2));
  switch (pick(14)) {
    case 0:
      feed.Malloc(address(), size(), device, pick(3));
      break;
    case 1:
      feed.Free(address(), v1::API_cudaFree, device);
      break;
    case 2:
      feed.AllocKind(address(), size(), v1::MEMORY_KIND_POOL, v1::API_cudaMallocAsync, device,
                     1 + pick(2));
      break;
    case 3:
      feed.Free(address(), v1::API_cudaFreeAsync, device);
      break;
    case 4:
      feed.MemInfo(device, 1024 * kMiB, 4096 * kMiB, pick(3), pick(4) * 64 * kMiB,
                   pick(2) * 8 * kMiB);
      break;
    case 5:
    case 6:
      feed.Block(BlockEvent::OP_ALLOC, address() + pick(4) * kMiB, (1 + pick(4)) * kMiB, -1,
                 pick(4), pick(2));
      break;
    case 7:
      feed.Block(pick(2) ? BlockEvent::OP_FREE : BlockEvent::OP_FREE_PENDING,
                 address() + pick(4) * kMiB, kMiB);
      break;
    case 8:
      feed.Map(MapEvent::OP_RESERVE, address(), 64 * kMiB, 0, 0, -1);
      break;
    case 9:
      feed.Map(MapEvent::OP_MAP, address(), 16 * kMiB, 1 + pick(6), 0, device);
      break;
    case 10:
      feed.Map(MapEvent::OP_UNMAP, address() + pick(2) * 4 * kMiB, 8 * kMiB);
      break;
    case 11:
      feed.Map(MapEvent::OP_FREE_RANGE, address(), 64 * kMiB);
      break;
    case 12: {
      const HandleEvent::Op ops[] = {HandleEvent::OP_CREATE, HandleEvent::OP_RELEASE,
                                     HandleEvent::OP_RETAIN, HandleEvent::OP_IMPORT};
      feed.Handle(ops[pick(4)], 1 + pick(6), 16 * kMiB, device);
      break;
    }
    case 13:
      feed.Failed(size(), device, pick(2) == 0, 512 * kMiB, 4096 * kMiB);
      break;
  }
}

// A model that sees the stream's modules and stacks: one caching-allocator stack (opaque
// segments) and one plain.
void FeedStacks(FrameFeed& feed) {
  feed.Module("/usr/lib/libc10_cuda.so", 0x7000000000, 0x1000);
  feed.Stack(1, {0x7000000010});  // through a caching allocator: opaque segments
  feed.Stack(2, {0x400000});
}

TEST_P(RandomStreamTest, SurvivesAndStaysCoherent) {
  std::mt19937_64 rng(GetParam());
  ProcessModel model;
  FrameFeed feed(&model);
  FeedStacks(feed);
  for (int i = 0; i < 20000; ++i) {
    FeedRandomEvent(feed, rng);
    if (i % 2000 == 0) ExpectCoherent(model.Summarize());
  }
  ExpectCoherent(model.Summarize());

  // An empty snapshot that replaces the state (a resync): nothing is live any more.
  v1::Snapshot empty;
  empty.set_reason(v1::Snapshot::REASON_RESYNC);
  empty.set_complete_history(true);
  feed.Snapshot(empty);
  const ModelSummary s = model.Summarize();
  EXPECT_TRUE(s.orphan_blocks.empty());
  for (const DeviceSummary& d : s.devices) {
    // Pools keep their last sampled reservation: a snapshot says nothing about it.
    EXPECT_EQ(d.reserved_bytes, d.pool_reserved_bytes) << "device " << d.ordinal;
    EXPECT_EQ(d.allocated_bytes, 0u);
    EXPECT_EQ(d.opaque_bytes, 0u);
    EXPECT_EQ(d.cached_bytes, 0u);
    EXPECT_EQ(d.pending_free_bytes, 0u);
    EXPECT_EQ(d.largest_free_range_bytes, 0u);
    EXPECT_EQ(d.segments, 0u);
    EXPECT_EQ(d.blocks, 0u);
    EXPECT_EQ(d.free_ranges, 0u);
    EXPECT_EQ(d.imported_bytes, 0u);
    EXPECT_EQ(d.unmapped_handle_bytes, 0u);
    EXPECT_TRUE(d.sites.empty());
  }
}

// A model fed every event frame as decoded (ProcessModel::Apply(HotEvent), what replays and
// StreamSession do) must be exactly the model fed the frames: the same JSON report, byte for
// byte, all along the stream, including the events the decoded path hands on as frames (maps,
// handles, late block sites) and the frames that are no events.
TEST_P(RandomStreamTest, DecodedEventsGiveTheSameModel) {
  std::mt19937_64 rng(GetParam());
  ProcessModel framed;
  ProcessModel decoded;
  FrameFeed feed(&framed);
  feed.MirrorDecodedTo(&decoded);
  FeedStacks(feed);
  auto report = [](const ProcessModel& m) {
    std::ostringstream out;
    RenderJson(m.Summarize(), out);
    return out.str();
  };
  for (int i = 0; i < 20000; ++i) {
    FeedRandomEvent(feed, rng);
    if (i % 97 == 0) {
      feed.Block(i % 2 ? BlockEvent::OP_SITE : BlockEvent::OP_SITE_FREED,
                 0x7f0000000000 + (rng() % 64) * 16 * kMiB, kMiB, -1, 1 + rng() % 2);
    }
    if (i % 2500 == 0) {
      const std::string want = report(framed);
      ASSERT_EQ(report(decoded), want) << "after event " << i;
      if (i > 0) {
        ASSERT_GT(want.size(), 1000u);  // devices, segments and sites by then
      }
    }
  }
  v1::Snapshot empty;
  empty.set_reason(v1::Snapshot::REASON_RESYNC);
  empty.set_complete_history(true);
  feed.Snapshot(empty);
  feed.Malloc(0x7f0000000000, 64 * kMiB, 0, 2);
  feed.End();
  EXPECT_EQ(report(decoded), report(framed));
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomStreamTest, ::testing::Values(1u, 2u, 3u, 42u, 2024u));

}  // namespace
}  // namespace fragscope
