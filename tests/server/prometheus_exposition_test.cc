// The /metrics page: one family per figure with its HELP and TYPE, labelled by process and
// device; unknown figures absent, and block figures said to be a sync's when they are.
#include "fragscope/server/prometheus_exposition.h"

#include <gtest/gtest.h>

#include <string>

namespace fragscope {
namespace {

SessionServer::StreamState Stream() {
  SessionServer::StreamState s;
  s.hello.set_pid(4242);
  s.hello.set_exe("/usr/bin/python3");
  s.hello.set_host("node1");
  s.connected = true;
  DeviceSummary d;
  d.ordinal = 0;
  d.reserved_bytes = 1000;
  d.cached_bytes = 400;
  d.largest_free_range_bytes = 100;
  d.fragmentation = Measured<double>::Known(0.75);
  s.summary.devices.push_back(d);
  return s;
}

constexpr char kProc[] = "pid=\"4242\",exe=\"/usr/bin/python3\",host=\"node1\"";

TEST(PrometheusExposition, FamiliesAndUnknownFiguresAbsent) {
  const std::string text = RenderPrometheus({Stream()});
  EXPECT_NE(text.find("# TYPE fragscope_reserved_bytes gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find(std::string("fragscope_reserved_bytes{") + kProc +
                      ",device=\"0\",uuid=\"\"} 1000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fragscope_fragmentation_ratio{"), std::string::npos) << text;
  EXPECT_EQ(text.find("fragscope_untracked_bytes{"), std::string::npos) << "unknown: absent";
}

TEST(PrometheusExposition, TheGpuIsLabelledAsNvidiaSmiNamesIt) {
  SessionServer::StreamState s = Stream();
  s.summary.devices[0].uuid_hex = "8f0c29a1b2c3d4e5f60718293a4b5c6d";
  const std::string text = RenderPrometheus({s});
  EXPECT_NE(text.find(std::string("fragscope_reserved_bytes{") + kProc +
                      ",device=\"0\",uuid=\"GPU-8f0c29a1-b2c3-d4e5-f607-18293a4b5c6d\"} 1000\n"),
            std::string::npos)
      << text;
}

TEST(PrometheusExposition, BlocksOfAnOlderSyncAreSaidToBeSo) {
  SessionServer::StreamState followed = Stream();
  std::string text = RenderPrometheus({followed});
  EXPECT_NE(text.find(std::string("fragscope_block_syncs_total{") + kProc + "} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(std::string("fragscope_blocks_fresh{") + kProc + "} 1\n"), std::string::npos)
      << text;
  SessionServer::StreamState synced = Stream();
  synced.summary.block_syncs = 3;
  synced.summary.blocks_known_at_end = false;
  text = RenderPrometheus({synced});
  EXPECT_NE(text.find(std::string("fragscope_block_syncs_total{") + kProc + "} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(std::string("fragscope_blocks_fresh{") + kProc + "} 0\n"), std::string::npos)
      << text;
}

// A stream that began with a snapshot (an attach, a wake, a restart) has peaks since then only:
// the gauge lets an alert or a dashboard tell the run's peak from the window's.
TEST(PrometheusExposition, AStreamThatBeganMidRunSaysItsPeaksAreSinceThen) {
  std::string text = RenderPrometheus({Stream()});
  EXPECT_NE(text.find(std::string("fragscope_history_complete{") + kProc + "} 1\n"),
            std::string::npos)
      << text;
  SessionServer::StreamState woken = Stream();
  woken.summary.history_from_seq = 5000;
  text = RenderPrometheus({woken});
  EXPECT_NE(text.find(std::string("fragscope_history_complete{") + kProc + "} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# HELP fragscope_peak_reserved_bytes"), std::string::npos) << text;
}

}  // namespace
}  // namespace fragscope
