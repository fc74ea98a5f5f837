// Blocks known at syncs only (collector/REPORT.md, "Blocks known at syncs only"): a
// sub-allocator read from its own state (PyTorch's snapshot diffs) ends each sync with a
// Mark.blocks_synced. The model counts the syncs, knows whether the final figures are a sync's
// fresh state, and does not classify a failure against blocks from a sync events ago.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "fragscope/model/process_model.h"
#include "model_test_frames.h"

namespace fragscope {
namespace {

using testing::FrameFeed;
using testing::kGiB;
using testing::kMiB;

constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kTotal = 16 * kGiB;

// Two 1 GiB segments, each with a 512 MiB block at its start (read by a sync): 1 GiB cached in
// two 512 MiB pieces.
void SyncTwoHalfFullSegments(FrameFeed& feed) {
  feed.Device(0, kTotal);
  feed.Malloc(kBase, kGiB);
  feed.Malloc(kBase + 4 * kGiB, kGiB);
  feed.BlockAlloc(kBase, 512 * kMiB);
  feed.BlockAlloc(kBase + 4 * kGiB, 512 * kMiB);
  feed.Mark("PyTorch blocks synced (start)", /*blocks_synced=*/true);
}

TEST(ModelBlockSyncTest, AStreamThatFollowsEveryBlockHasNoSyncs) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.Malloc(kBase, kGiB);
  feed.BlockAlloc(kBase, 512 * kMiB);
  feed.Mark("step 1");  // a user's mark is not a sync
  feed.Malloc(kBase + 4 * kGiB, kGiB);
  const ModelSummary s = model.Summarize();
  EXPECT_EQ(s.block_syncs, 0u);
  EXPECT_EQ(s.last_block_sync_seq, 0u);
  EXPECT_TRUE(s.blocks_known_at_end);
}

TEST(ModelBlockSyncTest, SyncsAreCountedAndTheEndIsKnownOnlyRightAfterOne) {
  ProcessModel model;
  FrameFeed feed(&model);
  SyncTwoHalfFullSegments(feed);
  const uint64_t first_sync = feed.next_seq() - 1;
  ModelSummary s = model.Summarize();
  EXPECT_EQ(s.block_syncs, 1u);
  EXPECT_EQ(s.last_block_sync_seq, first_sync);
  EXPECT_TRUE(s.blocks_known_at_end) << "nothing happened since the sync";

  // The program runs on: a segment comes, and with it time in which blocks may change unseen.
  feed.Malloc(kBase + 8 * kGiB, kGiB);
  feed.MemInfo(0, 8 * kGiB, kTotal);
  s = model.Summarize();
  EXPECT_FALSE(s.blocks_known_at_end);

  // The exit sync: the blocks are known again, and a sample or a mark after it changes nothing.
  feed.BlockAlloc(kBase + 8 * kGiB, 256 * kMiB);
  feed.Mark("PyTorch blocks synced (exit)", /*blocks_synced=*/true);
  const uint64_t exit_sync = feed.next_seq() - 1;
  feed.MemInfo(0, 8 * kGiB, kTotal);
  feed.Mark("done");
  feed.End();
  s = model.Summarize();
  EXPECT_EQ(s.block_syncs, 2u);
  EXPECT_EQ(s.last_block_sync_seq, exit_sync);
  EXPECT_TRUE(s.blocks_known_at_end);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].allocated_bytes, kGiB + 256 * kMiB);
}

TEST(ModelBlockSyncTest, AnOomRightAfterItsSyncIsJudgedAsUsual) {
  ProcessModel model;
  FrameFeed feed(&model);
  SyncTwoHalfFullSegments(feed);
  // PyTorch's OOM observer: the sync (above), then the sub-allocator's failure.
  feed.Failed(768 * kMiB, 0, /*from_sub_allocator=*/true, 256 * kMiB, kTotal);
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.ooms.size(), 1u);
  EXPECT_EQ(s.ooms[0].oom_class, OomClass::kFragmentation);
  EXPECT_FALSE(s.ooms[0].figures.blocks_synced_at_seq.has_value());
}

TEST(ModelBlockSyncTest, AFailureEventsAfterTheLastSyncIsNotJudgedAgainstItsBlocks) {
  ProcessModel model;
  FrameFeed feed(&model);
  SyncTwoHalfFullSegments(feed);
  const uint64_t sync = feed.next_seq() - 1;
  // The program ran on (a driver allocation) and then a driver OOM that PyTorch did not report:
  // the blocks of the sync say fragmentation, but they are not the blocks of the failure.
  feed.Malloc(kBase + 8 * kGiB, 2 * kMiB);
  feed.Failed(768 * kMiB, 0, /*from_sub_allocator=*/false, 256 * kMiB, kTotal);
  feed.End();
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.ooms.size(), 1u);
  const OomPostMortem& o = s.ooms[0];
  EXPECT_EQ(o.oom_class, OomClass::kUnknown);
  ASSERT_TRUE(o.figures.blocks_synced_at_seq.has_value());
  EXPECT_EQ(*o.figures.blocks_synced_at_seq, sync);
  EXPECT_NE(o.explanation.find("the class would be fragmentation"), std::string::npos)
      << o.explanation;
  EXPECT_NE(o.explanation.find(absl::StrCat("seq ", sync)), std::string::npos) << o.explanation;
  // The sync's figures are still given, as such.
  EXPECT_EQ(o.figures.cached_bytes, kGiB);
  EXPECT_EQ(o.figures.largest_free_range_bytes, 512 * kMiB);
  ASSERT_FALSE(o.advice.empty());
  EXPECT_NE(o.advice[0].find("OOM observer"), std::string::npos) << o.advice[0];
}

// A dormant agent keeps the fallback's diffs in its live table without shipping their marks:
// the woken stream's snapshot names the last sync, and its blocks are that sync's.
v1::Snapshot WokenSnapshot(uint64_t last_blocks_synced_seq) {
  v1::Snapshot snap;
  snap.set_reason(v1::Snapshot::REASON_STREAM_START);
  snap.set_complete_history(true);
  snap.set_last_blocks_synced_seq(last_blocks_synced_seq);
  v1::LiveAllocation* a = snap.add_allocations();
  a->set_address(kBase);
  a->set_size(kGiB);
  a->set_device(0);
  a->set_api(v1::API_cudaMalloc);
  a->set_kind(v1::MEMORY_KIND_DEVICE);
  v1::LiveBlock* b = snap.add_blocks();
  b->set_address(kBase);
  b->set_size(512 * kMiB);
  b->set_device(0);
  return snap;
}

TEST(ModelBlockSyncTest, AWokenAgentsSnapshotNamesTheSyncItsBlocksCameFrom) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Hello(/*attached=*/true);
  feed.Device(0, kTotal);
  feed.SnapshotAt(WokenSnapshot(40), 50);  // events 41..50 came after the sync
  ModelSummary s = model.Summarize();
  EXPECT_EQ(s.block_syncs, 1u);
  EXPECT_EQ(s.last_block_sync_seq, 40u);
  EXPECT_FALSE(s.blocks_known_at_end);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].allocated_bytes, 512 * kMiB);

  ProcessModel right_after;
  FrameFeed feed2(&right_after);
  feed2.Device(0, kTotal);
  feed2.SnapshotAt(WokenSnapshot(50), 50);
  s = right_after.Summarize();
  EXPECT_EQ(s.block_syncs, 1u);
  EXPECT_TRUE(s.blocks_known_at_end);

  // A snapshot of an agent that never synced blocks says nothing of the kind.
  ProcessModel followed;
  FrameFeed feed3(&followed);
  feed3.Device(0, kTotal);
  feed3.SnapshotAt(WokenSnapshot(0), 50);
  EXPECT_EQ(followed.Summarize().block_syncs, 0u);
}

TEST(ModelBlockSyncTest, AMarkTheSnapshotAlreadyNamedCountsOnce) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, kTotal);
  feed.SnapshotAt(WokenSnapshot(40), 50);
  // The sync's own mark, written after the snapshot: the same sync, and older than its state.
  v1::Frame mark;
  mark.mutable_mark()->set_seq(40);
  mark.mutable_mark()->set_blocks_synced(true);
  model.Apply(mark);
  const ModelSummary s = model.Summarize();
  EXPECT_EQ(s.block_syncs, 1u);
  EXPECT_FALSE(s.blocks_known_at_end);
}

}  // namespace
}  // namespace fragscope
