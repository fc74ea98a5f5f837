// Load: 16 threads allocating and freeing on the fake device with the agent active and writing a
// trace file. Nothing may be lost silently (every event made is either in the trace or counted
// as dropped) and the model rebuilt from the trace must hold exactly what the driver holds.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>

#include "reliability_support.h"

namespace fragscope::reliability_test {
namespace {

using agent_test::TempDir;

constexpr int kThreads = 16;
// Events per thread. The 1 M per thread (16 M events) took 48 s for the program alone
// on the 2-core build machine, wrote a 690 MB trace, and 12 s more to read it back; 100 k per
// thread (1.6 M events, ~70 MB) keeps each test near 10 s there. The properties checked do not
// depend on N; drops already happen at this N with the default ring on 2 cores.
constexpr long kEventsPerThread = 100000;
constexpr int kKeepPerThread = 4;  // allocations each thread leaves live at exit

struct LoadRun {
  int64_t made = -1;
  Reconciled trace;
  std::map<uint64_t, uint64_t> truth;  // FAKECUDA_LIVE_DUMP
};

// `with_truth` false: the null fake (FAKECUDA_NULL=1) keeps no live set to dump.
LoadRun RunLoad(const std::map<std::string, std::string>& extra_env, bool replay_by_seq,
                bool with_truth = true) {
  TempDir dir;
  std::map<std::string, std::string> env = extra_env;
  env["FRAGSCOPE_OUTPUT"] = dir.File("t.fst");
  env["FAKECUDA_LIVE_DUMP"] = dir.File("truth");
  // Scans while 16 threads insert and erase are what these tests are about: keep them as
  // frequent as the agent's old default (the default now scales with the table, config.h).
  env.emplace("FRAGSCOPE_SNAPSHOT_EVERY", "100000");
  RunResult run =
      agent_test::RunProgram(RelApp("reliability_stress_app"),
                             {"load", std::to_string(kThreads), std::to_string(kEventsPerThread),
                              std::to_string(kKeepPerThread)},
                             RunOptions{true, env});
  LoadRun load;
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  load.made = EventsMade(run.out);
  EXPECT_EQ(load.made, 2 + kThreads * kEventsPerThread) << run.out;
  load.trace = ReadAndModel(dir.File("t.fst"), replay_by_seq);
  if (with_truth) {
    load.truth = LiveDump(dir.File("truth"));
    EXPECT_EQ(load.truth.size(), static_cast<size_t>(kThreads * kKeepPerThread));
  }
  ::testing::Test::RecordProperty("events_made", std::to_string(load.made));
  ::testing::Test::RecordProperty("events_dropped", std::to_string(load.trace.end_dropped));
  ::testing::Test::RecordProperty("seq_inversions", std::to_string(load.trace.seq_inversions));
  ::testing::Test::RecordProperty("orderer_late", std::to_string(load.trace.orderer_late));
  ::testing::Test::RecordProperty("model_unmatched",
                                  std::to_string(load.trace.model_unmatched_events));
  return load;
}

// Nothing lost silently: received + dropped == made, the Drops frames add up to End's, and each
// Drops frame is followed by a RESYNC snapshot.
void ExpectReconciled(const LoadRun& load) {
  const Reconciled& r = load.trace;
  ASSERT_TRUE(r.opened) << r.error;
  EXPECT_TRUE(r.clean) << r.error;
  ASSERT_TRUE(r.has_end);
  EXPECT_EQ(r.end_recorded, static_cast<uint64_t>(load.made));
  EXPECT_EQ(r.events + r.end_dropped, static_cast<uint64_t>(load.made));
  EXPECT_EQ(r.dropped_frames, r.end_dropped);
  EXPECT_TRUE(r.every_drop_followed_by_resync);
  if (r.end_dropped > 0) {
    EXPECT_GE(r.resync_snapshots, 1u);
  }
}

// The final model (ProcessModel over the trace) equals the driver's own ground truth: same live
// set, same bytes, nothing it could not place.
void ExpectModelEqualsTruth(const LoadRun& load) {
  const Reconciled& r = load.trace;
  ASSERT_FALSE(load.truth.empty());
  EXPECT_EQ(r.model_live, load.truth) << r.seq_inversions << " frames out of seq order";
  uint64_t truth_bytes = 0;
  for (const auto& [address, size] : load.truth) truth_bytes += size;
  EXPECT_EQ(r.model_reserved_bytes, truth_bytes);
}

// Every event reaches the model in an order it can place, as long as no seq stayed in flight
// past the SeqOrderer's window (orderer_late 0, as in nearly every run). Past it, on a machine
// starved of CPU (CI with other tests beside, or two CPU hogs), a free's seq once stayed in
// flight for 147 000 events (before format 1.7, when frees were pushed after the real call,
// AFreeHeldUpInTheDriverIsInSeqOrder below; a thread preempted between its seq and its push
// can still do it): the orderer parks what does not fit the live set, but a later
// alloc of neighbouring bytes can overtake a parked one (2..672 of 1.6 M events unplaceable,
// about one loaded run in six). Waiting behind every parked event's bytes instead chains
// through a dense allocator's whole address range (the parked set filled, 11 000 unplaceable
// and a replay 150 times slower), so that is the window's limit, counted in the report's
// unmatched events, and bounded here.
void ExpectEveryEventPlaced(const LoadRun& load) {
  const Reconciled& r = load.trace;
  if (r.orderer_late == 0) {
    EXPECT_EQ(r.model_unmatched_events, 0u) << r.seq_inversions << " frames out of seq order";
  } else {
    EXPECT_LT(r.model_unmatched_events * 1000, r.events)
        << r.orderer_late << " applied late after a forced release, " << r.seq_inversions
        << " frames out of seq order";
  }
}

// A ring that holds every event (2 M records of 128 bytes): the default 8 MiB one drops or not
// depending on scheduling, and this test wants the complete stream.
const std::map<std::string, std::string> kNoDrops{{"FRAGSCOPE_RING_MB", "256"}};

TEST(ReliabilityLoad, SixteenThreadsEventsReceivedPlusDroppedEqualsMade) {
  LoadRun load = RunLoad(kNoDrops, /*replay_by_seq=*/true);
  ExpectReconciled(load);
  EXPECT_EQ(load.trace.end_dropped, 0u);
  // The trace holds the truth when ordered by seq, the order the agent's README defines.
  EXPECT_EQ(load.trace.seq_replay_live, load.truth);
  // Nothing lost, so the PERIODIC snapshots (every 100k events) are seek points only: every
  // event reaches the model, none is covered by a snapshot taken ahead of the drain. When they
  // replaced the state, 25598, 32132 and 38994 events of three runs were covered, and their
  // history (peaks, timeline, recent events) lost.
  EXPECT_GE(load.trace.periodic_snapshots, 10u);
  EXPECT_EQ(load.trace.orderer_covered, 0u);
  EXPECT_EQ(load.trace.model_events, load.trace.events + load.trace.meminfo_frames);
  ExpectEveryEventPlaced(load);
  // The peak: the model applies events in seq order (what the orderer released late, after a
  // later seq, may move it).
  if (load.trace.orderer_late == 0) {
    EXPECT_EQ(load.trace.model_peak_reserved_bytes, load.trace.seq_replay_peak_bytes);
  }
}

// The default ring, which may or may not overflow here: the counts reconcile either way.
TEST(ReliabilityLoad, DefaultRingEventsReceivedPlusDroppedEqualsMade) {
  ExpectReconciled(RunLoad({}, /*replay_by_seq=*/false));
}

// A tiny ring (1 MiB, 8192 records) drops events; the counts must still reconcile.
TEST(ReliabilityLoad, TinyRingDropsAreCountedAndFollowedByResync) {
  LoadRun load = RunLoad({{"FRAGSCOPE_RING_MB", "1"}}, /*replay_by_seq=*/false);
  ExpectReconciled(load);
  // 16 producers against one drain thread on 2 cores overflow 8192 records in practice; if a
  // fast machine never fills it, the reconciliation above held and resync went untested.
  if (load.trace.end_dropped == 0) std::printf("note: the ring never filled\n");
}

// On the null fake (no backing memory, immediate returns) 16 threads outrun the drain thread,
// and hundreds of thousands of records are still in the ring at exit. All must be written
// before End. They were not while the exit path drained one or two batches of 65536 only: one
// run had 982913 of 1600002 events in the trace, End saying 1600002 recorded and 0 dropped.
TEST(ReliabilityLoad, BacklogAtExitIsWrittenBeforeEnd) {
  LoadRun load = RunLoad({{"FRAGSCOPE_RING_MB", "256"}, {"FAKECUDA_NULL", "1"}},
                         /*replay_by_seq=*/false, /*with_truth=*/false);
  ExpectReconciled(load);
  EXPECT_EQ(load.trace.end_dropped, 0u);
}

// The agent writes frames in ring order, which is not seq order under concurrency: a thread
// takes the seq of its cudaFree before releasing, another gets the same address back, takes a
// later seq and can push its AllocEvent first. The collector puts them back in seq order
// (SeqOrderer, used by every StreamSession and by ReadAndModel here). Three causes made the
// final model differ from the driver (a few small live blocks missing, now and then): MemInfo
// samples were taken for the event whose seq they quote and let later events pass one still in
// flight; frees that waited long on the driver's lock came after the reorder window had
// released past them; and the agent's live table lost entries during snapshot scans, so
// PERIODIC snapshots (every 100k events here) left them out.
TEST(ReliabilityLoad, SixteenThreadsFinalModelEqualsDriverGroundTruth) {
  LoadRun load = RunLoad(kNoDrops, /*replay_by_seq=*/false);
  ExpectReconciled(load);
  ExpectModelEqualsTruth(load);
}

// After drops, the RESYNC snapshot (exact at its seq) and the events after it give the exact
// final state. It missed live allocations (tens of KiB) while the agent's live table lost
// entries: with a tiny ring a RESYNC scan follows every drain pass, and during a scan each reuse
// of an address took a fresh slot until inserts ran out of probes (141388 failed inserts in
// one run); entries lost so were in no later snapshot.
TEST(ReliabilityLoad, TinyRingResyncMakesFinalModelExact) {
  LoadRun load = RunLoad({{"FRAGSCOPE_RING_MB", "1"}}, /*replay_by_seq=*/false);
  ExpectReconciled(load);
  ExpectModelEqualsTruth(load);
}

// Nothing may be unplaceable in a complete stream. It had 211..2425 unplaceable events per run:
// events released over a gap (a MemInfo sample taken for the event whose seq it quotes; a free
// arriving tens of thousands of frames after its seq, past the reorder window or a PERIODIC
// snapshot), and frees of live-table entries lost during snapshot scans.
TEST(ReliabilityLoad, SixteenThreadsNoUnplaceableEvents) {
  LoadRun load = RunLoad(kNoDrops, /*replay_by_seq=*/false);
  ExpectEveryEventPlaced(load);
}

// A free held up inside the driver after it took effect (a thread preempted there, or a
// cudaFree that waited for the device) while another thread gets the address back and makes
// 80 000 events, more than the collector's reorder window (65 536 frames). When the agent
// shipped a free after its real call, the free's seq stayed missing all that time: the orderer
// released past it, parked the reallocation and applied the free late (orderer_late 1, and the
// history in between wrong). Shipped before the real call, it is in the stream in time.
TEST(ReliabilityLoad, AFreeHeldUpInTheDriverIsInSeqOrder) {
  TempDir dir;
  constexpr long kPairs = 40000;
  RunResult run = agent_test::RunProgram(
      RelApp("reliability_stress_app"), {"slowfree", dir.path(), std::to_string(kPairs)},
      RunOptions{true,
                 {{"FRAGSCOPE_OUTPUT", dir.File("t.fst")},
                  {"FRAGSCOPE_RING_MB", "64"},  // no drops: they would release the window
                  {"FAKECUDA_FREE_WAIT", "2:" + dir.File("released")},
                  {"FAKECUDA_LIVE_DUMP", dir.File("truth")}}});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const int64_t made = EventsMade(run.out);
  ASSERT_GT(made, 2 * kPairs) << run.out;
  const Reconciled r = ReadAndModel(dir.File("t.fst"));
  ASSERT_TRUE(r.opened) << r.error;
  ASSERT_EQ(r.end_dropped, 0u);
  EXPECT_EQ(r.events, static_cast<uint64_t>(made));
  EXPECT_EQ(r.orderer_late, 0u) << r.seq_inversions << " frames out of seq order";
  EXPECT_EQ(r.orderer_covered, 0u);
  EXPECT_EQ(r.model_unmatched_events, 0u);
  EXPECT_EQ(r.model_live, LiveDump(dir.File("truth")));
  // The stream is in seq order but for the interleaving of two threads' pushes: no frame
  // arrives tens of thousands of seqs late.
  EXPECT_LT(r.seq_inversions, 1000u);
}

// A live table smaller than the live set (FRAGSCOPE_LIVE_SLOTS=64, 300 allocations kept live):
// the agent cannot hold every entry, so its snapshots lack some. That must be said, with the
// count and the fix, not hidden behind figures that undercount; a run with the default table
// says nothing of the kind.
TEST(ReliabilityLoad, LiveTableTooSmallIsReportedNotHidden) {
  auto run = [](const std::map<std::string, std::string>& extra, const std::string& trace) {
    std::map<std::string, std::string> env = extra;
    env["FRAGSCOPE_OUTPUT"] = trace;
    env["FRAGSCOPE_SNAPSHOT_EVERY"] = "1000";  // periodic snapshots replace the model
    RunResult r = agent_test::RunProgram(RelApp("reliability_stress_app"),
                                         {"load", "1", "20000", "300"}, RunOptions{true, env});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    RunResult text = agent_test::RunProgram(CliBin(), {"report", trace}, RunOptions{false, {}});
    RunResult json = agent_test::RunProgram(CliBin(), {"report", trace, "--format", "json"},
                                            RunOptions{false, {}});
    EXPECT_EQ(text.exit_code, 0) << text.err;
    EXPECT_EQ(json.exit_code, 0) << json.err;
    return std::make_tuple(text.out, nlohmann::json::parse(json.out, nullptr, false), r.err);
  };
  TempDir dir;
  auto [small_text, small_json, small_err] =
      run({{"FRAGSCOPE_LIVE_SLOTS", "64"}}, dir.File("small.fst"));
  // The program's stderr says it once, with the load it filled at and the size to set.
  EXPECT_EQ(Count(small_err, "fragscope: the live table is full: an insert was refused at "), 1)
      << small_err;
  EXPECT_NE(small_err.find(" of its 64 slots live"), std::string::npos) << small_err;
  EXPECT_NE(small_err.find("FRAGSCOPE_LIVE_SLOTS=128 or more"), std::string::npos) << small_err;
  ASSERT_FALSE(small_json.is_discarded());
  const uint64_t not_held = small_json.value("live_entries_not_held", uint64_t{0});
  EXPECT_GT(not_held, 0u);
  EXPECT_LE(not_held, 20000u) << "more refusals than inserts";
  EXPECT_GT(small_json.value("not_held_since_seq", uint64_t{0}), 0u);
  EXPECT_NE(
      small_text.find("live table was full (" + std::to_string(not_held) + " inserts refused)"),
      std::string::npos)
      << small_text;
  EXPECT_NE(small_text.find("FRAGSCOPE_LIVE_SLOTS"), std::string::npos) << small_text;

  auto [full_text, full_json, full_err] = run({}, dir.File("default.fst"));
  EXPECT_EQ(full_err.find("live table is full"), std::string::npos) << full_err;
  ASSERT_FALSE(full_json.is_discarded());
  EXPECT_EQ(full_json.value("live_entries_not_held", uint64_t{1}), 0u);
  EXPECT_EQ(full_text.find("live table was full"), std::string::npos) << full_text;
}

}  // namespace
}  // namespace fragscope::reliability_test
