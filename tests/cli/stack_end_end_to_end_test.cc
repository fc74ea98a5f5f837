// The demo under the agent with FRAGSCOPE_STACK_DEPTH=2, its call chains deeper than that: the
// reports say where the stacks were cut and why, and every command that re-writes the trace
// (symbolize, export --torch-snapshot then import) keeps it.
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace {

using fragscope::testing::Result;
using fragscope::testing::Shell;
using fragscope::testing::Slurp;
using nlohmann::json;

constexpr char kDepthCut[] = "stack cut here: deeper than FRAGSCOPE_STACK_DEPTH=2 (raise it)";

// The "stack_end" of every site of a JSON report (the job-wide list, the devices' and the OOMs').
std::multiset<std::string> SiteEnds(const json& report) {
  std::multiset<std::string> ends;
  for (const json& site : report.at("sites")) ends.insert(site.at("stack_end").get<std::string>());
  for (const json& oom : report.at("ooms")) {
    for (const json& site : oom.at("sites_at_failure")) {
      ends.insert(site.at("stack_end").get<std::string>());
    }
    ends.insert(oom.at("stack_end").get<std::string>());
  }
  return ends;
}

class StackEndEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fragscope-stack-end-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  static std::string Fragscope() { return FRAGSCOPE_CLI_BIN; }
  json Report(const std::string& trace) {
    const std::string out = dir_ + "/report.json";
    Result r = Shell(Fragscope() + " report " + trace + " --format json -o " + out);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json::parse(Slurp(out), nullptr, false);
  }
  std::string dir_;
};

TEST_F(StackEndEndToEnd, ADepthOfTwoCutsTheDemosStacksAndEveryReportSaysSo) {
  const std::string trace = dir_ + "/demo.fst";
  Result run = Shell("FRAGSCOPE_STACK_DEPTH=2 FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " +
                     Fragscope() + " run -o " + trace + " -- " + FRAGSCOPE_DEMO_BIN);
  ASSERT_EQ(run.exit_code, 1) << run.output;  // the demo dies of its second OOM
  // The report printed at exit: the cut line after the last frame of the stacks.
  EXPECT_NE(run.output.find(kDepthCut), std::string::npos) << run.output;

  const json live = Report(trace);
  ASSERT_FALSE(live.is_discarded());
  const std::multiset<std::string> ends = SiteEnds(live);
  ASSERT_FALSE(ends.empty()) << live.dump(1);
  EXPECT_GT(ends.count("depth_limit"), 0u) << live.dump(1);
  EXPECT_EQ(ends.count("outermost"), 0u) << live.dump(1);

  // symbolize copies the frames and appends symbols: the ends are the same.
  Result sym = Shell(Fragscope() + " symbolize " + trace + " -o " + dir_ + "/sym.fst");
  EXPECT_EQ(sym.exit_code, 0) << sym.output;
  const json symbolized = Report(dir_ + "/sym.fst");
  ASSERT_FALSE(symbolized.is_discarded());
  EXPECT_EQ(SiteEnds(symbolized), ends);
  EXPECT_NE(Shell(Fragscope() + " report " + dir_ + "/sym.fst").output.find(kDepthCut),
            std::string::npos);

  // A PyTorch snapshot of it, imported again: the cut comes back as the stacks' end.
  Result exported =
      Shell(Fragscope() + " export " + trace + " --torch-snapshot " + dir_ + "/demo.pickle");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  Result imported =
      Shell(Fragscope() + " import " + dir_ + "/demo.pickle -o " + dir_ + "/imported.fst");
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  const json back = Report(dir_ + "/imported.fst");
  ASSERT_FALSE(back.is_discarded());
  EXPECT_GT(SiteEnds(back).count("depth_limit"), 0u) << back.dump(1);
}

}  // namespace
