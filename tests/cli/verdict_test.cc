// A report opens with its answer: one line per OOM (repeats grouped) with device, request,
// class and reason, and the worst fragmentation, before the end-of-run state; a run without an
// OOM says so in that place. Text and JSON ("verdict") agree with the post-mortems.
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace {

using fragscope::testing::Result;
using fragscope::testing::Shell;
using fragscope::testing::Slurp;
using nlohmann::json;

const std::string kCli = FRAGSCOPE_CLI_BIN;

class Verdict : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fragscope-verdict-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  // Runs `cmd` under `fragscope run -o`; returns the trace.
  std::string Trace(const std::string& env, const std::string& cmd, int expected_exit) {
    const std::string trace = dir_ + "/t.fst";
    Result r = Shell(env + kCli + " run -o " + trace + " -- " + cmd);
    EXPECT_EQ(r.exit_code, expected_exit) << r.output;
    return trace;
  }
  json Json(const std::string& trace) {
    Result r = Shell(kCli + " report " + trace + " --format json -o " + dir_ + "/r.json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json::parse(Slurp(dir_ + "/r.json"), nullptr, false);
  }
  std::string dir_;
};

TEST_F(Verdict, TheDemoReportOpensWithBothOoms) {
  const std::string trace = Trace("FAKECUDA_CAPACITY=4G ", FRAGSCOPE_DEMO_BIN, 1);
  Result text = Shell(kCli + " report " + trace);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  const std::string& out = text.output;
  // The third line is the verdict; both OOMs and the worst fragmentation come before any
  // end-of-run figure.
  const size_t verdict = out.find("\nVerdict: 2 OOMs, none recovered");
  const size_t end_state = out.find("At the end of the run:");
  ASSERT_NE(verdict, std::string::npos) << out;
  ASSERT_NE(end_state, std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.begin() + static_cast<long>(verdict), '\n'), 1) << out;
  const size_t fragmentation = out.find("OOM on device 0 at seq", verdict);
  EXPECT_LT(fragmentation, end_state);
  EXPECT_NE(out.find(", fragmentation: the bytes exist but not in one piece", verdict),
            std::string::npos);
  EXPECT_LT(out.find(", capacity: too much is live", verdict), end_state) << out;
  EXPECT_LT(out.find("worst fragmentation on device 0: ", verdict), end_state) << out;
  EXPECT_LT(end_state, out.find("\n  reserved ")) << "end-state figures come after the verdict";

  const json r = Json(trace);
  ASSERT_FALSE(r.is_discarded());
  const json& v = r["verdict"];
  ASSERT_EQ(v["ooms"].size(), 2u) << v.dump(2);
  ASSERT_EQ(r["ooms"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(v["ooms"][i]["class"], r["ooms"][i]["class"]);
    EXPECT_EQ(v["ooms"][i]["requested_bytes"], r["ooms"][i]["requested_bytes"]);
    EXPECT_EQ(v["ooms"][i]["count"], 1);
    EXPECT_FALSE(v["ooms"][i]["reason"].get<std::string>().empty());
  }
  ASSERT_EQ(v["fragmentation"].size(), 1u);
  EXPECT_GT(v["fragmentation"][0]["worst"].get<double>(), 0.5);
}

TEST_F(Verdict, ARunWithoutOomSaysSoFirst) {
  const std::string trace = Trace("", std::string(FRAGSCOPE_OOM_RETRY_APP) + " clean", 0);
  Result text = Shell(kCli + " report " + trace);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("\nVerdict: no OOM;"), std::string::npos) << text.output;
  EXPECT_LT(text.output.find("worst fragmentation on device 0"),
            text.output.find("At the end of the run:"));
  const json r = Json(trace);
  EXPECT_TRUE(r["verdict"]["ooms"].empty());
  EXPECT_EQ(r["verdict"]["headline"].get<std::string>().rfind("no OOM", 0), 0u);
}

TEST_F(Verdict, ARetryLoopIsOneLine) {
  const std::string trace = Trace("", std::string(FRAGSCOPE_OOM_RETRY_APP) + " retry 150", 1);
  Result text = Shell(kCli + " report " + trace);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("\nVerdict: 150 OOMs, none recovered"), std::string::npos)
      << text.output.substr(0, 2000);
  EXPECT_NE(text.output.find("OOM on device 0 x150, seq "), std::string::npos)
      << text.output.substr(0, 2000);
  const json r = Json(trace);
  ASSERT_EQ(r["verdict"]["ooms"].size(), 1u) << r["verdict"].dump(2);
  EXPECT_EQ(r["verdict"]["ooms"][0]["count"], 150);
  // More than the post-mortems kept: the repeats take the class of the first.
  EXPECT_EQ(r["verdict"]["ooms"][0]["class"], r["ooms"][0]["class"]);
}

}  // namespace
