// The PyTorch snapshot export read by PyTorch's own tooling, torch.cuda._memory_viz (segsum,
// the flame-graph text of `segments` and `memory`, `trace`, and the trace_plot / segment_plot
// pages), through tests/export/torch_viz_check.py. Needs a python that imports torch
// (FRAGSCOPE_TORCH_PYTHON at configure time, else python3); skipped, with the reason, without.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "export_test_trace.h"
#include "fragscope/export/torch_snapshot_writer.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope::testing {
namespace {

namespace fs = std::filesystem;

struct CheckerRun {
  int exit_code = -1;
  std::string output;
};

// Runs the checker with paths passed through the environment, not the shell.
CheckerRun RunChecker(const fs::path& pickle, const fs::path& out_dir) {
  setenv("FRAGSCOPE_VIZ_PICKLE", pickle.c_str(), 1);
  setenv("FRAGSCOPE_VIZ_OUT", out_dir.c_str(), 1);
  const std::string command = std::string("'") + FRAGSCOPE_TORCH_PYTHON + "' '" +
                              FRAGSCOPE_TORCH_VIZ_CHECK +
                              "' \"$FRAGSCOPE_VIZ_PICKLE\" \"$FRAGSCOPE_VIZ_OUT\" 2>&1";
  CheckerRun r;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TorchVizTest, PyTorchsMemoryVizReadsTheExport) {
  const exporter::ExportInput in = Capture(ExportTrace().frames());
  ModuleOffsetSymbolizer symbolizer(in.summary.modules);
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("fragscope_torch_viz." + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path pickle = dir / "export.pickle";
  std::ofstream(pickle, std::ios::binary) << exporter::WriteTorchSnapshot(in, symbolizer);

  const CheckerRun r = RunChecker(pickle, dir);
  if (r.exit_code == 77) GTEST_SKIP() << r.output << "(see README, PyTorch)";
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json out = nlohmann::json::parse(r.output.substr(r.output.find('{')));

  // segsum: every segment's blocks add up to its size (it raises otherwise), and its totals
  // are the trace's: A 64 + B 2 + C's mapped 96 + D 4 MiB reserved; 8 + 32 + 2 + 16 + 16 + 4
  // MiB allocated; the rest free (A's pending-free 4 MiB block counts as free for segsum).
  const std::string segsum = out["segsum"];
  EXPECT_NE(segsum.find("segments: 4\n"), std::string::npos) << segsum;
  EXPECT_NE(segsum.find("total_reserved: 166.0MiB\n"), std::string::npos) << segsum;
  EXPECT_NE(segsum.find("total_allocated: 78.0MiB\n"), std::string::npos) << segsum;
  EXPECT_NE(segsum.find("total_free: 88.0MiB"), std::string::npos) << segsum;

  // The flame-graph input: one line per block, prefixed by stream and segment address, with
  // the block's frames (outermost first).
  const std::string segments = out["segments"];
  EXPECT_NE(segments.find("stream_0;seg_" + std::to_string(kSegA) + ";active_allocated;"),
            std::string::npos)
      << segments;
  EXPECT_NE(segments.find("attention"), std::string::npos) << segments;
  EXPECT_NE(segments.find(";active_pending_free;"), std::string::npos) << segments;
  EXPECT_NE(std::string(out["memory"]).find("stream_0;active_allocated;"), std::string::npos);

  // trace: the OOM entry, with the device's free bytes where PyTorch keeps them (device_free).
  const std::string trace = out["trace"];
  EXPECT_NE(trace.find("raise OutOfMemoryError # 80.0MiB requested, 50.0MiB free in CUDA"),
            std::string::npos)
      << trace;

  // The pages PyTorch writes embed the snapshot for MemoryViz.js (loaded from a CDN, so not
  // rendered here).
  for (const char* page : {"trace_plot", "segment_plot"}) {
    const std::string html = ReadFile(out[page]);
    EXPECT_NE(html.find("add_local_files"), std::string::npos) << page;
    EXPECT_NE(html.find("snapshot.pickle"), std::string::npos) << page;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fragscope::testing
