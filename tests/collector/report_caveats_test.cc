// The caveats a report states about its own figures (report_caveats.h), and that the text
// report prints each of them.
#include "fragscope/report/report_caveats.h"

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "fragscope/report/report_text.h"

namespace fragscope {
namespace {

std::string Text(const ModelSummary& s) {
  std::ostringstream out;
  RenderText(s, out);
  return out.str();
}

TEST(ReportCaveatsTest, CompleteFiguresHaveNone) {
  ModelSummary s;  // history complete, free stacks on, nothing lost
  EXPECT_TRUE(ReportCaveats(s).empty());
  EXPECT_EQ(Text(s).find("Note:"), std::string::npos);
}

TEST(ReportCaveatsTest, AWokenDormantAgentMissesNothingFromBeforeTheAttach) {
  ModelSummary s;
  s.attached = true;
  s.history_complete = true;  // its live table reached back to the program's first CUDA call
  EXPECT_TRUE(ReportCaveats(s).empty());
  s.history_complete = false;  // an injected agent: what came before is not known
  ASSERT_EQ(ReportCaveats(s).size(), 1u);
  EXPECT_NE(ReportCaveats(s)[0].find("memory allocated before is untracked"), std::string::npos);
}

TEST(ReportCaveatsTest, EachLimitOfTheFiguresIsStatedOnceInOrder) {
  ModelSummary s;
  s.imported = true;
  s.history_complete = false;  // imported wins: one caveat about the past, not two
  s.release_stacks = false;
  s.approximate_intervals.push_back({100, 250, 7});
  s.approximate_intervals.push_back({900, std::nullopt, 3});
  s.live_entries_not_held = 12;
  s.not_held_since_seq = 4000;
  s.unmatched_events = 5;
  const std::vector<std::string> c = ReportCaveats(s);
  ASSERT_EQ(c.size(), 6u);
  EXPECT_NE(c[0].find("what happened before it is not known"), std::string::npos);
  EXPECT_NE(c[1].find("FRAGSCOPE_FREE_STACKS=0"), std::string::npos);
  EXPECT_EQ(c[2], "7 events lost after seq 100; approximate until the resync at seq 250.");
  EXPECT_EQ(c[3], "3 events lost after seq 900; approximate until the end (no resync came).");
  EXPECT_NE(c[4].find("12 inserts refused"), std::string::npos);
  EXPECT_NE(c[4].find("from seq 4000"), std::string::npos);
  EXPECT_NE(c[4].find("FRAGSCOPE_LIVE_SLOTS"), std::string::npos);
  EXPECT_NE(c[5].find("5 events did not match"), std::string::npos);
  // The text report prints every one of them, as a note, in this order.
  const std::string text = Text(s);
  std::size_t at = 0;
  for (const std::string& caveat : c) {
    const std::size_t found = text.find("Note: " + caveat + "\n", at);
    ASSERT_NE(found, std::string::npos) << caveat;
    at = found + 1;
  }
}

TEST(ReportCaveatsTest, AStreamThatBeginsMidRunSaysItsPeaksAreFromThereOn) {
  ModelSummary s;
  s.history_from_seq = 172070;
  ASSERT_EQ(ReportCaveats(s).size(), 1u);
  EXPECT_EQ(ReportCaveats(s)[0],
            "the trace begins at seq 172070 with a snapshot of what was live then (a "
            "flight-recorder segment, a late connect or an attach): peaks, maxima and failures "
            "before it are not in this trace.");
  DeviceSummary d;
  d.peak_reserved_bytes = 3 << 20;
  s.devices.push_back(d);
  EXPECT_NE(Text(s).find("peak 3.00 MiB since seq 172070\n"), std::string::npos) << Text(s);
  // The maximum of fragmentation is the window's too.
  s.devices[0].fragmentation = Measured<double>::Known(0.5);
  s.devices[0].max_fragmentation = Measured<double>::Known(0.75);
  EXPECT_NE(Text(s).find("max 75.0 % since seq 172070\n"), std::string::npos) << Text(s);
  // An imported snapshot says so in its own words, once.
  s.imported = true;
  ASSERT_EQ(ReportCaveats(s).size(), 1u);
  EXPECT_NE(ReportCaveats(s)[0].find("the state at the moment of the snapshot"), std::string::npos);
  EXPECT_EQ(Text(s).find("since seq"), std::string::npos) << Text(s);
  // Its peaks are the snapshot's own, and say so: not the run's.
  EXPECT_NE(Text(s).find("peak 3.00 MiB at snapshot time\n"), std::string::npos) << Text(s);
}

TEST(ReportCaveatsTest, BlocksKnownAtSyncsOnlyAreSaidToBeSo) {
  ModelSummary s;
  s.block_syncs = 4;
  s.last_block_sync_seq = 812;
  ASSERT_EQ(ReportCaveats(s).size(), 1u);
  const std::string c = ReportCaveats(s)[0];
  EXPECT_NE(c.find("read from its own state at 4 sync(s) only"), std::string::npos) << c;
  EXPECT_NE(c.find("the last at seq 812"), std::string::npos) << c;
  EXPECT_NE(c.find("peaks and maxima may be higher than shown."), std::string::npos) << c;
  s.blocks_known_at_end = false;
  EXPECT_NE(ReportCaveats(s)[0].find("the final figures are those of the last sync."),
            std::string::npos)
      << ReportCaveats(s)[0];
}

TEST(ReportCaveatsTest, ALossOfUnknownSizeIsNotReportedAsZero) {
  ModelSummary s;
  s.approximate_intervals.push_back({41, 43, 0});  // a resync with no Drops frame before it
  ASSERT_EQ(ReportCaveats(s).size(), 1u);
  EXPECT_EQ(ReportCaveats(s)[0],
            "an unknown number of events lost after seq 41; approximate until the resync at "
            "seq 43.");
}

TEST(ReportCaveatsTest, ManyIntervalsOfLostEventsAreListedFirstFiveThenSummed) {
  ModelSummary s;
  for (uint64_t i = 1; i <= 9; ++i) s.approximate_intervals.push_back({100 * i, 100 * i + 5, i});
  const std::vector<std::string> c = ReportCaveats(s);
  ASSERT_EQ(c.size(), 6u);
  EXPECT_EQ(c[0], "1 events lost after seq 100; approximate until the resync at seq 105.");
  EXPECT_EQ(c[4], "5 events lost after seq 500; approximate until the resync at seq 505.");
  // 6 + 7 + 8 + 9 events in the four not listed.
  EXPECT_EQ(c[5],
            "4 more intervals with lost events (30 counted), the last after seq 900; approximate "
            "there too.");
}

}  // namespace
}  // namespace fragscope
