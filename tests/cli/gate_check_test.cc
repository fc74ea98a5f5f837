// Gate decisions on hand-built summaries: each limit passes at the boundary and fails past it,
// opaque memory never passes silently, and an empty trace fails.
#include "gate_check.h"

#include "gtest/gtest.h"

namespace fragscope::cli {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// One device: 1 GiB reserved, 400 MiB cached whose largest free range is 100 MiB
// -> fragmentation 1 - 100/400 = 0.75, stranded 300 MiB. Peak point equals the end point.
ModelSummary OneDevice() {
  ModelSummary s;
  DeviceSummary d;
  d.ordinal = 0;
  d.reserved_bytes = 1024 * kMiB;
  d.cached_bytes = 400 * kMiB;
  d.largest_free_range_bytes = 100 * kMiB;
  d.max_fragmentation = Measured<double>::Known(0.75);
  TimelinePoint small{10, 0, 200 * kMiB, 100 * kMiB, 100 * kMiB, 100 * kMiB, 0.0};
  TimelinePoint peak{20, 0, 1024 * kMiB, 624 * kMiB, 400 * kMiB, 100 * kMiB, 0.75};
  d.timeline = {small, peak};
  s.devices.push_back(d);
  return s;
}

// An OOM on device 0 at `seq` whose cache held `cached` bytes, the largest free range
// `largest`.
OomPostMortem OomOnDevice0(uint64_t seq, uint64_t cached, uint64_t largest) {
  OomPostMortem oom;
  oom.failure.device = 0;
  oom.failure.seq = seq;
  oom.figures.cached_bytes = cached;
  oom.figures.largest_free_range_bytes = largest;
  return oom;
}

int Failures(const std::vector<GateCheck>& checks) {
  int n = 0;
  for (const auto& c : checks) n += c.passed ? 0 : 1;
  return n;
}

TEST(GateCheck, FragmentationLimitAtPeak) {
  GateLimits limits;
  limits.max_fragmentation = 0.75;
  EXPECT_EQ(Failures(EvaluateGate(OneDevice(), limits)), 0) << "0.75 is within a 0.75 limit";
  limits.max_fragmentation = 0.7;
  auto checks = EvaluateGate(OneDevice(), limits);
  ASSERT_EQ(Failures(checks), 1);
  const std::string& reason = checks[0].reason;
  EXPECT_NE(reason.find("device 0 fragmentation 0.750 > limit 0.700 at peak (seq 20)"),
            std::string::npos)
      << reason;
}

TEST(GateCheck, FragmentationIgnoredBelowMinCached) {
  GateLimits limits;
  limits.max_fragmentation = 0.1;
  limits.min_cached_bytes = 401 * kMiB;  // cached is 400 MiB: ratio is not judged
  EXPECT_EQ(Failures(EvaluateGate(OneDevice(), limits)), 0);
  limits.min_cached_bytes = 400 * kMiB;
  EXPECT_EQ(Failures(EvaluateGate(OneDevice(), limits)), 1);
}

TEST(GateCheck, StrandedAndReservedLimits) {
  GateLimits limits;
  limits.max_stranded_bytes = 300 * kMiB;
  limits.max_reserved_bytes = 1024 * kMiB;
  EXPECT_EQ(Failures(EvaluateGate(OneDevice(), limits)), 0);
  limits.max_stranded_bytes = 300 * kMiB - 1;
  limits.max_reserved_bytes = 1024 * kMiB - 1;
  auto checks = EvaluateGate(OneDevice(), limits);
  EXPECT_EQ(Failures(checks), 2);
}

TEST(GateCheck, AtEndUsesFinalFiguresAndAllCoversEveryPoint) {
  ModelSummary s = OneDevice();
  s.devices[0].cached_bytes = 0;  // everything released by the end
  s.devices[0].largest_free_range_bytes = 0;
  GateLimits limits;
  limits.max_fragmentation = 0.5;
  limits.at = GateMoment::kEnd;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0);
  limits.at = GateMoment::kAll;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 1) << "the peak point still fails under --at all";
}

TEST(GateCheck, OpaqueFailsUnlessAllowed) {
  ModelSummary s = OneDevice();
  s.devices[0].opaque_segments = 2;
  s.devices[0].opaque_bytes = 512 * kMiB;
  GateLimits limits;
  limits.max_reserved_bytes = 4096 * kMiB;
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_NE(checks[0].reason.find("opaque"), std::string::npos);
  EXPECT_NE(checks[0].reason.find("--allow-opaque"), std::string::npos);
  limits.allow_opaque = true;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0);
}

TEST(GateCheck, OomMomentsUseFiguresAtTheFailure) {
  ModelSummary s = OneDevice();
  s.ooms.push_back(OomOnDevice0(99, 1000 * kMiB, 40 * kMiB));  // 0.96
  s.ooms[0].figures.reserved_bytes = 2048 * kMiB;
  GateLimits limits;
  limits.max_fragmentation = 0.9;
  limits.at = GateMoment::kOom;
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_NE(checks[0].reason.find("at OOM (seq 99)"), std::string::npos) << checks[0].reason;
}

TEST(GateCheck, BaselineIncrease) {
  GateLimits limits;
  limits.max_increase = 0.05;
  limits.baseline_max_fragmentation[0] = 0.72;
  EXPECT_EQ(Failures(EvaluateGate(OneDevice(), limits)), 0) << "0.75 - 0.72 = 0.03 <= 0.05";
  limits.baseline_max_fragmentation[0] = 0.6;
  auto checks = EvaluateGate(OneDevice(), limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_NE(checks[0].reason.find("rose by 0.150"), std::string::npos) << checks[0].reason;
  ModelSummary unknown = OneDevice();
  unknown.devices[0].max_fragmentation = Measured<double>::Unknown("opaque segments");
  EXPECT_EQ(Failures(EvaluateGate(unknown, limits)), 1) << "unknown never passes";
}

// PyTorch's blocks read at syncs only (snapshot diffs): reserved is always judged, stranded
// bytes and fragmentation only where the blocks are known (right after a sync), unless allowed.
TEST(GateCheck, BlocksKnownAtSyncsOnlyAreJudgedOnlyWhereKnown) {
  ModelSummary s = OneDevice();
  s.block_syncs = 3;
  s.last_block_sync_seq = 15;
  s.blocks_known_at_end = true;
  GateLimits limits;
  limits.max_fragmentation = 0.9;  // 0.75 would pass
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_EQ(checks[0].name, "device 0 block visibility at peak (seq 20)");
  EXPECT_NE(checks[0].reason.find("read at 3 sync(s) only"), std::string::npos) << checks[0].reason;
  EXPECT_NE(checks[0].reason.find("the last at seq 15"), std::string::npos) << checks[0].reason;
  EXPECT_NE(checks[0].reason.find("--allow-coarse-blocks"), std::string::npos);

  GateLimits reserved_only;
  reserved_only.max_reserved_bytes = 1024 * kMiB;
  EXPECT_EQ(Failures(EvaluateGate(s, reserved_only)), 0) << "reserved comes from the driver";

  limits.at = GateMoment::kEnd;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0) << "the end is the exit sync's";
  s.blocks_known_at_end = false;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 1) << "events came after the last sync";

  // Allowed: the figures of the last sync are judged, and 0.75 > 0.7 fails as fragmentation.
  limits.at = GateMoment::kPeak;
  limits.allow_coarse_blocks = true;
  limits.max_fragmentation = 0.7;
  checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_NE(checks[0].reason.find("fragmentation 0.750 > limit 0.700"), std::string::npos);
}

// A run that died of fragmentation may hold no cache at its peak (the peak is the moment
// everything was in use), so a gate that judged the peak alone would pass it.
TEST(GateCheck, TheDefaultJudgesEveryOomBesideThePeak) {
  ModelSummary s = OneDevice();                                // 0.75 at the peak
  s.ooms.push_back(OomOnDevice0(99, 1000 * kMiB, 40 * kMiB));  // 0.96
  GateLimits limits;
  limits.max_fragmentation = 0.9;
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].name, "device 0 fragmentation at peak (seq 20)");
  EXPECT_TRUE(checks[0].passed);
  EXPECT_EQ(checks[1].name, "device 0 fragmentation at OOM (seq 99)");
  EXPECT_FALSE(checks[1].passed);
  limits.at = GateMoment::kPeak;
  checks = EvaluateGate(s, limits);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_TRUE(checks[0].passed) << "the peak alone, when asked for";
  limits.at = GateMoment::kAll;
  checks = EvaluateGate(s, limits);
  EXPECT_EQ(checks.size(), 4u) << "two samples (the peak among them), the end and the OOM";
  EXPECT_EQ(Failures(checks), 1);
}

// Without samples the peak falls back to the end: asked for both, the end is judged once.
TEST(GateCheck, PeakAndEndWithoutSamplesJudgeTheEndOnce) {
  ModelSummary s = OneDevice();
  s.devices[0].timeline.clear();
  GateLimits limits;
  limits.max_reserved_bytes = 1024 * kMiB;
  limits.at = GateMoment::kPeak | GateMoment::kEnd;
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].name, "device 0 reserved at end");
}

TEST(GateCheck, AnOomIsJudgedOnlyWhenItsBlocksAreFresh) {
  ModelSummary s = OneDevice();
  s.block_syncs = 2;
  s.last_block_sync_seq = 98;
  s.ooms.push_back(OomOnDevice0(99, 1000 * kMiB, 500 * kMiB));  // 0.5
  GateLimits limits;
  limits.max_fragmentation = 0.9;
  limits.at = GateMoment::kOom;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0) << "right after its own sync";
  s.ooms[0].figures.blocks_synced_at_seq = 40;
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_EQ(checks[0].name, "device 0 block visibility at OOM (seq 99)");
}

TEST(GateCheck, MaxIncreaseNeedsBlocksFollowedOverTheRun) {
  ModelSummary s = OneDevice();
  s.block_syncs = 1;
  s.last_block_sync_seq = 5;
  GateLimits limits;
  limits.max_increase = 0.05;
  limits.baseline_max_fragmentation[0] = 0.74;
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_NE(checks[0].reason.find("max fragmentation over the run is not known"), std::string::npos)
      << checks[0].reason;
  limits.allow_coarse_blocks = true;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0) << "0.75 - 0.74 = 0.01 <= 0.05";
}

// The regression a platform team gates on: the peak of reserved memory, against the same
// device's in a baseline report, relative; a device the baseline lacks passes.
TEST(GateCheck, PeakReservedAgainstTheBaseline) {
  ModelSummary s = OneDevice();
  s.devices[0].peak_reserved_bytes = 1050 * kMiB;
  GateLimits limits;
  limits.max_reserved_increase = 0.05;
  limits.baseline_peak_reserved[0] = 1000 * kMiB;  // +5 %: at the limit
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0);
  s.devices[0].peak_reserved_bytes = 1051 * kMiB;
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_EQ(checks[0].name, "device 0 peak reserved vs baseline");
  EXPECT_EQ(checks[0].reason,
            "device 0 peak reserved 1.03 GiB rose by 5.1 % over baseline 1000.00 MiB (limit "
            "+5.0 %)");
  limits.baseline_peak_reserved = {{1, 10 * kMiB}};
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0) << "device 0 is not in the baseline";
  limits.baseline_peak_reserved = {{0, 0}};
  checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_NE(checks[0].reason.find("rose from nothing"), std::string::npos) << checks[0].reason;
  // A stream that begins mid-run does not know the run's peak.
  s.history_from_seq = 70;
  limits.at = GateMoment::kEnd;
  limits.baseline_peak_reserved = {{0, 2000 * kMiB}};
  checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_EQ(checks[0].name, "history");
}

// A flight-recorder segment (or a late connect, an attach) begins with a snapshot: the run's
// peak may lie before it.
TEST(GateCheck, ATraceThatBeginsMidRunDoesNotJudgeTheRunsPeak) {
  ModelSummary s = OneDevice();
  s.history_from_seq = 5000;
  GateLimits limits;
  limits.max_reserved_bytes = 4096 * kMiB;  // the window's peak passes
  auto checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_EQ(checks[0].name, "history");
  EXPECT_NE(checks[0].reason.find("begins at seq 5000"), std::string::npos) << checks[0].reason;
  EXPECT_NE(checks[0].reason.find("--allow-partial-history"), std::string::npos);
  limits.at = GateMoment::kEnd;  // the end is in the window
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0);
  limits.at = GateMoment::kPeak;
  limits.allow_partial_history = true;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0);
  // An imported snapshot is one moment: its "peak" is that moment, not the run's, so the peak
  // is not judged as if known; --at end judges the snapshot.
  s.imported = true;
  limits.allow_partial_history = false;
  checks = EvaluateGate(s, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_EQ(checks[0].name, "history");
  EXPECT_NE(checks[0].reason.find("imported allocator snapshot holds one moment"),
            std::string::npos)
      << checks[0].reason;
  EXPECT_NE(checks[0].reason.find("--at end"), std::string::npos) << checks[0].reason;
  limits.at = GateMoment::kEnd;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0);
  limits.at = GateMoment::kPeak;
  limits.allow_partial_history = true;
  EXPECT_EQ(Failures(EvaluateGate(s, limits)), 0);
}

TEST(GateCheck, EmptyTraceFails) {
  GateLimits limits;
  limits.max_fragmentation = 0.5;
  auto checks = EvaluateGate(ModelSummary{}, limits);
  ASSERT_EQ(Failures(checks), 1);
  EXPECT_NE(checks[0].reason.find("nothing was measured"), std::string::npos);
}

TEST(GateCheck, JunitXmlEscapesAndCountsFailures) {
  GateCheck ok;
  ok.name = "a <ok>";
  std::vector<GateCheck> checks = {ok, FailedCheck("b", "b", "x > y & \"z\"")};
  std::string xml = GateJunitXml(checks, "t.fst");
  EXPECT_NE(xml.find("tests=\"2\" failures=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"a &lt;ok&gt;\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("message=\"x &gt; y &amp; &quot;z&quot;\""), std::string::npos) << xml;
}

// `--at all` judges every sample; CI gets one check per kind and device, decided and quoted by
// its worst moment, with how many moments failed.
TEST(GateCheck, WorstPerCheckKeepsOneCheckPerKindAndDeviceQuotingTheWorstMoment) {
  ModelSummary s = OneDevice();
  s.devices[0].timeline.push_back(
      TimelinePoint{30, 0, 1024 * kMiB, 524 * kMiB, 500 * kMiB, 50 * kMiB, 0.9});
  DeviceSummary other = s.devices[0];
  other.ordinal = 1;
  s.devices.push_back(other);
  GateLimits limits;
  limits.max_fragmentation = 0.5;
  limits.max_stranded_bytes = 1024 * kMiB;  // passes everywhere
  limits.min_cached_bytes = 0;
  limits.at = GateMoment::kAll;
  const std::vector<GateCheck> every = EvaluateGate(s, limits);
  ASSERT_GT(every.size(), 4u);
  const std::vector<GateCheck> worst = WorstPerCheck(every);
  ASSERT_EQ(worst.size(), 4u);  // fragmentation and stranded, on devices 0 and 1
  for (const GateCheck& c : worst) {
    if (c.kind == "stranded") {
      EXPECT_TRUE(c.passed) << c.name;
      // The moment nearest the limit: 450 MiB stranded at seq 30.
      EXPECT_EQ(c.when, "at seq 30") << c.name;
      continue;
    }
    ASSERT_EQ(c.kind, "fragmentation");
    EXPECT_FALSE(c.passed);
    EXPECT_EQ(c.name, c.device == 0 ? "device 0 fragmentation" : "device 1 fragmentation");
    // The worst sample (0.9 at seq 30) decides and is quoted, not the first failing one.
    EXPECT_NE(c.reason.find("fragmentation 0.900 > limit 0.500 at seq 30"), std::string::npos)
        << c.reason;
    EXPECT_EQ(c.failed_moments, 3) << "seq 20, seq 30 and the end";
    EXPECT_NE(c.reason.find("the worst of 3 moments over the limit"), std::string::npos)
        << c.reason;
  }
  // The worst violation ranks first.
  GateCheck mild = worst[0];
  mild.value = 0.6;
  EXPECT_GT(GateSeverity(worst[0]), GateSeverity(mild));
  const std::string xml = GateJunitXml(worst, "t.fst");
  int cases = 0;
  for (std::size_t at = xml.find("<testcase"); at != std::string::npos;
       at = xml.find("<testcase", at + 1)) {
    ++cases;
  }
  EXPECT_EQ(cases, 4) << xml;
}

}  // namespace
}  // namespace fragscope::cli
