// SeqOrderer: events reach the model in seq order whatever order they arrived in.
#include "fragscope/server/seq_orderer.h"

#include <functional>
#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

v1::Frame Alloc(uint64_t seq, uint64_t address = 0, uint64_t size = 0) {
  v1::Frame f;
  f.mutable_alloc()->set_seq(seq);
  f.mutable_alloc()->set_address(address != 0 ? address : seq << 20);
  f.mutable_alloc()->set_size(size != 0 ? size : 512);
  return f;
}
v1::Frame Free(uint64_t seq, uint64_t address) {
  v1::Frame f;
  f.mutable_free()->set_seq(seq);
  f.mutable_free()->set_address(address);
  return f;
}
v1::Frame Failed(uint64_t seq) {
  v1::Frame f;
  f.mutable_failed()->set_seq(seq);
  return f;
}
v1::Frame MemInfo(uint64_t seq) {
  v1::Frame f;
  f.mutable_mem_info()->set_seq(seq);
  return f;
}
v1::Frame Snapshot(uint64_t seq) {
  v1::Frame f;
  f.mutable_snapshot()->set_seq(seq);
  return f;
}

struct Recorder {
  std::vector<std::pair<char, uint64_t>> seen;
  // A callable the test passes per call (Sink only refers to a callable; it owns none).
  std::function<void(const v1::Frame&)> sink() {
    return [this](const v1::Frame& f) {
      char kind = f.has_snapshot()   ? 'S'
                  : f.has_failed()   ? 'F'
                  : f.has_hello()    ? 'H'
                  : f.has_mem_info() ? 'M'
                  : f.has_free()     ? 'D'
                                     : 'A';
      seen.push_back({kind, f.has_snapshot() ? f.snapshot().seq() : EventSeq(f)});
    };
  }
};

// The caller's frame lives only for the call (StreamSession reuses one frame per event type):
// an event in order goes to the sink as the caller's object, one that must wait is copied.
TEST(SeqOrderer, PassesInOrderFramesThroughAndCopiesOnlyTheOnesItHolds) {
  SeqOrderer o;
  std::vector<const v1::Frame*> objects;
  std::vector<uint64_t> addresses;
  const auto sink = [&](const v1::Frame& f) {
    objects.push_back(&f);
    addresses.push_back(f.alloc().address());
  };
  v1::Frame reused = Alloc(1, 0x1000);
  o.Push(reused, sink);
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(objects[0], &reused) << "in order, nothing held: no copy";

  reused = Alloc(3, 0x3000);
  o.Push(reused, sink);  // held: seq 2 is in flight
  EXPECT_EQ(objects.size(), 1u);
  reused = Alloc(2, 0x2000);  // the caller overwrites its frame with the next event
  o.Push(reused, sink);
  ASSERT_EQ(addresses.size(), 3u);
  EXPECT_EQ(addresses[1], 0x2000u);
  EXPECT_EQ(addresses[2], 0x3000u) << "the held event kept its own copy";
  EXPECT_NE(objects[2], &reused);
}

TEST(SeqOrderer, ReordersAndReleasesAsSoonAsTheSequenceIsContiguous) {
  SeqOrderer o;
  Recorder r;
  o.Push(Alloc(2), r.sink());
  o.Push(Alloc(3), r.sink());
  EXPECT_TRUE(r.seen.empty()) << "seq 1 is still in flight";
  o.Push(Alloc(1), r.sink());
  ASSERT_EQ(r.seen.size(), 3u);
  EXPECT_EQ(r.seen[0].second, 1u);
  EXPECT_EQ(r.seen[2].second, 3u);
  v1::Frame hello;
  hello.mutable_hello()->set_pid(1);
  o.Push(hello, r.sink());
  EXPECT_EQ(r.seen.back().first, 'H') << "metadata passes at once";
}

TEST(SeqOrderer, AFullWindowReleasesOverAGapThatNeverFills) {
  SeqOrderer o(/*window=*/4);
  Recorder r;
  for (uint64_t s = 2; s <= 6; ++s) o.Push(Alloc(s), r.sink());  // seq 1 was dropped
  ASSERT_FALSE(r.seen.empty());
  EXPECT_EQ(r.seen.front().second, 2u);
  o.Flush(r.sink());
  EXPECT_EQ(r.seen.size(), 5u);
  for (size_t i = 1; i < r.seen.size(); ++i) EXPECT_LT(r.seen[i - 1].second, r.seen[i].second);
}

TEST(SeqOrderer, SnapshotReleasesWhatItCoversAndSupersedesLateStateEvents) {
  SeqOrderer o;
  Recorder r;
  o.Push(Alloc(5), r.sink());  // held: 1..4 missing
  o.Push(Snapshot(6), r.sink());
  ASSERT_EQ(r.seen.size(), 2u);
  EXPECT_EQ(r.seen[0], std::make_pair('A', uint64_t{5}));
  EXPECT_EQ(r.seen[1], std::make_pair('S', uint64_t{6}));
  o.Push(Alloc(4), r.sink());  // a straggler the snapshot already holds: skipped
  EXPECT_EQ(o.covered_by_snapshot(), 1u);
  o.Push(Failed(3), r.sink());  // failures are not live state: still reported
  o.Push(Alloc(7), r.sink());
  o.Flush(r.sink());
  ASSERT_EQ(r.seen.size(), 4u);
  EXPECT_EQ(r.seen[2], std::make_pair('F', uint64_t{3}));
  EXPECT_EQ(r.seen[3], std::make_pair('A', uint64_t{7}));
}

// A MemInfo sample quotes the last seq handed out when it was taken, which belongs to an event
// that may still be in flight: it must neither be released before that event nor let the
// events after it pass the one still missing (it did, and a reused address's alloc then
// reached the model before the free that preceded it).
TEST(SeqOrderer, AMemInfoSampleDoesNotCountAsTheEventWhoseSeqItQuotes) {
  SeqOrderer o;
  Recorder r;
  o.Push(Alloc(1), r.sink());
  o.Push(MemInfo(2), r.sink());  // sampled after another thread took seq 2, not yet pushed
  o.Push(Alloc(3), r.sink());
  ASSERT_EQ(r.seen.size(), 1u) << "seq 2 is still in flight";
  o.Push(Alloc(2), r.sink());
  ASSERT_EQ(r.seen.size(), 4u);
  EXPECT_EQ(r.seen[1], std::make_pair('A', uint64_t{2}));
  EXPECT_EQ(r.seen[2], std::make_pair('M', uint64_t{2}));
  EXPECT_EQ(r.seen[3], std::make_pair('A', uint64_t{3}));
  EXPECT_EQ(o.late(), 0u);
}

// A free whose seq was taken before the real call (which waited on the driver) comes after the
// window filled. Events that do not depend on it go on; the alloc of the address it frees waits
// (parked) and follows it.
TEST(SeqOrderer, AFullWindowParksWhatDependsOnTheMissingSeq) {
  SeqOrderer o(/*window=*/4);
  Recorder r;
  constexpr uint64_t kX = 0x7000;
  o.Push(Alloc(1, kX), r.sink());
  // seq 2 (free of kX) in flight; kX allocated again at 3, then unrelated events.
  o.Push(Alloc(3, kX), r.sink());
  for (uint64_t s = 4; s <= 8; ++s) o.Push(Alloc(s, s << 20, 4096), r.sink());
  for (const auto& [kind, seq] : r.seen) EXPECT_NE(seq, 3u) << "released before the free of kX";
  EXPECT_GE(r.seen.size(), 3u) << "the others go when the window is full";
  o.Push(Free(2, kX), r.sink());
  ASSERT_EQ(r.seen.size(), 8u) << "the straggler came: nothing is waiting any more";
  size_t free_at = 0, realloc_at = 0;
  for (size_t i = 0; i < r.seen.size(); ++i) {
    if (r.seen[i].second == 2) free_at = i;
    if (r.seen[i].second == 3) realloc_at = i;
  }
  EXPECT_LT(free_at, realloc_at);
}

// A frame released at a Snapshot past a gap that does not fit (here: the alloc of an address
// whose free is still in flight) is dropped: the snapshot holds its effect.
TEST(SeqOrderer, ASnapshotDropsWhatCannotBeAppliedPastAGap) {
  SeqOrderer o;
  Recorder r;
  constexpr uint64_t kX = 0x7000;
  o.Push(Alloc(1, kX), r.sink());
  o.Push(Alloc(3, kX), r.sink());  // seq 2, the free of kX, still in flight
  o.Push(Alloc(4), r.sink());
  o.Push(Snapshot(4), r.sink());
  o.Push(Free(2, kX), r.sink());  // a straggler the snapshot holds
  o.Flush(r.sink());
  ASSERT_EQ(r.seen.size(), 3u);
  EXPECT_EQ(r.seen[0], std::make_pair('A', uint64_t{1}));
  EXPECT_EQ(r.seen[1], std::make_pair('A', uint64_t{4}));
  EXPECT_EQ(r.seen[2], std::make_pair('S', uint64_t{4}));
  EXPECT_EQ(o.covered_by_snapshot(), 2u);
}

}  // namespace
}  // namespace fragscope
