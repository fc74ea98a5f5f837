// One table of wrapped functions drives every route: each entry must be reachable by each
// (checked inside a traced process by apps/route_probe.cc).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

using RouteTest = RuntimeTest;

const char* const kDriverSymbols[] = {
#define FRAGSCOPE_DRIVER_HOOK(symbol, base, api, kind) #symbol,
#include "hooks/driver_hook_list.inc"
#undef FRAGSCOPE_DRIVER_HOOK
};
const char* const kRuntimeSymbols[] = {
#define FRAGSCOPE_RUNTIME_HOOK(symbol, api, kind) #symbol,
#include "hooks/runtime_hook_list.inc"
#undef FRAGSCOPE_RUNTIME_HOOK
};

TEST_P(RouteTest, EveryTableEntryIsReachableByEveryRoute) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_route_probe"), {},
                             RunOptions{true, {{"FRAGSCOPE_OUTPUT", dir.File("t.fst")}}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::set<std::string> driver_seen, runtime_seen;
  for (const auto& line : Lines(run.out)) {
    if (line[0] == "driver") {
      ASSERT_EQ(line.size(), 6u);
      const std::string& symbol = line[1];
      driver_seen.insert(symbol);
      EXPECT_EQ(line[2], "direct=1") << symbol;
      EXPECT_EQ(line[3], "dlsym=1") << symbol;
      // gpa=N/M: every (version, flags) that names this ABI answers with its wrapper, and
      // there is at least one.
      auto all_ok = [](const std::string& field) {
        size_t eq = field.find('='), slash = field.find('/');
        std::string ok = field.substr(eq + 1, slash - eq - 1), total = field.substr(slash + 1);
        return ok == total && total != "0";
      };
      EXPECT_TRUE(all_ok(line[4])) << symbol << " " << line[4];
      EXPECT_TRUE(all_ok(line[5])) << symbol << " " << line[5];
    } else if (line[0] == "runtime") {
      runtime_seen.insert(line[1]);
      EXPECT_EQ(line[2], "v12=1") << line[1];
      EXPECT_EQ(line[3], "v13=1") << line[1];
      EXPECT_EQ(line[4], "plain=1") << line[1];
    }
  }
  EXPECT_EQ(driver_seen.size(), std::size(kDriverSymbols));
  EXPECT_EQ(runtime_seen.size(), std::size(kRuntimeSymbols));
}

// Without the agent, the same probe finds none of its exports (the probe checks for real).
TEST_P(RouteTest, ProbeSeesNoAgentWhenNotPreloaded) {
  RunResult run = RunProgram(AppPath("agent_route_probe"), {}, RunOptions{false, {}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const auto& line : Lines(run.out)) {
    if (line[0] == "driver") {
      EXPECT_EQ(line[2], "direct=0") << line[1];
    } else if (line[0] == "runtime") {
      EXPECT_EQ(line[4], "plain=0") << line[1];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothRuntimes, RouteTest, BothRuntimes(), RuntimeParamName);

}  // namespace
}  // namespace fragscope::agent_test
