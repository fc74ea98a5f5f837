// `fragscope export` and `fragscope report --format html` end to end on a trace file: outputs
// written, exit codes 0 / 2 (usage) / 3 (bad input).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "exit_codes.h"
#include "export_test_trace.h"
#include "fragscope/torch/snapshot_importer.h"
#include "fragscope/trace/frame_writer.h"
#include "nlohmann/json.hpp"

namespace fragscope::testing {
namespace {

namespace fs = std::filesystem;

class ExportCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("fragscope_export_command_test." + std::to_string(getpid()));
    fs::create_directories(dir_);
    trace_ = (dir_ / "trace.fst").string();
    auto writer = FrameWriter::CreateFile(trace_);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const v1::Frame& f : ExportTrace().frames()) ASSERT_TRUE(writer->Write(f).ok());
    ASSERT_TRUE(writer->Close().ok());
  }
  std::string Out(const std::string& name) {
    fs::remove(dir_ / name);
    return (dir_ / name).string();
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  fs::path dir_;
  std::string trace_;
};

TEST_F(ExportCommandTest, WritesBothExports) {
  const std::string json_path = Out("trace.json"), pickle_path = Out("trace.pickle");
  EXPECT_EQ(cli::ExportCommand({trace_, "--perfetto", json_path, "--torch-snapshot", pickle_path}),
            cli::kExitOk);
  nlohmann::json doc = nlohmann::json::parse(Read(json_path));
  EXPECT_FALSE(doc["traceEvents"].empty());
  auto imported = torch::ImportTorchSnapshotFileWithSummary(pickle_path);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->devices.at(0).reserved_bytes, 162 * kMiB);
  EXPECT_EQ(imported->devices.at(1).reserved_bytes, 4 * kMiB);
  EXPECT_EQ(imported->devices.at(0).oom_count, 1u);
}

TEST_F(ExportCommandTest, ReportWritesHtml) {
  const std::string html_path = Out("report.html");
  EXPECT_EQ(cli::ReportCommand({trace_, "--format", "html", "-o", html_path}), cli::kExitOk);
  const std::string page = Read(html_path);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  // The CLI captured the layouts: segments are drawn, not "not captured".
  EXPECT_NE(page.find("<g class=\"segment "), std::string::npos);
  EXPECT_EQ(page.find("not captured"), std::string::npos);
}

TEST_F(ExportCommandTest, UsageErrorsExitTwo) {
  EXPECT_EQ(cli::ExportCommand({trace_}), cli::kExitUsage);  // nothing asked for
  EXPECT_EQ(cli::ExportCommand({"--perfetto", Out("x.json")}), cli::kExitUsage);  // no TRACE
  EXPECT_EQ(cli::ExportCommand({trace_, "--bogus"}), cli::kExitUsage);
  EXPECT_EQ(
      cli::ExportCommand({trace_, "--perfetto", Out("y.json"), "--fragmentation-floor", "lots"}),
      cli::kExitUsage);
  EXPECT_EQ(cli::ReportCommand({trace_, "--format", "pdf"}), cli::kExitUsage);
}

TEST_F(ExportCommandTest, BadInputExitsThree) {
  const std::string json_path = Out("missing.json");
  EXPECT_EQ(cli::ExportCommand({(dir_ / "no-such-trace.fst").string(), "--perfetto", json_path}),
            cli::kExitBadInput);
  EXPECT_FALSE(fs::exists(json_path));
  const std::string garbage = (dir_ / "garbage.fst").string();
  std::ofstream(garbage) << "this is not a trace";
  EXPECT_EQ(cli::ExportCommand({garbage, "--perfetto", json_path}), cli::kExitBadInput);
  // Unwritable output.
  EXPECT_EQ(cli::ExportCommand({trace_, "--perfetto", (dir_ / "no-dir" / "x.json").string()}),
            cli::kExitBadInput);
}

}  // namespace
}  // namespace fragscope::testing
