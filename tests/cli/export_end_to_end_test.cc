// `fragscope export` and `fragscope import` on the bundled OOM demo, as a user runs them: the
// Perfetto timeline from the run's start with its marks and OOMs, the PyTorch snapshot at the
// chosen moment with its history (read by python3, and by PyTorch's own viewer code when a
// python with torch is configured), and that snapshot, or the bare list
// torch.cuda.memory_snapshot() returns, read back.
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace {

using fragscope::testing::Result;
using fragscope::testing::Shell;
using fragscope::testing::Slurp;
using nlohmann::json;

class ExportEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/fragscope-export-e2e-XXXXXX";
    dir_ = mkdtemp(tmpl);
    started_ns_ = WallNs();
    demo_ =
        Shell("FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " + Cli() + " run -o " + Trace() +
              " --format json --report " + dir_ + "/report.json -- " + FRAGSCOPE_DEMO_BIN);
    ended_ns_ = WallNs();
  }
  static void TearDownTestSuite() { std::system(("rm -rf " + dir_).c_str()); }
  static uint64_t WallNs() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + static_cast<uint64_t>(ts.tv_nsec);
  }
  static std::string Cli() { return FRAGSCOPE_CLI_BIN; }
  static std::string Trace() { return dir_ + "/demo.fst"; }
  static json ReadJson(const std::string& path) {
    return json::parse(Slurp(path), nullptr, /*allow_exceptions=*/false);
  }
  // The snapshot's structure as python3 reads it (torch_snapshot_check.py).
  static json Check(const std::string& pickle, Result* r = nullptr) {
    Result local = Shell(std::string("python3 ") + FRAGSCOPE_SNAPSHOT_CHECK + " " + pickle);
    if (r != nullptr) *r = local;
    return json::parse(local.output, nullptr, false);
  }

  static std::string dir_;
  static Result demo_;
  static uint64_t started_ns_, ended_ns_;
};
std::string ExportEndToEnd::dir_;
Result ExportEndToEnd::demo_;
uint64_t ExportEndToEnd::started_ns_ = 0;
uint64_t ExportEndToEnd::ended_ns_ = 0;

TEST_F(ExportEndToEnd, PerfettoCountsFromTheRunsStartWithMarksAndOoms) {
  ASSERT_EQ(demo_.exit_code, 1) << demo_.output;  // the demo dies of its second OOM
  const std::string out = dir_ + "/demo.json";
  Result r = Shell(Cli() + " export " + Trace() + " --perfetto " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json doc = ReadJson(out);
  ASSERT_FALSE(doc.is_discarded()) << Slurp(out).substr(0, 2000);
  // The whole run lasted at most as long as `run` did: every time lies within it, from 0.
  const double run_us = static_cast<double>(ended_ns_ - started_ns_) / 1000.0;
  double min_ts = 1e300, max_ts = -1e300, counter_min = 1e300;
  int ooms = 0, marks = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    const double ts = e["ts"];
    min_ts = std::min(min_ts, ts);
    max_ts = std::max(max_ts, ts);
    if (e["ph"] == "C") counter_min = std::min(counter_min, ts);
    if (e["ph"] == "i" && e["cat"] == "oom") ++ooms;
    if (e["ph"] == "i" && e["cat"] == "mark") {
      ++marks;
      EXPECT_EQ(e["name"].get<std::string>().rfind("step ", 0), 0u) << e;
    }
  }
  EXPECT_EQ(min_ts, 0.0);
  EXPECT_GE(counter_min, 0.0);
  EXPECT_LE(max_ts, run_us) << "times must count from the run's start, not the machine's boot";
  EXPECT_EQ(ooms, 2);
  EXPECT_GE(marks, 2) << "the demo's fragscope_annotate_mark labels";
  // The start, as wall-clock time, lies within the run.
  ASSERT_TRUE(doc["otherData"]["start_unix_ns"].is_number_unsigned()) << doc["otherData"];
  EXPECT_GE(doc["otherData"]["start_unix_ns"].get<uint64_t>(), started_ns_);
  EXPECT_LE(doc["otherData"]["start_unix_ns"].get<uint64_t>(), ended_ns_);
}

TEST_F(ExportEndToEnd, TorchSnapshotOfTheOomRunHasItsHistory) {
  ASSERT_EQ(demo_.exit_code, 1) << demo_.output;
  // Default: the first OOM that was not recovered (the demo catches the first, but nothing
  // of its size succeeds after it).
  const std::string out = dir_ + "/oom.pickle";
  Result r = Shell(Cli() + " export " + Trace() + " --torch-snapshot " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at OOM 1 of 2"), std::string::npos) << r.output;
  Result py;
  const json c = Check(out, &py);
  ASSERT_FALSE(c.is_discarded()) << py.output;
  EXPECT_GT(c["segments"].get<int>(), 0);
  ASSERT_GE(c["devices"].size(), 1u);
  const json& dev0 = c["devices"][0];
  EXPECT_GT(dev0["counts"].value("alloc", 0), 0) << dev0;
  EXPECT_GT(dev0["counts"].value("free_completed", 0), 0) << dev0;
  EXPECT_GT(dev0["counts"].value("segment_alloc", 0), 0) << dev0;
  EXPECT_EQ(dev0["counts"].value("oom", 0), 1) << "up to the first OOM only";
  EXPECT_EQ(dev0["last"], "oom");
  EXPECT_TRUE(c["problems"].empty()) << c["problems"];

  // The end: both OOMs, and the history still leads to the segments.
  const std::string end = dir_ + "/end.pickle";
  r = Shell(Cli() + " export " + Trace() + " --torch-snapshot " + end + " --at end");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json ce = Check(end);
  ASSERT_FALSE(ce.is_discarded());
  EXPECT_EQ(ce["devices"][0]["counts"].value("oom", 0), 2);
  EXPECT_TRUE(ce["problems"].empty()) << ce["problems"];
  EXPECT_GT(ce["devices"][0]["entries"].get<int>(), dev0["entries"].get<int>());

  for (const char* at : {"peak", "oom:2"}) {
    SCOPED_TRACE(at);
    const std::string p = dir_ + "/at.pickle";
    r = Shell(Cli() + " export " + Trace() + " --torch-snapshot " + p + " --at " + at);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json ca = Check(p);
    ASSERT_FALSE(ca.is_discarded());
    EXPECT_GT(ca["segments"].get<int>(), 0);
    EXPECT_TRUE(ca["problems"].empty()) << ca["problems"];
  }
  // Moments that do not exist: what to choose instead.
  r = Shell(Cli() + " export " + Trace() + " --torch-snapshot " + dir_ + "/x.pickle --at oom:9");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("2 OOM post-mortem"), std::string::npos) << r.output;
  r = Shell(Cli() + " export " + Trace() + " --torch-snapshot " + dir_ + "/x.pickle --at noon");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'noon'"), std::string::npos) << r.output;
  r = Shell(Cli() + " export " + Trace() + " --perfetto " + dir_ + "/x.json --at peak");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

// PyTorch's own reader of snapshots (torch.cuda._memory_viz) takes the export and shows the
// run's events: allocations, segments, the OOM. Optional: needs a python with torch.
TEST_F(ExportEndToEnd, PyTorchsMemoryVizShowsTheHistory) {
  ASSERT_EQ(demo_.exit_code, 1) << demo_.output;
  const std::string out = dir_ + "/viz.pickle";
  Result r = Shell(Cli() + " export " + Trace() + " --torch-snapshot " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result py = Shell(std::string("'") + FRAGSCOPE_TORCH_PYTHON + "' " + FRAGSCOPE_SNAPSHOT_CHECK +
                    " " + out + " --torch " + dir_);
  if (py.exit_code == 77) GTEST_SKIP() << py.output << "(configure -DFRAGSCOPE_TORCH_PYTHON=...)";
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const json c = json::parse(py.output, nullptr, false);
  ASSERT_FALSE(c.is_discarded()) << py.output;
  const std::string trace = c["trace"];
  EXPECT_NE(trace.find("Device 0 ----"), std::string::npos) << trace.substr(0, 2000);
  EXPECT_NE(trace.find("cudaMalloc("), std::string::npos) << trace.substr(0, 2000);
  // Blocks placed inside the segments the history made ("b = a[0:60.0MiB]").
  EXPECT_TRUE(std::regex_search(trace, std::regex("\\n[a-z]+[0-9]* = [a-z]+[0-9]*\\[[0-9]+:")))
      << trace.substr(0, 2000);
  EXPECT_NE(trace.find("raise OutOfMemoryError"), std::string::npos) << trace.substr(0, 2000);
  EXPECT_NE(trace.find("free completed for"), std::string::npos);
  EXPECT_GT(c["trace_plot_bytes"].get<int>(), 1000);
}

TEST_F(ExportEndToEnd, ImportReplaysTheHistoryAndReadsTheBareList) {
  ASSERT_EQ(demo_.exit_code, 1) << demo_.output;
  const json traced = ReadJson(dir_ + "/report.json");
  ASSERT_FALSE(traced.is_discarded());
  const std::string end = dir_ + "/whole.pickle";
  Result r = Shell(Cli() + " export " + Trace() + " --torch-snapshot " + end + " --at end");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Shell(Cli() + " report " + end + " --format json -o " + dir_ + "/imported.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json imported = ReadJson(dir_ + "/imported.json");
  ASSERT_FALSE(imported.is_discarded());
  const json& dev = imported["devices"][0];
  // The history is the whole run's: its peaks are the run's, not the end's.
  EXPECT_EQ(dev["peak_reserved_bytes"], traced["devices"][0]["peak_reserved_bytes"]);
  EXPECT_EQ(dev["peak_allocated_bytes"], traced["devices"][0]["peak_allocated_bytes"]);
  EXPECT_EQ(dev["peak_scope"], "in the snapshot's history");
  // The first OOM, with the device's free bytes from the snapshot, is classified as traced.
  ASSERT_EQ(imported["ooms"].size(), 2u);
  EXPECT_EQ(imported["ooms"][0]["class"], "fragmentation") << imported["ooms"][0]["explanation"];

  // `import` writes a trace of the same.
  r = Shell(Cli() + " import " + end + " -o " + dir_ + "/imported.fst");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // torch.cuda.memory_snapshot() returns the segments alone, a list: here those at the first
  // OOM (by the end the demo has given every segment back).
  const std::string at_oom = dir_ + "/at_oom.pickle";
  r = Shell(Cli() + " export " + Trace() + " --torch-snapshot " + at_oom);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string list = dir_ + "/list.pickle";
  r = Shell(std::string("python3 -c \"import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); "
                        "pickle.dump(d['segments'], open(sys.argv[2],'wb'), protocol=2)\" ") +
            at_oom + " " + list);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Shell(Cli() + " import " + list + " -o " + dir_ + "/list.fst");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Shell(Cli() + " report " + list + " --format json -o " + dir_ + "/list.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json from_list = ReadJson(dir_ + "/list.json");
  ASSERT_FALSE(from_list.is_discarded());
  ASSERT_EQ(from_list["devices"].size(), 1u) << from_list.dump().substr(0, 2000);
  // The segments at the OOM: what the trace's post-mortem says was reserved then.
  EXPECT_EQ(from_list["devices"][0]["reserved_bytes"], traced["ooms"][0]["reserved_bytes"]);
  EXPECT_EQ(from_list["devices"][0]["peak_scope"], "at snapshot time");
  r = Shell(Cli() + " report " + list);
  EXPECT_NE(r.output.find("at snapshot time"), std::string::npos) << r.output;
}

}  // namespace
