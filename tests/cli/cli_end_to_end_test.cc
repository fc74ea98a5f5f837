// The `fragscope` command as a user runs it: the bundled demo under `run`, the same numbers
// from the saved trace, the gate's exit codes, PyTorch snapshot import, and bad usage.
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace {

using nlohmann::json;
constexpr uint64_t kMiB = uint64_t{1} << 20;

using fragscope::testing::Count;
using fragscope::testing::Result;
using fragscope::testing::Shell;
using fragscope::testing::Slurp;

class CliEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/fragscope-cli-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    // The demo on a 4 GiB fake GPU, traced once for the whole suite.
    demo_started_ns_ = WallNs();
    demo_run_ =
        Shell("FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " + Fragscope() + " run -o " +
              Trace() + " --format json --report " + dir_ + "/live.json -- " + FRAGSCOPE_DEMO_BIN);
    demo_ended_ns_ = WallNs();
  }
  static uint64_t WallNs() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + static_cast<uint64_t>(ts.tv_nsec);
  }
  static void TearDownTestSuite() { std::system(("rm -rf " + dir_).c_str()); }
  static std::string Fragscope() { return FRAGSCOPE_CLI_BIN; }
  static std::string Trace() { return dir_ + "/demo.fst"; }

  static std::string dir_;
  static Result demo_run_;
  static uint64_t demo_started_ns_, demo_ended_ns_;
};
std::string CliEndToEnd::dir_;
Result CliEndToEnd::demo_run_;
uint64_t CliEndToEnd::demo_started_ns_ = 0;
uint64_t CliEndToEnd::demo_ended_ns_ = 0;

TEST_F(CliEndToEnd, RunPassesTheExitStatusThroughAndExplainsBothOoms) {
  // The demo dies of its second OOM with status 1; `run` must pass that through.
  EXPECT_EQ(demo_run_.exit_code, 1) << demo_run_.output;
  json j = json::parse(Slurp(dir_ + "/live.json"), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << Slurp(dir_ + "/live.json");
  ASSERT_EQ(j["ooms"].size(), 2u) << j.dump(2);
  const json& frag = j["ooms"][0];
  const json& cap = j["ooms"][1];
  EXPECT_EQ(frag["class"], "fragmentation");
  EXPECT_EQ(cap["class"], "capacity");
  // By the demo's construction (4 GiB device, 300 MiB context, 1 GiB weights): 25 segments of
  // 100 MiB each keep a 60 MiB block, so the cache is 25 holes of 40 MiB.
  const uint64_t n = (4096 - 300 - 1024 - 256) / 100;
  EXPECT_EQ(frag["largest_free_range_bytes"].get<uint64_t>(), 40 * kMiB);
  EXPECT_EQ(frag["cached_bytes"].get<uint64_t>(), n * 40 * kMiB);
  const uint64_t requested = frag["requested_bytes"].get<uint64_t>();
  const uint64_t device_free = frag["device_free_bytes"].get<uint64_t>();
  EXPECT_GT(requested, device_free);
  EXPECT_LE(requested, device_free + n * 40 * kMiB);
  // Every failure is listed: two driver failures (try, retry after emptying the cache) and the
  // allocator's own OOM, twice.
  EXPECT_EQ(j["failed_allocations"].size(), 6u);
  for (const json& f : j["failed_allocations"]) EXPECT_FALSE(f["recovered"].get<bool>());
  // The post-mortem names the demo's code.
  EXPECT_NE(frag["stack"].dump().find("Logits"), std::string::npos) << frag["stack"].dump();
  // And the wall-clock time of each OOM, to line it up with the job's logs: within the run.
  for (const json& oom : j["ooms"]) {
    ASSERT_TRUE(oom["wall_time_ns"].is_number_unsigned()) << oom.dump();
    EXPECT_GE(oom["wall_time_ns"].get<uint64_t>(), demo_started_ns_);
    EXPECT_LE(oom["wall_time_ns"].get<uint64_t>(), demo_ended_ns_);
  }
  EXPECT_LT(frag["wall_time_ns"].get<uint64_t>(), cap["wall_time_ns"].get<uint64_t>());
  Result text = Shell(Fragscope() + " report " + Trace());
  int when_rows = 0;
  for (size_t at = text.output.find("\n  when "); at != std::string::npos;
       at = text.output.find("\n  when ", at + 1)) {
    const std::string row = text.output.substr(at + 1, text.output.find('\n', at + 1) - at - 1);
    EXPECT_NE(row.find(" UTC"), std::string::npos) << row;
    ++when_rows;
  }
  EXPECT_EQ(when_rows, 2) << text.output;
}

TEST_F(CliEndToEnd, ReportOfTheSavedTraceEqualsTheLiveReport) {
  Result r = Shell(Fragscope() + " report " + Trace() + " --format json -o " + dir_ + "/file.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Slurp(dir_ + "/file.json"), Slurp(dir_ + "/live.json"));
  Result text = Shell(Fragscope() + " report " + Trace());
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("class: fragmentation"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("class: capacity"), std::string::npos);
  EXPECT_NE(text.output.find("expandable_segments:True"), std::string::npos);
}

// The agent's periodic snapshots (here one every 20 events) are exact at the hooks' seq, ahead
// of what the drain has written. Reading the trace, they must change no figure: the report once
// counted 52 of the demo's 286 events, a peak of 2.46 GiB instead of 3.44 and 8 orphan blocks,
// the events the snapshots were ahead of having been skipped as covered by them.
// A stream-ordered allocation fails while its pool keeps 64 MiB freed on the stream: the memory
// is this process's pool's, so the class is unusable cache, not memory held outside the process
// (the pool sampled at the failure says what it holds; before, the freed block counted as held
// and the pool's reach fell short of it).
TEST_F(CliEndToEnd, FailedPoolAllocationIsJudgedAgainstItsPool) {
  // 512 MiB device, 300 MiB context: 84 MiB free beside the pool's 128 MiB; 100 MiB asked.
  const std::string report = dir_ + "/pool_oom.json";
  Result r = Shell("FAKECUDA_CAPACITY=512M FAKECUDA_CTX_OVERHEAD=300M " + Fragscope() + " run -o " +
                   dir_ + "/pool_oom.fst --format json --report " + report + " -- " +
                   FRAGSCOPE_RUNTIME_APP_BIN + " pool_oom " + std::to_string(100 * kMiB));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = json::parse(Slurp(report), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  ASSERT_EQ(j["ooms"].size(), 1u) << j.dump(2);
  const json& oom = j["ooms"][0];
  EXPECT_EQ(oom["class"], "unusable_cache") << oom.dump(2);
  EXPECT_EQ(oom["allocated_bytes"], 64 * kMiB) << oom.dump(2);
  EXPECT_EQ(oom["pool_free_bytes"], 64 * kMiB) << oom.dump(2);
}

// A program that execs in place (here after an exec that failed): every image's stream is
// kept in a file of its own, and the job is one process. Before, every stream of the run was
// written to TRACE, each over the one before, and the images read as two processes sharing a GPU.
TEST_F(CliEndToEnd, RunKeepsEveryImageOfAProgramThatExecsInPlace) {
  const std::string trace = dir_ + "/t.fst";
  Result r = Shell(Fragscope() + " run -o " + trace + " -- " + FRAGSCOPE_RUNTIME_APP_BIN +
                   " exec_in_place");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("job: 1 process (3 streams: 1 resumed after an exec that failed, 1 "
                          "image after an exec)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("image 1 of the process, which exec'ed into it from " + trace + ".resumed-1"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("ended early"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("was used by"), std::string::npos) << r.output;
  for (const std::string suffix : {"", ".resumed-1", ".exec-1"}) {
    EXPECT_NE(r.output.find("trace written to " + trace + suffix + "\n"), std::string::npos)
        << suffix << "\n"
        << r.output;
    Result report = Shell(Fragscope() + " report " + trace + suffix);
    EXPECT_EQ(report.exit_code, 0) << suffix << ": " << report.output;
  }
}

// A followed child that leaves with _exit is a process of the job with its exit status; a
// connection that never said Hello is named once and is no "process 0" in the report.
TEST_F(CliEndToEnd, RunShowsAChildThatLeftWithUnderscoreExitAndNoGhosts) {
  Result r = Shell("FRAGSCOPE_FOLLOW_FORK=1 " + Fragscope() + " run -- " +
                   FRAGSCOPE_RUNTIME_APP_BIN + " fork_exit");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("job: 2 processes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" exit 7 "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ended early"), std::string::npos) << r.output;

  Result ghost = Shell(Fragscope() + " run -- " + FRAGSCOPE_RUNTIME_APP_BIN + " connect_only");
  ASSERT_EQ(ghost.exit_code, 0) << ghost.output;
  EXPECT_NE(ghost.output.find("connected but sent nothing before its end"), std::string::npos)
      << ghost.output;
  EXPECT_EQ(ghost.output.find("==== job:"), std::string::npos) << ghost.output;
  EXPECT_NE(ghost.output.find(" 0 dropped; stream ended"), std::string::npos) << ghost.output;
}

TEST_F(CliEndToEnd, PeriodicSnapshotsInTheTraceChangeNoFigure) {
  auto traced = [&](const std::string& name, const std::string& every) {
    const std::string trace = dir_ + "/" + name + ".fst";
    // MemInfo samples are rate-limited by time (10 ms by default), so their number depends on
    // how fast the machine runs the program: an hour apart, each run takes the device's first
    // sample and those of its failures only, and the two runs' event counts are the same.
    Shell("FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M LD_PRELOAD=" +
          std::string(FRAGSCOPE_AGENT_LIB) + " FRAGSCOPE_OUTPUT=" + trace +
          " FRAGSCOPE_MEMINFO_MS=3600000 FRAGSCOPE_SNAPSHOT_EVERY=" + every + " " +
          FRAGSCOPE_DEMO_BIN);
    Result r = Shell(Fragscope() + " report " + trace + " --format json -o " + dir_ + "/" + name +
                     ".json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json::parse(Slurp(dir_ + "/" + name + ".json"), nullptr, false);
  };
  const json plain = traced("no-snapshots", "0");
  const json snapshots = traced("snapshots", "20");
  ASSERT_FALSE(plain.is_discarded());
  ASSERT_FALSE(snapshots.is_discarded());
  Result dump = Shell(std::string(FRAGSCOPE_CLI_BIN) + "-dump " + dir_ + "/snapshots.fst");
  EXPECT_GE(Count(dump.output, "reason=REASON_PERIODIC"), 10) << "the agent wrote no snapshots";
  EXPECT_EQ(snapshots["unmatched_events"], 0);
  EXPECT_TRUE(snapshots["orphan_blocks"].empty()) << snapshots["orphan_blocks"].dump();
  // The same program doing the same thing, with the same MemInfo samples (above).
  EXPECT_EQ(snapshots["events"], plain["events"]);
  const json& d = snapshots["devices"][0];
  const json& p = plain["devices"][0];
  for (const char* field : {"peak_reserved_bytes", "peak_allocated_bytes", "reserved_bytes",
                            "allocated_bytes", "cached_bytes", "largest_free_range_bytes"}) {
    EXPECT_EQ(d[field], p[field]) << field;
  }
  EXPECT_EQ(d["sites_at_peak"].size(), p["sites_at_peak"].size());
  ASSERT_EQ(snapshots["ooms"].size(), 2u);
  EXPECT_EQ(snapshots["ooms"][0]["class"], "fragmentation");
  EXPECT_EQ(snapshots["ooms"][1]["class"], "capacity");
}

TEST_F(CliEndToEnd, GateFailsOnFragmentationAtTheOomAndPassesWithinLimits) {
  Result fail = Shell(Fragscope() + " gate " + Trace() +
                      " --max-fragmentation 0.5 --at oom --junit " + dir_ + "/gate.xml");
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_NE(fail.output.find("device 0 fragmentation 0.960 > limit 0.500 at OOM"),
            std::string::npos)
      << fail.output;
  EXPECT_NE(Slurp(dir_ + "/gate.xml").find("<failure"), std::string::npos);
  Result pass = Shell(Fragscope() + " gate " + Trace() + " --max-fragmentation 0.99 --at oom");
  EXPECT_EQ(pass.exit_code, 0) << pass.output;
  // The demo's peak holds no cache (everything in use), so the peak alone passes; the default
  // also judges the OOMs, where the run died of fragmentation.
  Result peak = Shell(Fragscope() + " gate " + Trace() + " --max-fragmentation 0.5 --at peak");
  EXPECT_EQ(peak.exit_code, 0) << peak.output;
  Result by_default = Shell(Fragscope() + " gate " + Trace() + " --max-fragmentation 0.5");
  EXPECT_EQ(by_default.exit_code, 1) << by_default.output;
  EXPECT_NE(by_default.output.find("fragmentation 0.960 > limit 0.500 at OOM"), std::string::npos)
      << by_default.output;
  EXPECT_EQ(
      Shell(Fragscope() + " gate " + Trace() + " --max-fragmentation 0.5 --at peak,oom").exit_code,
      1);
  // The live JSON report is a valid baseline; compared with itself nothing rose.
  Result base = Shell(Fragscope() + " gate " + Trace() + " --baseline " + dir_ +
                      "/live.json --max-increase 0");
  EXPECT_EQ(base.exit_code, 0) << base.output;
  Result same = Shell(Fragscope() + " gate " + Trace() + " --baseline " + dir_ +
                      "/live.json --max-reserved-increase 0");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  // A baseline whose peak was 1 GiB lower: the demo's 3.44 GiB peak is a regression.
  json smaller = json::parse(Slurp(dir_ + "/live.json"));
  smaller["devices"][0]["peak_reserved_bytes"] =
      smaller["devices"][0]["peak_reserved_bytes"].get<uint64_t>() - 1024 * kMiB;
  std::ofstream(dir_ + "/smaller.json") << smaller.dump();
  Result grew = Shell(Fragscope() + " gate " + Trace() + " --baseline " + dir_ +
                      "/smaller.json --max-reserved-increase 0.10");
  EXPECT_EQ(grew.exit_code, 1) << grew.output;
  EXPECT_NE(grew.output.find("device 0 peak reserved 3.44 GiB rose by 41.0 % over baseline "
                             "2.44 GiB (limit +10.0 %)"),
            std::string::npos)
      << grew.output;
  EXPECT_EQ(Shell(Fragscope() + " gate " + Trace() + " --max-reserved-increase 0.1").exit_code, 2)
      << "no baseline to compare with";
  EXPECT_EQ(
      Shell(Fragscope() + " gate " + Trace() + " --baseline " + dir_ + "/live.json").exit_code, 2)
      << "a baseline and nothing to compare";
  EXPECT_EQ(Shell(Fragscope() + " gate " + Trace() + " --baseline " + dir_ +
                  "/live.json --max-reserved-increase -1")
                .exit_code,
            2);
}

TEST_F(CliEndToEnd, ImportedPyTorchSnapshotReportsTheIndependentFigures) {
  const std::string pickle = std::string(FRAGSCOPE_TORCH_DATA) + "/current-format.pickle";
  Result imp = Shell(Fragscope() + " import " + pickle + " -o " + dir_ + "/torch.fst");
  ASSERT_EQ(imp.exit_code, 0) << imp.output;
  for (const std::string& input : {dir_ + "/torch.fst", pickle}) {
    Result r = Shell(Fragscope() + " report " + input + " --format json -o " + dir_ + "/t.json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    json j = json::parse(Slurp(dir_ + "/t.json"));
    EXPECT_EQ(j["devices"][0]["reserved_bytes"].get<uint64_t>(), 5475663872u) << input;
    EXPECT_EQ(j["devices"][0]["cached_bytes"].get<uint64_t>(), 1627558912u) << input;
  }
}

// An output that names the input (also through a link) is refused before anything is read or
// written: `report -o IN` or `import -o IN` would destroy the trace or snapshot they read.
TEST_F(CliEndToEnd, AnOutputThatIsTheInputIsRefused) {
  const std::string trace = dir_ + "/own.fst", link = dir_ + "/own-link.fst";
  ASSERT_EQ(Shell("cp " + Trace() + " " + trace + " && ln -sf " + trace + " " + link).exit_code, 0);
  const std::string before = Slurp(trace);
  ASSERT_FALSE(before.empty());
  for (const std::string& command :
       {" report " + trace + " -o " + trace, " report " + trace + " --format json -o " + link,
        " report " + Trace() + " " + trace + " -o " + trace,
        " export " + trace + " --perfetto " + link}) {
    Result r = Shell(Fragscope() + command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    EXPECT_NE(r.output.find("is the input " + trace), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("choose another path"), std::string::npos) << r.output;
  }
  EXPECT_EQ(Slurp(trace), before);
  const std::string pickle = dir_ + "/own.pickle";
  ASSERT_EQ(Shell("cp " + std::string(FRAGSCOPE_TORCH_DATA) + "/current-format.pickle " + pickle)
                .exit_code,
            0);
  const std::string snapshot = Slurp(pickle);
  Result r = Shell(Fragscope() + " import " + pickle + " -o " + pickle);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("fragscope import: -o " + pickle + " is the input"), std::string::npos)
      << r.output;
  EXPECT_EQ(Slurp(pickle), snapshot);
  // A different path still works.
  EXPECT_EQ(Shell(Fragscope() + " report " + trace + " -o " + dir_ + "/own.txt").exit_code, 0);
}

TEST_F(CliEndToEnd, UsageErrorsExit2AndBadInputExits3) {
  EXPECT_EQ(Shell(Fragscope()).exit_code, 2);
  EXPECT_EQ(Shell(Fragscope() + " frobnicate").exit_code, 2);
  EXPECT_EQ(Shell(Fragscope() + " run --quiet").exit_code, 2) << "no command to run";
  // The agent keeps at most 64 frames: a deeper request is refused, not silently run at 32.
  Result deep = Shell(Fragscope() + " run --stack-depth 65 -- /bin/true");
  EXPECT_EQ(deep.exit_code, 2);
  EXPECT_NE(deep.output.find("0..64"), std::string::npos) << deep.output;
  EXPECT_EQ(Shell(Fragscope() + " run --quiet --stack-depth 64 -- /bin/true").exit_code, 0);
  EXPECT_EQ(Shell(Fragscope() + " report").exit_code, 2);
  // --daemon and --dormant exec the program in place: the embedded collector's options, both
  // modes at once, or a dormant CUPTI backend (nothing to wake) are refused before anything runs.
  for (const char* opts : {"--dormant -o x.fst", "--daemon --report r.txt", "--dormant --quiet",
                           "--socket s --format json", "--dormant --daemon", "--dormant --socket s",
                           "--daemon --linger-ms 5", "--dormant --backend cupti"}) {
    Result bad = Shell(Fragscope() + " run " + opts + " -- echo ran");
    EXPECT_EQ(bad.exit_code, 2) << opts;
    EXPECT_EQ(bad.output.find("ran\n"), std::string::npos) << opts << ": " << bad.output;
  }
  Result no_daemon = Shell(Fragscope() + " run --socket " + dir_ +
                           "/nobody.sock -- sh -c 'echo \"$FRAGSCOPE_SOCKET $FRAGSCOPE_DORMANT\"'");
  EXPECT_EQ(no_daemon.exit_code, 0) << no_daemon.output;
  EXPECT_NE(no_daemon.output.find("no fragscope-collector socket at " + dir_ + "/nobody.sock"),
            std::string::npos)
      << no_daemon.output;
  EXPECT_NE(no_daemon.output.find(dir_ + "/nobody.sock \n"), std::string::npos)
      << "the agent is pointed at the socket, not dormant: " << no_daemon.output;
  Result dormant = Shell(Fragscope() + " run --dormant -- sh -c 'echo \"[$FRAGSCOPE_SOCKET] " +
                         "$FRAGSCOPE_DORMANT\"; exit 7'");
  EXPECT_EQ(dormant.exit_code, 7) << dormant.output;
  EXPECT_NE(dormant.output.find("[] 1\n"), std::string::npos) << dormant.output;
  EXPECT_EQ(Shell(Fragscope() + " report " + Trace() + " --format xml").exit_code, 2);
  EXPECT_EQ(Shell(Fragscope() + " gate " + Trace()).exit_code, 2) << "no limit given";
  EXPECT_EQ(Shell(Fragscope() + " gate " + Trace() + " --max-fragmentation 1.5").exit_code, 2);
  for (const char* at : {"peak,soon", ",", "", "Peak"}) {
    Result bad =
        Shell(Fragscope() + " gate " + Trace() + " --max-fragmentation 0.5 --at '" + at + "'");
    EXPECT_EQ(bad.exit_code, 2) << at;
    EXPECT_NE(bad.output.find("comma-separated list of peak, end, oom or all"), std::string::npos)
        << bad.output;
  }
  Result missing = Shell(Fragscope() + " report /nonexistent.fst");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_NE(missing.output.find("/nonexistent.fst"), std::string::npos) << missing.output;
  std::ofstream(dir_ + "/garbage.fst") << "definitely not a trace";
  EXPECT_EQ(Shell(Fragscope() + " report " + dir_ + "/garbage.fst").exit_code, 3);
  EXPECT_EQ(Shell(Fragscope() + " gate " + dir_ + "/garbage.fst --max-reserved 1G").exit_code, 3);
}

// Two ranks that both use device 0 (a program that never called torch.cuda.set_device): the
// job summary says they share one GPU, names it as nvidia-smi does, and says it again at the
// first OOM, since memory the OOM counts as outside the process may be the other rank's.
TEST_F(CliEndToEnd, RanksThatShareAGpuAreToldSo) {
  const std::string job = dir_ + "/shared";
  ASSERT_EQ(std::system(("mkdir -p " + job).c_str()), 0);
  const std::string demo = FRAGSCOPE_DEMO_BIN;
  Result run = Shell("FAKECUDA_DEVICES=2 FAKECUDA_CAPACITY=4G " + Fragscope() + " run -o " + job +
                     "/rank.fst --format json --report " + job +
                     "/live.json -- sh -c 'RANK=0 WORLD_SIZE=2 " + demo +
                     " & RANK=1 WORLD_SIZE=2 " + demo + "; s=$?; wait; exit $s'");
  ASSERT_EQ(run.exit_code, 1) << run.output;
  json live = json::parse(Slurp(job + "/live.json"), nullptr, false);
  ASSERT_FALSE(live.is_discarded()) << Slurp(job + "/live.json");
  ASSERT_EQ(live["job"]["shared_devices"].size(), 1u) << live["job"].dump();
  const json& gpu = live["job"]["shared_devices"][0];
  ASSERT_EQ(gpu["users"].size(), 2u) << gpu.dump();
  const std::string uuid = gpu["uuid"];  // as nvidia-smi names it
  ASSERT_TRUE(std::regex_match(uuid, std::regex("GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")))
      << uuid;
  std::vector<int> ranks;
  for (const json& u : gpu["users"]) {
    EXPECT_EQ(u["device"], 0);
    EXPECT_GT(u["peak_reserved_bytes"].get<uint64_t>(), 0u);
    ranks.push_back(u["rank"].get<int>());
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1}));

  Result text = Shell(Fragscope() + " report " + job + "/rank.fst.*");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find(uuid), std::string::npos) << text.output;
  EXPECT_NE(text.output.find(" was used by 2 processes: rank 0 (device 0, peak reserved "),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("torch.cuda.set_device(local_rank)"), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("Device 0 is " + uuid), std::string::npos) << text.output;

  // The same two ranks on GPUs of their own: nothing to say.
  Result apart =
      Shell("FAKECUDA_DEVICES=2 FAKECUDA_CAPACITY=4G " + Fragscope() + " run -o " + job +
            "/apart.fst -- sh -c 'RANK=0 WORLD_SIZE=2 " + demo +
            " & RANK=1 WORLD_SIZE=2 CUDA_VISIBLE_DEVICES=1 " + demo + "; s=$?; wait; exit $s'");
  ASSERT_EQ(apart.exit_code, 1) << apart.output;
  EXPECT_NE(apart.output.find("==== job: 2 processes"), std::string::npos) << apart.output;
  EXPECT_EQ(apart.output.find(" was used by "), std::string::npos) << apart.output;
}

// A job of three processes (the ranks of a multi-GPU run, here three copies of the demo under
// one launcher): `run` reports each and then the job; its JSON is one document; `report` and
// `gate` take every rank's trace at once.
TEST_F(CliEndToEnd, AJobOfSeveralProcessesIsReportedAndGatedAsOne) {
  const std::string job = dir_ + "/job";
  ASSERT_EQ(std::system(("mkdir -p " + job).c_str()), 0);
  const std::string demo = FRAGSCOPE_DEMO_BIN;
  // Each rank on a GPU of its own, as a launcher sets it up.
  Result run =
      Shell("FAKECUDA_DEVICES=3 FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " + Fragscope() +
            " run -o " + job + "/rank.fst --format json --report " + job +
            "/live.json -- sh -c 'RANK=2 WORLD_SIZE=3 CUDA_VISIBLE_DEVICES=2 " + demo +
            " & RANK=0 WORLD_SIZE=3 CUDA_VISIBLE_DEVICES=0 " + demo +
            " & RANK=1 WORLD_SIZE=3 CUDA_VISIBLE_DEVICES=1 " + demo + "; s=$?; wait; exit $s'");
  ASSERT_EQ(run.exit_code, 1) << "a rank's status (1: died of its OOM): " << run.output;
  // One JSON document, not three objects back to back.
  json live = json::parse(Slurp(job + "/live.json"), nullptr, false);
  ASSERT_FALSE(live.is_discarded()) << Slurp(job + "/live.json");
  EXPECT_EQ(live["schema_version"], 1);
  EXPECT_EQ(live["job"]["processes"], 3);
  EXPECT_EQ(live["job"]["oom_count"], 6);
  EXPECT_EQ(live["job"]["processes_with_oom"], 3);
  EXPECT_EQ(live["job"]["shared_devices"].size(), 0u) << "a GPU each";
  ASSERT_EQ(live["processes"].size(), 3u);
  std::vector<uint64_t> times;
  // In rank order, from the launcher's RANK and WORLD_SIZE, whatever order they connected in.
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(live["processes"][rank]["report"]["process"]["rank"], rank);
    EXPECT_EQ(live["processes"][rank]["report"]["process"]["world_size"], 3);
  }
  for (const json& p : live["processes"]) {
    ASSERT_EQ(p["report"]["ooms"].size(), 2u) << p.dump();
    EXPECT_EQ(p["report"]["ooms"][0]["class"], "fragmentation");
    EXPECT_EQ(p["trace"].get<std::string>().rfind(job + "/rank.fst.", 0), 0u) << p["trace"];
    times.push_back(p["report"]["failed_allocations"][2]["time_ns"].get<uint64_t>());
  }
  // The first OOM is the earliest of the three first OOMs, whichever rank connected first.
  ASSERT_EQ(live["job"]["first_ooms"].size(), 1u);
  const json& first = live["job"]["first_ooms"][0];
  EXPECT_EQ(first["oom"]["time_ns"].get<uint64_t>(), *std::min_element(times.begin(), times.end()));
  EXPECT_EQ(first["oom"]["class"], "fragmentation");
  EXPECT_EQ(first["processes_with_oom"], 3);
  EXPECT_EQ(first["later_ooms_elsewhere"], 4);
  const int first_pid = first["oom"]["pid"].get<int>();
  const int first_rank = first["oom"]["rank"].get<int>();

  // The saved traces, all at once: each report, then the job, with the same first OOM.
  const std::string traces = job + "/rank.fst.*";
  Result text = Shell(Fragscope() + " report " + traces);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(Count(text.output, "==== rank "), 3) << text.output;
  EXPECT_NE(text.output.find("==== job: 3 processes, 6 OOMs in 3 of them ===="), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("First OOM: rank " + std::to_string(first_rank) + " (pid " +
                             std::to_string(first_pid) + ", fragmenting_training), device 0"),
            std::string::npos)
      << text.output;
  for (const char* rank : {", rank 0 of 3\n", ", rank 1 of 3\n", ", rank 2 of 3\n"}) {
    EXPECT_EQ(Count(text.output, rank), 1) << rank << text.output;
  }
  EXPECT_EQ(text.output.find(" was used by "), std::string::npos) << text.output;
  Result as_json =
      Shell(Fragscope() + " report " + traces + " --format json -o " + job + "/file.json");
  ASSERT_EQ(as_json.exit_code, 0) << as_json.output;
  json file = json::parse(Slurp(job + "/file.json"), nullptr, false);
  ASSERT_FALSE(file.is_discarded());
  EXPECT_EQ(file["job"]["first_ooms"][0]["oom"]["pid"], first_pid);
  EXPECT_EQ(file["job"]["oom_count"], 6);

  // One Perfetto timeline for the job: a process per rank.
  Result perfetto = Shell(Fragscope() + " export " + traces + " --perfetto " + job + "/job.json");
  ASSERT_EQ(perfetto.exit_code, 0) << perfetto.output;
  json timeline = json::parse(Slurp(job + "/job.json"), nullptr, false);
  ASSERT_FALSE(timeline.is_discarded());
  int rank_processes = 0;
  for (const json& e : timeline["traceEvents"]) {
    if (e["name"] == "process_name" &&
        e["args"]["name"].get<std::string>().rfind("fragscope: rank ", 0) == 0) {
      ++rank_processes;
    }
  }
  EXPECT_EQ(rank_processes, 3) << timeline["traceEvents"].dump().substr(0, 2000);
  EXPECT_EQ(timeline["otherData"]["time_base"],
            "us since the job's first event, processes aligned by wall clock");
  EXPECT_EQ(
      Shell(Fragscope() + " export " + traces + " --torch-snapshot " + job + "/x.pickle").exit_code,
      2)
      << "a PyTorch snapshot holds one process";

  // The gate judges every rank; the job passes only if all do.
  Result fail = Shell(Fragscope() + " gate " + traces + " --max-fragmentation 0.5 --junit " + job +
                      "/gate.xml");
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_EQ(Count(fail.output, "FAILED: " + job + "/rank.fst."), 3) << fail.output;
  EXPECT_NE(fail.output.find("FAILED: 3 of 3 traces exceed a limit"), std::string::npos)
      << fail.output;
  EXPECT_EQ(Count(Slurp(job + "/gate.xml"), "<testsuite name=\"fragscope gate: "), 3)
      << Slurp(job + "/gate.xml");
  Result pass = Shell(Fragscope() + " gate " + traces + " --max-fragmentation 0.99");
  EXPECT_EQ(pass.exit_code, 0) << pass.output;
  EXPECT_NE(pass.output.find("passed (3 traces, 3 checks)"), std::string::npos) << pass.output;

  // A rank whose trace is cut: the others are still reported and judged, and the exit says the
  // job could not be read whole.
  Result first_trace = Shell("ls " + traces + " | head -1");
  std::string whole = first_trace.output.substr(0, first_trace.output.find('\n'));
  std::string trace_bytes = Slurp(whole);
  std::ofstream(job + "/cut.fst") << trace_bytes.substr(0, trace_bytes.size() / 2);
  Result cut = Shell(Fragscope() + " report " + traces + " " + job + "/cut.fst");
  EXPECT_EQ(cut.exit_code, 3) << cut.output;
  EXPECT_NE(cut.output.find("==== job: 4 processes"), std::string::npos) << cut.output;
  EXPECT_NE(cut.output.find("damaged input"), std::string::npos) << cut.output;
  Result cut_gate =
      Shell(Fragscope() + " gate " + traces + " " + job + "/cut.fst --max-fragmentation 0.99");
  EXPECT_EQ(cut_gate.exit_code, 3) << cut_gate.output;
  EXPECT_EQ(Count(cut_gate.output, "passed (1 check)"), 3) << cut_gate.output;

  // HTML: a folder with the job's index and a page per rank, the first OOM's marked.
  Result html = Shell(Fragscope() + " report " + traces + " --format html -o " + job + "/html");
  ASSERT_EQ(html.exit_code, 0) << html.output;
  const std::string index = Slurp(job + "/html/index.html");
  for (int rank = 0; rank < 3; ++rank) {
    std::smatch page;
    const std::regex link("href=\"(0" + std::to_string(rank) + "-rank" + std::to_string(rank) +
                          "-pid[0-9]+\\.html)\"");
    ASSERT_TRUE(std::regex_search(index, page, link)) << index;
    EXPECT_NE(Slurp(job + "/html/" + page[1].str()).find("<svg"), std::string::npos)
        << "each rank's own page, with its segment map";
  }
  EXPECT_NE(index.find("<tr class=\"first\"><td><a href=\"0" + std::to_string(first_rank)),
            std::string::npos)
      << index;
  // The job is a table (a row per process and device), not preformatted text.
  EXPECT_NE(index.find("<table class=\"job\">"), std::string::npos) << index;
  EXPECT_EQ(index.find("<pre>"), std::string::npos) << index;
  EXPECT_EQ(Count(index, "<tr class=\"first\">") + Count(index, "<tr><td>"), 3) << index;
  EXPECT_EQ(Shell(Fragscope() + " report " + traces + " --format html").exit_code, 2)
      << "several pages need a folder";
  EXPECT_EQ(
      Shell(Fragscope() + " gate " + traces + " --baseline " + dir_ + "/live.json --max-increase 0")
          .exit_code,
      2);
  // A job's report is a baseline for the job, process by process, matched by rank.
  Result same_job = Shell(Fragscope() + " gate " + traces + " --baseline " + job +
                          "/live.json --max-increase 0 --max-reserved-increase 0");
  EXPECT_EQ(same_job.exit_code, 0) << same_job.output;
  EXPECT_NE(same_job.output.find("passed (3 traces, 6 checks)"), std::string::npos)
      << same_job.output;
  json grown = live;
  json& rank1 = grown["processes"][1]["report"];
  ASSERT_EQ(rank1["process"]["rank"], 1);
  rank1["devices"][0]["peak_reserved_bytes"] =
      rank1["devices"][0]["peak_reserved_bytes"].get<uint64_t>() / 2;
  std::ofstream(job + "/grown.json") << grown.dump();
  Result regressed = Shell(Fragscope() + " gate " + traces + " --baseline " + job +
                           "/grown.json --max-reserved-increase 0.1");
  EXPECT_EQ(regressed.exit_code, 1) << regressed.output;
  EXPECT_EQ(Count(regressed.output, "FAILED: " + job + "/rank.fst."), 1) << regressed.output;
  EXPECT_NE(regressed.output.find("rose by 100.0 % over baseline"), std::string::npos)
      << regressed.output;
  // A process without a rank cannot be matched with one of the job's.
  Result no_rank = Shell(Fragscope() + " gate " + Trace() + " --baseline " + job +
                         "/live.json --max-increase 0");
  EXPECT_EQ(no_rank.exit_code, 1) << no_rank.output;
  EXPECT_NE(no_rank.output.find("is a job's, matched by rank"), std::string::npos)
      << no_rank.output;
}

// Where each zstd frame of a compressed trace ends (`run -o` compresses; the collector ends a
// zstd frame at each flush).
std::vector<size_t> ZstdFrameEnds(const std::string& bytes) {
  std::vector<size_t> ends;
  size_t p = 0;
  while (p < bytes.size()) {
    const size_t n = ZSTD_findFrameCompressedSize(bytes.data() + p, bytes.size() - p);
    if (ZSTD_isError(n)) break;
    p += n;
    ends.push_back(p);
  }
  return ends;
}

TEST_F(CliEndToEnd, TruncatedTraceIsReportedUpToTheDamageWithExit3) {
  std::string bytes = Slurp(Trace());
  // A compressed trace: its header, then a zstd frame per flush of the collector (at least
  // one while the stream runs, and the last for what it appends at the end).
  const std::vector<size_t> ends = ZstdFrameEnds(bytes);
  ASSERT_GE(ends.size(), 3u);
  ASSERT_EQ(ends.back(), bytes.size());
  // Cut inside the last zstd frame. (A cut where a zstd frame ends is a stream that ends
  // early, as a killed program's does: reported with exit 0.)
  const size_t in = ends[ends.size() - 2] + (bytes.size() - ends[ends.size() - 2]) / 2;
  std::ofstream(dir_ + "/cut.fst", std::ios::binary).write(bytes.data(), in);
  Result r = Shell(Fragscope() + " report " + dir_ + "/cut.fst");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Device 0"), std::string::npos) << "the readable part is reported";
}

// The plain trace a compressed one holds (what `zstd -d` gives).
std::string Decompressed(const std::string& bytes) {
  std::string out;
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
  std::string chunk(1 << 16, '\0');
  while (in.pos < in.size) {
    ZSTD_outBuffer o{chunk.data(), chunk.size(), 0};
    if (ZSTD_isError(ZSTD_decompressStream(d, &o, &in))) break;
    out.append(chunk.data(), o.pos);
  }
  ZSTD_freeDCtx(d);
  return out;
}

// Where each frame of a plain trace starts, up to its End frame (proto/README.md: a 16-byte
// header, then frames of a varint length and that many bytes; End is Frame field 15).
std::vector<size_t> FrameStartsBeforeEnd(const std::string& bytes) {
  std::vector<size_t> starts;
  size_t p = 16;
  while (p < bytes.size()) {
    const size_t start = p;
    uint64_t length = 0;
    int shift = 0;
    while (p < bytes.size()) {
      const auto byte = static_cast<unsigned char>(bytes[p++]);
      length |= uint64_t{byte & 0x7fu} << shift;
      shift += 7;
      if (byte < 0x80) break;
    }
    if (p < bytes.size() && static_cast<unsigned char>(bytes[p]) == ((15 << 3) | 2)) break;
    starts.push_back(start);
    p += length;
  }
  return starts;
}

// A trace that stops between two frames, as a killed program's does (no End frame): nothing
// is damaged, so the report is complete up to there, says the stream was cut, and exits 0.
TEST_F(CliEndToEnd, TraceEndingBetweenFramesIsReportedAsCutWithExit0) {
  const std::string bytes = Decompressed(Slurp(Trace()));
  const std::vector<size_t> starts = FrameStartsBeforeEnd(bytes);
  ASSERT_GT(starts.size(), 4u);
  const size_t at = starts[starts.size() * 2 / 3];  // a frame two thirds of the way to End
  std::ofstream(dir_ + "/killed.fst", std::ios::binary).write(bytes.data(), at);
  Result r = Shell(Fragscope() + " report " + dir_ + "/killed.fst");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stream cut before its end"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("truncated"), std::string::npos) << r.output;
}

// --no-free-stacks: the same figures, allocation sites kept, releases without a site.
TEST_F(CliEndToEnd, NoFreeStacksKeepsTheFiguresAndOnlyReleasesLoseTheirSite) {
  Result r = Shell("FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " + Fragscope() +
                   " run --no-free-stacks -o " + dir_ + "/nofree.fst --format json --report " +
                   dir_ + "/nofree.json -- " + FRAGSCOPE_DEMO_BIN);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  json with = json::parse(Slurp(dir_ + "/live.json"), nullptr, false);
  json without = json::parse(Slurp(dir_ + "/nofree.json"), nullptr, false);
  ASSERT_FALSE(with.is_discarded());
  ASSERT_FALSE(without.is_discarded()) << Slurp(dir_ + "/nofree.json");
  ASSERT_EQ(without["ooms"].size(), with["ooms"].size());
  EXPECT_TRUE(with.at("process").at("release_stacks").get<bool>());
  EXPECT_FALSE(without.at("process").at("release_stacks").get<bool>());
  size_t releases = 0, allocations = 0;
  for (size_t i = 0; i < with["ooms"].size(); ++i) {
    const json& a = with["ooms"][i];
    const json& b = without["ooms"][i];
    for (const char* figure : {"class", "requested_bytes", "largest_free_range_bytes",
                               "cached_bytes", "reserved_bytes", "allocated_bytes"}) {
      EXPECT_EQ(b.at(figure), a.at(figure)) << figure;
    }
    EXPECT_NE(b["stack"].dump().find("Logits"), std::string::npos) << b["stack"].dump();
    for (const json& e : b["recent_events"]) {
      const std::string kind = e["kind"];
      if (kind == "free" || kind == "free_async" || kind == "block_free" || kind == "unmap" ||
          kind == "free_range" || kind == "handle_release") {
        ++releases;
        EXPECT_EQ(e["stack_id"].get<uint64_t>(), 0u) << e.dump();
      } else if (kind == "alloc" || kind == "block_alloc") {
        ++allocations;
        EXPECT_NE(e["stack_id"].get<uint64_t>(), 0u) << e.dump();
      }
    }
  }
  EXPECT_GT(releases, 0u);
  EXPECT_GT(allocations, 0u);
  // The text report says the missing sites were not recorded (and a default run does not).
  const std::string note = "recorded without stacks (FRAGSCOPE_FREE_STACKS=0)";
  EXPECT_NE(Shell(Fragscope() + " report " + dir_ + "/nofree.fst").output.find(note),
            std::string::npos);
  EXPECT_EQ(Shell(Fragscope() + " report " + Trace()).output.find(note), std::string::npos);
}

TEST_F(CliEndToEnd, BackendOption) {
  EXPECT_EQ(Shell(Fragscope() + " run --backend magic -- /bin/true").exit_code, 2);
  // The fake driver never calls a CUDA injection library, so CUPTI captures nothing here: the
  // run must say so plainly rather than print an empty "fine" report.
  Result r = Shell("FAKECUDA_CAPACITY=4G " + Fragscope() + " run --backend cupti -- " +
                   FRAGSCOPE_DEMO_BIN);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("nothing was measured"), std::string::npos) << r.output;
}

// `run` writes the trace and the report when CMD ends, maybe hours later: a path that cannot
// be written is refused before CMD starts (exit 3, naming the option and the path), not found
// out after the run it would have recorded.
TEST_F(CliEndToEnd, UnwritableOutputPathsAreRefusedBeforeTheProgramRuns) {
  const std::string marker = dir_ + "/ran";
  const std::string cmd = " -- /bin/sh -c 'touch " + marker + "'";
  for (const std::string option : {"--report", "-o"}) {
    const std::string bad = dir_ + "/no-such-dir/out";
    Result r = Shell(Fragscope() + " run --quiet " + option + " " + bad + cmd);
    EXPECT_EQ(r.exit_code, 3) << option << ": " << r.output;
    EXPECT_NE(r.output.find(option + " " + bad + ": cannot create"), std::string::npos) << r.output;
    EXPECT_NE(access(marker.c_str(), F_OK), 0) << option << ": the program ran";
  }
  // A writable path lets the program run.
  Result ok = Shell(Fragscope() + " run --report " + dir_ + "/r.txt" + cmd);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(access(marker.c_str(), F_OK), 0) << ok.output;
}

TEST_F(CliEndToEnd, ProgramWithoutCudaStillRunsAndExitStatusPassesThrough) {
  Result r = Shell(Fragscope() + " run --quiet -- /bin/sh -c 'exit 7'");
  EXPECT_EQ(r.exit_code, 7) << r.output;
}

}  // namespace
