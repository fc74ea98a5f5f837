// A program built -O2 -fomit-frame-pointer: the OOM's stack in the report names every call from
// the failed cudaMalloc down to main, in order, where a frame-pointer walk stops at the first,
// and still does once the program's binary is deleted (`run` stores the symbols in the trace).
#include <stdlib.h>

#include <cstdio>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace {

using fragscope::testing::Result;
using fragscope::testing::Shell;
using fragscope::testing::Slurp;
using nlohmann::json;

class ReleaseBuildStacks : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fragscope-release-stacks-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(ReleaseBuildStacks, TheOomStackReachesMain) {
  const std::string app = dir_ + "/release_build_app";
  ASSERT_EQ(Shell(std::string("cp ") + FRAGSCOPE_RELEASE_APP_BIN + " " + app).exit_code, 0);
  const std::string trace = dir_ + "/app.fst";
  Result run = Shell("FAKECUDA_CAPACITY=2G " + std::string(FRAGSCOPE_CLI_BIN) + " run -o " + trace +
                     " -- " + app);
  ASSERT_EQ(run.exit_code, 1) << run.output;  // the app's second layer does not fit
  for (const bool deleted : {false, true}) {
    if (deleted) {
      ASSERT_EQ(std::remove(app.c_str()), 0);
    }
    Result report = Shell(std::string(FRAGSCOPE_CLI_BIN) + " report " + trace +
                          " --format json -o " + dir_ + "/report.json");
    ASSERT_EQ(report.exit_code, 0) << report.output;
    const json r = json::parse(Slurp(dir_ + "/report.json"), nullptr, false);
    ASSERT_FALSE(r.is_discarded());
    ASSERT_FALSE(r["ooms"].empty()) << r.dump(2);
    EXPECT_EQ(r["ooms"][0].value("stack_end", ""), "outermost") << r["ooms"][0].dump(2);
    std::vector<std::string> functions;
    for (const json& f : r["ooms"][0]["stack"]) functions.push_back(f.value("function", ""));
    const std::vector<std::string> expected = {"AllocateWeights", "BuildLayer", "Train", "main"};
    size_t next = 0;
    for (const std::string& f : functions) {
      if (next < expected.size() && f.find(expected[next]) != std::string::npos) ++next;
    }
    EXPECT_EQ(next, expected.size())
        << (deleted ? "binary deleted: " : "") << "expected, in order: AllocateWeights, "
        << "BuildLayer, Train, main; the stack was:\n"
        << r["ooms"][0]["stack"].dump(2);
  }
}

}  // namespace
