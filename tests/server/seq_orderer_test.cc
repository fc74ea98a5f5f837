// SeqOrderer: events reach the model in seq order whatever order they arrived in.
#include "fragscope/server/seq_orderer.h"

#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

v1::Frame Alloc(uint64_t seq) {
  v1::Frame f;
  f.mutable_alloc()->set_seq(seq);
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
  SeqOrderer::Sink sink() {
    return [this](const v1::Frame& f) {
      char kind = f.has_snapshot()   ? 'S'
                  : f.has_failed()   ? 'F'
                  : f.has_hello()    ? 'H'
                  : f.has_mem_info() ? 'M'
                                     : 'A';
      seen.push_back({kind, f.has_snapshot() ? f.snapshot().seq() : EventSeq(f)});
    };
  }
};

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

}  // namespace
}  // namespace fragscope
