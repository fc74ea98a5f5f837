// The Perfetto / Chrome trace-event export, parsed back with nlohmann::json: the schema a
// viewer needs and the values the timeline and failures hold.
#include "fragscope/export/perfetto_trace.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include "export_test_trace.h"
#include "nlohmann/json.hpp"

namespace fragscope::testing {
namespace {

using nlohmann::json;

json Export(const ModelSummary& s) {
  ModuleOffsetSymbolizer symbolizer(s.modules);
  std::ostringstream out;
  exporter::WritePerfettoTrace(s, symbolizer, out);
  return json::parse(out.str());  // throws, failing the test, if it is not JSON
}

TEST(PerfettoTraceTest, EveryEventHasTheFieldsViewersNeed) {
  const json doc = Export(Capture(ExportTrace().frames()).summary);
  ASSERT_TRUE(doc.contains("traceEvents"));
  ASSERT_TRUE(doc["traceEvents"].is_array());
  ASSERT_FALSE(doc["traceEvents"].empty());
  for (const json& e : doc["traceEvents"]) {
    ASSERT_TRUE(e["ph"].is_string()) << e;
    ASSERT_TRUE(e["name"].is_string()) << e;
    EXPECT_EQ(e["pid"], 4242) << e;
    ASSERT_TRUE(e["tid"].is_number_integer()) << e;
    const std::string ph = e["ph"];
    EXPECT_TRUE(ph == "M" || ph == "C" || ph == "i") << e;
    if (ph != "M") {
      EXPECT_TRUE(e["ts"].is_number()) << e;
      EXPECT_GE(e["ts"].get<double>(), 0) << e;
    }
    if (ph == "i") {
      EXPECT_EQ(e["s"], "t") << e;
    }
    EXPECT_TRUE(e["args"].is_object()) << e;
  }
}

TEST(PerfettoTraceTest, MetadataStatesTheLimitsOfTheFigures) {
  ModelSummary s = Capture(ExportTrace().frames()).summary;
  EXPECT_EQ(Export(s)["otherData"]["notes"], json::array());
  s.block_syncs = 2;
  s.last_block_sync_seq = 40;
  const json notes = Export(s)["otherData"]["notes"];
  ASSERT_EQ(notes.size(), 1u) << notes;
  EXPECT_NE(notes[0].get<std::string>().find("at 2 sync(s) only"), std::string::npos) << notes;
}

TEST(PerfettoTraceTest, NamesTheProcessAndOneThreadPerDevice) {
  const json doc = Export(Capture(ExportTrace().frames()).summary);
  std::map<int, std::string> threads;
  std::string process;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") process = e["args"]["name"];
    if (e["name"] == "thread_name") threads[e["tid"]] = e["args"]["name"];
  }
  EXPECT_NE(process.find(kHostileExe), std::string::npos) << process;
  EXPECT_NE(process.find("pid 4242"), std::string::npos) << process;
  EXPECT_EQ(threads, (std::map<int, std::string>{{1, "GPU 0"}, {2, "GPU 1"}}));
}

// A job's ranks on one timeline: a process each, named and ordered by rank, on wall-clock time
// when every stream gave its clocks (hosts line up), else on the processes' own clocks.
TEST(PerfettoTraceTest, AJobIsOneTimelineWithAProcessPerRank) {
  const ModelSummary base = Capture(ExportTrace().frames()).summary;
  ModelSummary rank0 = base, rank1 = base;
  rank0.rank = 0;
  rank1.rank = 1;
  rank1.host = "node2";  // same pid on another host: still two processes in the view
  rank0.realtime_minus_monotonic_ns = 1'000'000'000'000'000'000;
  rank1.realtime_minus_monotonic_ns = 1'000'000'000'000'000'000 + 5'000'000'000;  // +5 s
  ModuleOffsetSymbolizer sym0(rank0.modules), sym1(rank1.modules);
  auto job = [&] {
    std::ostringstream out;
    exporter::WritePerfettoJobTrace({{&rank1, &sym1}, {&rank0, &sym0}}, out);
    return json::parse(out.str());
  };
  json doc = job();
  std::map<int, std::string> names;
  std::map<int, int> sort_index;
  std::map<int, double> first_ts;
  for (const json& e : doc["traceEvents"]) {
    const int pid = e["pid"];
    if (e["name"] == "process_name") names[pid] = e["args"]["name"];
    if (e["name"] == "process_sort_index") sort_index[pid] = e["args"]["sort_index"];
    if (e["ph"] != "M" && !first_ts.count(pid)) first_ts[pid] = e["ts"];
  }
  ASSERT_EQ(names.size(), 2u) << doc["traceEvents"].dump();
  const int pid1 = 4242, pid0 = 4242 + (1 << 22);  // rank 1 came first and kept the pid
  EXPECT_NE(names[pid1].find("rank 1: "), std::string::npos) << names[pid1];
  EXPECT_NE(names[pid0].find("rank 0: "), std::string::npos) << names[pid0];
  EXPECT_EQ(sort_index[pid0], 0);
  EXPECT_EQ(sort_index[pid1], 1);
  // Same events, clocks 5 s apart: on the wall clock rank 1's come 5 s after rank 0's.
  EXPECT_NEAR(first_ts[pid1] - first_ts[pid0], 5e6, 1.0);
  EXPECT_EQ(first_ts[pid0], 0.0) << "microseconds since the job's first event";
  EXPECT_EQ(doc["otherData"]["time_base"],
            "us since the job's first event, processes aligned by wall clock");
  ASSERT_EQ(doc["otherData"]["processes"].size(), 2u);
  EXPECT_EQ(doc["otherData"]["processes"][0]["rank"], 1);
  EXPECT_EQ(doc["otherData"]["processes"][0]["host"], "node2");
  // One stream without its clocks: each process's own CLOCK_MONOTONIC, as a single export.
  rank1.realtime_minus_monotonic_ns.reset();
  doc = job();
  first_ts.clear();
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "M" && !first_ts.count(e["pid"])) first_ts[e["pid"]] = e["ts"];
  }
  EXPECT_EQ(first_ts[pid0], first_ts[pid1]);
  EXPECT_NE(doc["otherData"]["time_base"].get<std::string>().find("CLOCK_MONOTONIC"),
            std::string::npos);
}

TEST(PerfettoTraceTest, CountersFollowTheTimeline) {
  const ModelSummary s = Capture(ExportTrace().frames()).summary;
  const json doc = Export(s);
  // The last value of each counter track is the device's last timeline point.
  std::map<std::string, json> last;
  std::map<std::string, int> count;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "C") continue;
    last[e["name"]] = e["args"];
    ++count[e["name"]];
  }
  for (const DeviceSummary& d : s.devices) {
    SCOPED_TRACE(d.ordinal);
    ASSERT_FALSE(d.timeline.empty());
    const TimelinePoint& p = d.timeline.back();
    const std::string prefix = "GPU " + std::to_string(d.ordinal) + " ";
    EXPECT_EQ(count[prefix + "reserved"], static_cast<int>(d.timeline.size()));
    EXPECT_EQ(last[prefix + "reserved"]["bytes"], p.reserved_bytes);
    EXPECT_EQ(last[prefix + "allocated"]["bytes"], p.allocated_bytes);
    EXPECT_EQ(last[prefix + "cached"]["bytes"], p.cached_bytes);
  }
  // By hand: device 0 ends with 162 MiB reserved, 74 MiB allocated, 84 MiB cached, and 84 MiB
  // is over the 64 MiB floor, so fragmentation = 1 - 48/84 is reported.
  EXPECT_EQ(last["GPU 0 reserved"]["bytes"], 162 * kMiB);
  EXPECT_EQ(last["GPU 0 allocated"]["bytes"], 74 * kMiB);
  EXPECT_EQ(last["GPU 0 cached"]["bytes"], 84 * kMiB);
  ASSERT_TRUE(last.count("GPU 0 fragmentation"));
  EXPECT_NEAR(last["GPU 0 fragmentation"]["ratio"].get<double>(), 1.0 - 48.0 / 84.0, 1e-9);
  // Device 1 never had cached bytes: no fragmentation point at all (not a made-up 0).
  EXPECT_FALSE(last.count("GPU 1 fragmentation"));
}

TEST(PerfettoTraceTest, FailuresAndOomsAreInstantEventsOnTheirDevice) {
  const ModelSummary s = Capture(ExportTrace().frames()).summary;
  ASSERT_EQ(s.ooms.size(), 1u);
  const json doc = Export(s);
  int failed = 0, ooms = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "i") continue;
    EXPECT_EQ(e["tid"], 1);  // device 0
    // Microseconds since the trace's first event (ExportTrace's, at 1 ms).
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), (s.ooms[0].failure.time_ns - 1000000) / 1000.0);
    if (e["cat"] == "failed_alloc") {
      ++failed;
      EXPECT_EQ(e["args"]["requested_bytes"], kOomRequest);
      EXPECT_EQ(e["args"]["is_oom"], true);
      EXPECT_NE(e["args"]["site"].get<std::string>().find("allocate_kv_cache"), std::string::npos);
    } else if (e["cat"] == "oom") {
      ++ooms;
      EXPECT_EQ(e["name"], s.ooms[0].headline);
      EXPECT_EQ(e["args"]["class"], OomClassName(s.ooms[0].oom_class));
      EXPECT_EQ(e["args"]["device_free_bytes"], kFreeAtOom);
      EXPECT_EQ(e["args"]["requested_bytes"], kOomRequest);
    }
  }
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(ooms, 1);
}

}  // namespace
}  // namespace fragscope::testing
