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
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), s.ooms[0].failure.time_ns / 1000.0);
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
