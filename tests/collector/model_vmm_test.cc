// VMM accounting: reservations, physical handles and mappings (cuMemAddressReserve, cuMemCreate,
// cuMemMap ...). Physical memory is counted per handle, once, until released and unmapped.
#include <gtest/gtest.h>

#include "fragscope/model/process_model.h"
#include "model_test_frames.h"

namespace fragscope {
namespace {

using testing::DeviceOf;
using testing::FrameFeed;
using testing::kGiB;
using testing::kMiB;
using v1::HandleEvent;
using v1::MapEvent;

constexpr uint64_t kVa = 0x7e0000000000;

TEST(ModelVmmTest, ReservationWithoutMappingsIsNotASegment) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Map(MapEvent::OP_RESERVE, kVa, 4 * kGiB);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.segments, 0u);
  EXPECT_EQ(d.reserved_bytes, 0u);  // address space is not memory
}

// cuMemAddressReserve names no device (the agent sends -1): the reservation belongs to the device
// whose memory is mapped into it, and no "device -1" appears beside it (PyTorch's expandable
// segments reserve before every first map).
TEST(ModelVmmTest, ReservationOfNoDeviceMakesNoDeviceOfItsOwn) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Device(0, 16 * kGiB);
  feed.Map(MapEvent::OP_RESERVE, kVa, 4 * kGiB, 0, 0, /*device=*/-1);
  feed.Handle(HandleEvent::OP_CREATE, 1, 20 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa, 20 * kMiB, 1, 0, /*device=*/0);
  feed.BlockAlloc(kVa, 6 * kMiB, /*stack=*/3);
  // A second reservation, freed without ever being mapped.
  feed.Map(MapEvent::OP_RESERVE, kVa + 8 * kGiB, kGiB, 0, 0, -1);
  feed.Map(MapEvent::OP_FREE_RANGE, kVa + 8 * kGiB, kGiB, 0, 0, -1);
  const ModelSummary s = model.Summarize();
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].ordinal, 0);
  EXPECT_EQ(s.devices[0].reserved_bytes, 20 * kMiB);
  EXPECT_EQ(s.devices[0].allocated_bytes, 6 * kMiB);
  EXPECT_EQ(s.devices[0].segments, 1u);
  EXPECT_EQ(s.unmatched_events, 0u);
}

// Blocks annotated in a reservation before any memory is mapped into it hold real bytes on a
// device nobody named: those are shown, on device -1, not dropped.
TEST(ModelVmmTest, BlocksInAReservationOfNoDeviceAreShownOnDeviceMinusOne) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Map(MapEvent::OP_RESERVE, kVa, 64 * kMiB, 0, 0, -1);
  feed.BlockAlloc(kVa, 2 * kMiB, /*stack=*/3);
  EXPECT_EQ(DeviceOf(model, -1).allocated_bytes, 2 * kMiB);
}

TEST(ModelVmmTest, HandleMappedTwiceCountsOnce) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Map(MapEvent::OP_RESERVE, kVa, 64 * kMiB);
  feed.Handle(HandleEvent::OP_CREATE, /*handle=*/1, 32 * kMiB);
  // The same 32 MiB of physical memory at two virtual addresses.
  feed.Map(MapEvent::OP_MAP, kVa, 32 * kMiB, 1);
  feed.Map(MapEvent::OP_MAP, kVa + 32 * kMiB, 32 * kMiB, 1);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.reserved_bytes, 32 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 32 * kMiB);  // exact: the segment is one block
  EXPECT_EQ(d.segments, 1u);
  EXPECT_EQ(d.unmapped_handle_bytes, 0u);
}

TEST(ModelVmmTest, PartialUnmapAndReleaseWhileMapped) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Map(MapEvent::OP_RESERVE, kVa, 64 * kMiB);
  feed.Handle(HandleEvent::OP_CREATE, 1, 64 * kMiB);
  EXPECT_EQ(DeviceOf(model, 0).unmapped_handle_bytes, 64 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa, 64 * kMiB, 1);
  // Unmapping [16, 32) MiB leaves [0, 16) and [32, 64) mapped: the handle is still in use.
  feed.Map(MapEvent::OP_UNMAP, kVa + 16 * kMiB, 16 * kMiB);
  EXPECT_EQ(DeviceOf(model, 0).reserved_bytes, 64 * kMiB);
  // Released while mapped: the memory stays until the last unmap.
  feed.Handle(HandleEvent::OP_RELEASE, 1);
  EXPECT_EQ(DeviceOf(model, 0).reserved_bytes, 64 * kMiB);
  feed.Map(MapEvent::OP_UNMAP, kVa, 16 * kMiB);
  {
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.reserved_bytes, 64 * kMiB);
    EXPECT_EQ(d.segments, 1u);
  }
  feed.Map(MapEvent::OP_UNMAP, kVa + 32 * kMiB, 32 * kMiB);  // last piece
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  EXPECT_EQ(d.reserved_bytes, 0u);
  EXPECT_EQ(d.allocated_bytes, 0u);
  EXPECT_EQ(d.segments, 0u);
  EXPECT_EQ(s.unmatched_events, 0u);
}

TEST(ModelVmmTest, RetainNeedsItsOwnRelease) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Handle(HandleEvent::OP_CREATE, 5, 20 * kMiB);
  feed.Handle(HandleEvent::OP_RETAIN, 5);
  feed.Handle(HandleEvent::OP_RELEASE, 5);
  EXPECT_EQ(DeviceOf(model, 0).reserved_bytes, 20 * kMiB);
  feed.Handle(HandleEvent::OP_RELEASE, 5);
  EXPECT_EQ(DeviceOf(model, 0).reserved_bytes, 0u);
}

TEST(ModelVmmTest, ImportedHandlesStayOutOfReserved) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Map(MapEvent::OP_RESERVE, kVa, 256 * kMiB);
  feed.Handle(HandleEvent::OP_IMPORT, 9, 100 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa, 100 * kMiB, 9);
  feed.Handle(HandleEvent::OP_CREATE, 10, 20 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa + 128 * kMiB, 20 * kMiB, 10);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.imported_bytes, 100 * kMiB);
  // Only this process's own handle is reserved/allocated.
  EXPECT_EQ(d.reserved_bytes, 20 * kMiB);
  EXPECT_EQ(d.allocated_bytes, 20 * kMiB);
}

TEST(ModelVmmTest, ExpandableSegmentBlocksUseOnlyMappedMemory) {
  ProcessModel model;
  FrameFeed feed(&model);
  // PyTorch expandable segments: a big reservation grown by 20 MiB pages.
  feed.Map(MapEvent::OP_RESERVE, kVa, 8 * kGiB);
  feed.Handle(HandleEvent::OP_CREATE, 1, 20 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa, 20 * kMiB, 1);
  feed.Handle(HandleEvent::OP_CREATE, 2, 20 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa + 20 * kMiB, 20 * kMiB, 2);
  // Blocks [0, 8) and [12, 30) MiB: free [8, 12) = 4 MiB and [30, 40) = 10 MiB. The unmapped
  // rest of the 8 GiB reservation is address space, not cache.
  feed.BlockAlloc(kVa, 8 * kMiB);
  feed.BlockAlloc(kVa + 12 * kMiB, 18 * kMiB);
  {
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.reserved_bytes, 40 * kMiB);
    EXPECT_EQ(d.allocated_bytes, 26 * kMiB);
    EXPECT_EQ(d.cached_bytes, 14 * kMiB);
    EXPECT_EQ(d.largest_free_range_bytes, 10 * kMiB);
    EXPECT_EQ(d.annotated_segments, 1u);
  }
  // Growing by a third page joins [30, 40) with the new [40, 60): 30 MiB in one piece.
  feed.Handle(HandleEvent::OP_CREATE, 3, 20 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa + 40 * kMiB, 20 * kMiB, 3);
  {
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.reserved_bytes, 60 * kMiB);
    EXPECT_EQ(d.cached_bytes, 34 * kMiB);
    EXPECT_EQ(d.largest_free_range_bytes, 30 * kMiB);
  }
  // Shrinking: unmap the third page and release it. [30, 40) is left.
  feed.Map(MapEvent::OP_UNMAP, kVa + 40 * kMiB, 20 * kMiB);
  feed.Handle(HandleEvent::OP_RELEASE, 3);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.reserved_bytes, 40 * kMiB);
  EXPECT_EQ(d.cached_bytes, 14 * kMiB);
  EXPECT_EQ(d.largest_free_range_bytes, 10 * kMiB);
}

TEST(ModelVmmTest, FreeingTheReservationDropsItsMappings) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Map(MapEvent::OP_RESERVE, kVa, 64 * kMiB);
  feed.Handle(HandleEvent::OP_CREATE, 1, 32 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa, 32 * kMiB, 1);
  feed.Handle(HandleEvent::OP_RELEASE, 1);
  // The program frees the range without unmapping: the released handle goes with it.
  feed.Map(MapEvent::OP_FREE_RANGE, kVa, 64 * kMiB);
  const DeviceSummary d = DeviceOf(model, 0);
  EXPECT_EQ(d.reserved_bytes, 0u);
  EXPECT_EQ(d.segments, 0u);
}

// Fuzz finding snapshot-overlapping-mappings: a snapshot listing a mapping of 2^64-512 bytes at
// 0 that contains another mapping, both of a handle never created and in no reservation. The
// huge one became a second, overlapping reservation, so its free range was counted next to the
// inner one's and the device's cached sum wrapped: largest free range > cached, negative
// fragmentation. It must be rejected (counted as unmatched), leaving the inner mapping intact.
TEST(ModelVmmTest, SnapshotMappingOverlappingAnotherIsNotApplied) {
  ProcessModel model;
  FrameFeed feed(&model);
  v1::Snapshot snap;
  v1::LiveMapping* inner = snap.add_mappings();
  inner->set_address(kVa);
  inner->set_size(32 * kMiB);
  v1::LiveMapping* outer = snap.add_mappings();
  outer->set_address(0);
  outer->set_size(~uint64_t{0} - 511);
  for (uint64_t address : {uint64_t{0}, kVa}) {
    v1::LiveBlock* b = snap.add_blocks();
    b->set_address(address);
    b->set_size(512);
    b->set_device(-1);
    b->set_pending_free(true);
  }
  feed.Snapshot(snap);
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, -1);
  EXPECT_EQ(d.reserved_bytes, 32 * kMiB);
  EXPECT_EQ(d.cached_bytes, 32 * kMiB - 512);
  EXPECT_EQ(d.largest_free_range_bytes, 32 * kMiB - 512);
  EXPECT_EQ(d.stranded_bytes, 0u);
  EXPECT_EQ(d.pending_free_bytes, 512u);
  // The rejected outer one. (The inner mapping's unknown handle and reservation are what a
  // snapshot without complete history, an attach's, is bound to lack: no mismatch.)
  EXPECT_EQ(s.unmatched_events, 1u);
  // The block at 0 has no segment any more: kept as an orphan, not placed.
  EXPECT_EQ(s.orphan_blocks_total, 1u);
}

TEST(ModelVmmTest, MappingOutsideItsReservationOrOverAnotherIsNotApplied) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Map(MapEvent::OP_RESERVE, kVa, 64 * kMiB);
  feed.Handle(HandleEvent::OP_CREATE, 1, 32 * kMiB);
  feed.Handle(HandleEvent::OP_CREATE, 2, 32 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa + 48 * kMiB, 32 * kMiB, 1);  // past the reservation's end
  feed.Map(MapEvent::OP_MAP, kVa, 32 * kMiB, 1);
  feed.Map(MapEvent::OP_MAP, kVa + 16 * kMiB, 32 * kMiB, 2);  // over the mapping of handle 1
  feed.BlockAlloc(kVa, kMiB);
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  EXPECT_EQ(s.unmatched_events, 2u);
  EXPECT_EQ(d.reserved_bytes, 64 * kMiB);  // both handles exist
  EXPECT_EQ(d.unmapped_handle_bytes, 32 * kMiB);
  EXPECT_EQ(d.cached_bytes, 31 * kMiB);
  EXPECT_EQ(d.largest_free_range_bytes, 31 * kMiB);
}

TEST(ModelVmmTest, MappingAtAMappedAddressReplacesTheOldOneWhole) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Map(MapEvent::OP_RESERVE, kVa, 64 * kMiB);
  feed.Handle(HandleEvent::OP_CREATE, 1, 32 * kMiB);
  feed.Handle(HandleEvent::OP_CREATE, 2, 16 * kMiB);
  feed.Map(MapEvent::OP_MAP, kVa, 32 * kMiB, 1);
  feed.BlockAlloc(kVa, kMiB);
  // Handle 1's unmap was lost: the smaller mapping replaces it, and the 16 MiB beyond it are
  // no longer memory (they used to stay in the free ranges).
  feed.Map(MapEvent::OP_MAP, kVa, 16 * kMiB, 2);
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  EXPECT_EQ(s.unmatched_events, 1u);
  EXPECT_EQ(d.cached_bytes, 15 * kMiB);
  EXPECT_EQ(d.largest_free_range_bytes, 15 * kMiB);
  EXPECT_EQ(d.unmapped_handle_bytes, 32 * kMiB);  // handle 1: not released, mapped nowhere
}

// An attach met PyTorch's expandable segments: pages mapped into a reservation made before
// the agent, listed by the first snapshot (handles and mappings, no reservation) in hash order.
// Touching pages are one reservation, so a block spans them and the free runs are PyTorch's;
// later maps that touch it widen it, in either direction.
TEST(ModelVmmTest, PagesOfAReservationMadeBeforeTheAttachAreOneSegment) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Hello(/*attached=*/true);
  feed.Device(0, 16 * kGiB);
  const uint64_t base = kVa + 40 * kMiB;
  v1::Snapshot snap;
  snap.set_reason(v1::Snapshot::REASON_STREAM_START);
  snap.set_complete_history(false);
  for (uint64_t page : {2, 0, 1}) {
    v1::LiveHandle* h = snap.add_handles();
    h->set_handle(100 + page);
    h->set_size(20 * kMiB);
    h->set_device(0);
    v1::LiveMapping* m = snap.add_mappings();
    m->set_address(base + page * 20 * kMiB);
    m->set_size(20 * kMiB);
    m->set_handle(100 + page);
  }
  v1::LiveBlock* b = snap.add_blocks();  // [10, 50) MiB: over all three pages
  b->set_address(base + 10 * kMiB);
  b->set_size(40 * kMiB);
  b->set_device(0);
  feed.Snapshot(snap);
  {
    const ModelSummary s = model.Summarize();
    const DeviceSummary d = DeviceOf(s, 0);
    EXPECT_EQ(d.segments, 1u);
    EXPECT_EQ(d.reserved_bytes, 60 * kMiB);
    EXPECT_EQ(d.allocated_bytes, 40 * kMiB);
    EXPECT_EQ(d.cached_bytes, 20 * kMiB);
    EXPECT_EQ(d.largest_free_range_bytes, 10 * kMiB);
    EXPECT_EQ(s.orphan_blocks_total, 0u);
    EXPECT_EQ(s.unmatched_events, 0u);  // memory from before an attach is no mismatch
  }
  // PyTorch grows the segment at its end, then at its start (a page it had unmapped).
  feed.Handle(HandleEvent::OP_CREATE, 7, 20 * kMiB);
  feed.Map(MapEvent::OP_MAP, base + 60 * kMiB, 20 * kMiB, 7);
  feed.Handle(HandleEvent::OP_CREATE, 8, 20 * kMiB);
  feed.Map(MapEvent::OP_MAP, base - 20 * kMiB, 20 * kMiB, 8);
  feed.BlockAlloc(base - 15 * kMiB, 20 * kMiB);  // across the new first page and the old one
  {
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.segments, 1u);
    EXPECT_EQ(d.reserved_bytes, 100 * kMiB);
    EXPECT_EQ(d.allocated_bytes, 60 * kMiB);
    EXPECT_EQ(d.largest_free_range_bytes, 30 * kMiB);  // [50, 80)
  }
  // Unmapping and releasing a page from before the attach gives its memory back.
  feed.BlockFree(base + 10 * kMiB, 40 * kMiB);
  feed.Map(MapEvent::OP_UNMAP, base + 40 * kMiB, 20 * kMiB);
  feed.Handle(HandleEvent::OP_RELEASE, 102);
  {
    const DeviceSummary d = DeviceOf(model, 0);
    EXPECT_EQ(d.reserved_bytes, 80 * kMiB);
    EXPECT_EQ(d.allocated_bytes, 20 * kMiB);
    EXPECT_EQ(d.largest_free_range_bytes, 35 * kMiB);  // [5, 40): the unmapped page ends it
  }
  // The reservation is freed from its real start, below every page the model saw.
  feed.BlockFree(base - 15 * kMiB, 20 * kMiB);
  for (uint64_t page = 0; page < 5; ++page) {
    if (page == 3) continue;
    feed.Map(MapEvent::OP_UNMAP, base - 20 * kMiB + page * 20 * kMiB, 20 * kMiB);
  }
  for (uint64_t handle : {100, 101, 7, 8}) feed.Handle(HandleEvent::OP_RELEASE, handle);
  feed.Map(MapEvent::OP_FREE_RANGE, kVa, 8 * kGiB, 0, 0, -1);
  const ModelSummary s = model.Summarize();
  const DeviceSummary d = DeviceOf(s, 0);
  EXPECT_EQ(d.segments, 0u);
  EXPECT_EQ(d.reserved_bytes, 0u);
  EXPECT_EQ(s.unmatched_events, 0u);
}

// Only pages of one device that touch join: a page of another device next to them is a
// reservation of its own, and so is a page that does not touch.
TEST(ModelVmmTest, InferredReservationsJoinOnlyTouchingPagesOfOneDevice) {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Hello(/*attached=*/true);
  feed.Handle(HandleEvent::OP_CREATE, 1, 2 * kMiB, 0);
  feed.Handle(HandleEvent::OP_CREATE, 2, 2 * kMiB, 1);
  feed.Handle(HandleEvent::OP_CREATE, 3, 2 * kMiB, 0);
  feed.Map(MapEvent::OP_MAP, kVa, 2 * kMiB, 1, 0, 0);
  feed.Map(MapEvent::OP_MAP, kVa + 2 * kMiB, 2 * kMiB, 2, 0, 1);
  feed.Map(MapEvent::OP_MAP, kVa + 6 * kMiB, 2 * kMiB, 3, 0, 0);
  EXPECT_EQ(DeviceOf(model, 0).segments, 2u);
  EXPECT_EQ(DeviceOf(model, 1).segments, 1u);
  // A seen reservation is never widened: a page mapped just past it is no part of it.
  feed.Map(MapEvent::OP_RESERVE, kVa + 64 * kMiB, 2 * kMiB, 0, 0, -1);
  feed.Handle(HandleEvent::OP_CREATE, 4, 2 * kMiB, 0);
  feed.Handle(HandleEvent::OP_CREATE, 5, 2 * kMiB, 0);
  feed.Map(MapEvent::OP_MAP, kVa + 64 * kMiB, 2 * kMiB, 4, 0, 0);
  feed.Map(MapEvent::OP_MAP, kVa + 66 * kMiB, 2 * kMiB, 5, 0, 0);
  EXPECT_EQ(DeviceOf(model, 0).segments, 4u);
  EXPECT_EQ(DeviceOf(model, 0).reserved_bytes, 8 * kMiB);
}

}  // namespace
}  // namespace fragscope
