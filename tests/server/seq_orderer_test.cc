// SeqOrderer: events reach the model in seq order whatever order they arrived in.
#include "fragscope/server/seq_orderer.h"

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fragscope/model/process_model.h"
#include "fragscope/trace/hot_frame_decoder.h"
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
v1::Frame Periodic(uint64_t seq) {
  v1::Frame f = Snapshot(seq);
  f.mutable_snapshot()->set_reason(v1::Snapshot::REASON_PERIODIC);
  f.mutable_snapshot()->set_complete_history(true);
  return f;
}
v1::Frame Drops(uint64_t dropped) {
  v1::Frame f;
  f.mutable_drops()->set_dropped_events(dropped);
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

// Past a gap, whether an alloc fits is judged against the allocations released so far in
// address order, a view built when the first gap needs it (from the allocations released while
// the stream was in order), kept through the allocs and frees released during the gap, and
// dropped once the stream is in order again, so that the next gap builds it anew.
TEST(SeqOrderer, AllocsPastAGapAreJudgedByEveryAllocationReleasedSoFar) {
  SeqOrderer o(/*window=*/2);
  Recorder r;
  constexpr uint64_t kA = 0x10000, kB = 0x20000, kC = 0x30000, kD = 0x40000;
  auto position = [&](uint64_t seq) {
    for (size_t i = 0; i < r.seen.size(); ++i) {
      if (r.seen[i].second == seq) return static_cast<int>(i);
    }
    return -1;
  };
  // In order: A and B allocated, A freed.
  o.Push(Alloc(1, kA, 0x1000), r.sink());
  o.Push(Alloc(2, kB, 0x1000), r.sink());
  o.Push(Free(3, kA), r.sink());
  // Seq 4 in flight. 5 overlaps B (live): it waits. 6 reuses A (freed in order): it fits.
  o.Push(Alloc(5, kB + 0x800, 0x100), r.sink());
  o.Push(Alloc(6, kA, 0x1000), r.sink());
  o.Push(Alloc(7, kC, 0x1000), r.sink());
  o.Push(Alloc(8, kD, 0x1000), r.sink());
  o.Push(Free(9, kC), r.sink());
  // Released during the gap: C allocated and freed (10 fits), D allocated (11 waits).
  o.Push(Alloc(10, kC + 0x10, 0x10), r.sink());
  o.Push(Alloc(11, kD + 0x10, 0x10), r.sink());
  o.Push(Alloc(12, 0x50000, 0x10), r.sink());
  o.Push(Alloc(13, 0x60000, 0x10), r.sink());
  EXPECT_EQ(position(4), -1);
  EXPECT_EQ(position(5), -1) << "overlaps B, released in order";
  EXPECT_EQ(position(11), -1) << "overlaps D, released during the gap";
  EXPECT_GE(position(6), 0) << "A was freed in order";
  EXPECT_GE(position(10), 0) << "C was freed during the gap";
  o.Push(Free(4, kB), r.sink());  // the straggler: everything waiting goes after it
  ASSERT_EQ(r.seen.size(), 13u);
  EXPECT_LT(position(4), position(5));
  EXPECT_LT(position(4), position(11));
  // In order again; then both allocations in D are freed and another gap opens (16 in flight).
  o.Push(Free(14, kD), r.sink());
  o.Push(Free(15, kD + 0x10), r.sink());
  o.Push(Alloc(17, kD, 0x1000), r.sink());       // fits: D freed after the first gap
  o.Push(Alloc(18, kA + 0x10, 0x10), r.sink());  // waits: A allocated again at 6
  o.Push(Alloc(19, 0x70000, 0x10), r.sink());
  o.Push(Alloc(20, 0x80000, 0x10), r.sink());
  o.Push(Alloc(21, 0x90000, 0x10), r.sink());
  EXPECT_GE(position(17), 0);
  EXPECT_EQ(position(18), -1);
  o.Flush(r.sink());
  EXPECT_EQ(r.seen.size(), 20u);  // all but the seq that never came
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

// The agent's periodic snapshot is exact at the hooks' seq, ahead of what its drain has written.
// In a stream followed from its start it is only a seek point (SnapshotPolicy): it passes
// through, and the events up to its seq that follow it are released in order, not covered
// (covering them lost their history: the report of a demo run with FRAGSCOPE_SNAPSHOT_EVERY=20
// counted 52 of its 286 events).
TEST(SeqOrderer, APeriodicSnapshotOfAFollowedStreamIsASeekPoint) {
  SeqOrderer o;
  Recorder r;
  o.Push(Alloc(1), r.sink());
  o.Push(Periodic(4), r.sink());
  ASSERT_EQ(r.seen.size(), 2u);
  EXPECT_EQ(r.seen[1], std::make_pair('S', uint64_t{4}));
  o.Push(Alloc(3), r.sink());  // held: 2 is still in flight, not covered
  o.Push(Alloc(2), r.sink());
  o.Push(Alloc(4), r.sink());
  o.Flush(r.sink());
  ASSERT_EQ(r.seen.size(), 5u);
  EXPECT_EQ(r.seen[2], std::make_pair('A', uint64_t{2}));
  EXPECT_EQ(r.seen[3], std::make_pair('A', uint64_t{3}));
  EXPECT_EQ(r.seen[4], std::make_pair('A', uint64_t{4}));
  EXPECT_EQ(o.covered_by_snapshot(), 0u);
}

// Lost events make a PERIODIC snapshot a repair, as a RESYNC is: what it holds is covered.
TEST(SeqOrderer, APeriodicSnapshotAfterLostEventsCoversWhatItHolds) {
  SeqOrderer o;
  Recorder r;
  o.Push(Alloc(1), r.sink());
  o.Push(Drops(1), r.sink());
  o.Push(Periodic(5), r.sink());
  o.Push(Alloc(4), r.sink());
  o.Push(Alloc(6), r.sink());
  o.Flush(r.sink());
  EXPECT_EQ(o.covered_by_snapshot(), 1u);
  ASSERT_EQ(r.seen.size(), 4u);  // A1, the Drops frame, S5, A6
  EXPECT_EQ(r.seen[2], std::make_pair('S', uint64_t{5}));
  EXPECT_EQ(r.seen[3], std::make_pair('A', uint64_t{6}));
}

// The orderer and the model behind it must take a snapshot alike. A PERIODIC snapshot that
// comes before any state event was released (the events that came first all wait for a seq in
// flight) replaces the state in both: the waiting state events it holds are covered rather
// than released ahead of it, which would have given the model a baseline and made it take the
// snapshot for a seek point while the orderer covered the rest.
TEST(SeqOrderer, APeriodicSnapshotBeforeAnyReleasedStateEventReplacesInOrdererAndModelAlike) {
  SeqOrderer o;
  ProcessModel model;
  const auto sink = [&](const v1::Frame& f) { model.Apply(f); };
  o.Push(Alloc(2, 0x7f0000000000, 64 << 20), sink);  // held: seq 1 in flight
  // Exact at seq 3: seq 1's and seq 2's allocations.
  v1::Frame snap = Periodic(3);
  for (auto [address, size] :
       {std::pair<uint64_t, uint64_t>{0x7e0000000000, 32 << 20}, {0x7f0000000000, 64 << 20}}) {
    v1::LiveAllocation* a = snap.mutable_snapshot()->add_allocations();
    a->set_address(address);
    a->set_size(size);
    a->set_api(v1::API_cudaMalloc);
    a->set_kind(v1::MEMORY_KIND_DEVICE);
  }
  o.Push(snap, sink);
  o.Push(Alloc(1, 0x7e0000000000, 32 << 20), sink);  // in the snapshot: covered
  o.Push(Alloc(4, 0x7d0000000000, 16 << 20), sink);
  o.Flush(sink);
  const ModelSummary s = model.Summarize();
  EXPECT_EQ(s.unmatched_events, 0u);
  ASSERT_EQ(s.devices.size(), 1u);
  // The snapshot's 96 MiB and seq 4's 16 MiB. Had the orderer released seq 2 ahead of the
  // snapshot, the model would have ignored it and missed seq 1's 32 MiB, which the orderer
  // then covered.
  EXPECT_EQ(s.devices[0].reserved_bytes, uint64_t{112} << 20);
  EXPECT_EQ(o.covered_by_snapshot(), 2u);
}

// Push(HotEvent) (what StreamSession does with every event frame the hand decoder takes) must
// release exactly what Push(frame) releases, in the same order, on streams out of order, with
// gaps that fill late or never, frees past gaps, snapshots and samples: a random mix through a
// small window, so that holding, parking and forced releases all happen.
TEST(SeqOrderer, DecodedEventsAreReleasedExactlyAsTheirFrames) {
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u}) {
    std::mt19937_64 rng(seed);
    std::vector<v1::Frame> stream;
    uint64_t seq = 0;
    for (int i = 0; i < 3000; ++i) {
      const uint64_t address = 0x7f0000000000 + (rng() % 32) * 0x100000;
      switch (rng() % 10) {
        case 0:
        case 1:
        case 2:
          stream.push_back(Alloc(++seq, address, 0x1000 * (1 + rng() % 512)));
          break;
        case 3:
        case 4: {
          v1::Frame f = Free(++seq, address);
          if (rng() % 8 == 0) f.mutable_free()->set_result(2);  // a failed free
          stream.push_back(f);
          break;
        }
        case 5: {
          v1::Frame f;
          f.mutable_block()->set_seq(++seq);
          f.mutable_block()->set_op(v1::BlockEvent::OP_ALLOC);
          f.mutable_block()->set_address(address);
          stream.push_back(f);
          break;
        }
        case 6:
          stream.push_back(MemInfo(seq));
          break;
        case 7:
          if (rng() % 20 == 0) stream.push_back(rng() % 2 ? Periodic(seq) : Snapshot(seq));
          break;
        case 8:
          if (rng() % 30 == 0) stream.push_back(Drops(1));
          break;
        default:
          ++seq;  // a seq taken by an event that never comes (dropped)
          break;
      }
    }
    // Arrival order: neighbours swapped, and now and then an event held back far.
    for (std::size_t i = 0; i + 1 < stream.size(); ++i) {
      if (rng() % 3 == 0) std::swap(stream[i], stream[i + 1]);
      if (rng() % 50 == 0) std::swap(stream[i], stream[std::min(stream.size() - 1, i + 40)]);
    }
    SeqOrderer framed(16);
    SeqOrderer decoded(16);
    std::vector<std::string> framed_out, decoded_out;
    const auto framed_sink = [&](const v1::Frame& f) {
      framed_out.push_back(f.SerializeAsString());
    };
    const auto decoded_sink = [&](const v1::Frame& f) {
      decoded_out.push_back(f.SerializeAsString());
    };
    const auto decoded_event_sink = [&](const HotEvent& e) {
      v1::Frame f;
      StoreHotEvent(e, &f);
      decoded_out.push_back(f.SerializeAsString());
    };
    int taken = 0;
    for (const v1::Frame& f : stream) {
      framed.Push(f, framed_sink);
      const std::string bytes = f.SerializeAsString();
      HotEvent event;
      if (ParseHotEvent(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                        &event)) {
        ++taken;
        decoded.Push(event, decoded_event_sink, decoded_sink);
      } else {
        decoded.Push(f, decoded_sink);
      }
    }
    framed.Flush(framed_sink);
    decoded.Flush(decoded_sink);
    EXPECT_GT(taken, 1000);
    ASSERT_EQ(decoded_out.size(), framed_out.size()) << "seed " << seed;
    for (std::size_t i = 0; i < framed_out.size(); ++i) {
      ASSERT_EQ(decoded_out[i], framed_out[i]) << "seed " << seed << ", released frame " << i;
    }
    EXPECT_EQ(decoded.covered_by_snapshot(), framed.covered_by_snapshot());
    EXPECT_EQ(decoded.late(), framed.late());
    // The mix did what it is for: something was held back past a gap and released late.
    EXPECT_GT(framed.late() + framed.covered_by_snapshot(), 0u) << "seed " << seed;
  }
}

}  // namespace
}  // namespace fragscope
