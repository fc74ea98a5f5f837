// What the package tests need: commands run as a user types them (shell_command.h), and the
// check of the demo's run that each way of installing must pass.
#ifndef FRAGSCOPE_TESTS_PACKAGE_SHELL_RESULT_H_
#define FRAGSCOPE_TESTS_PACKAGE_SHELL_RESULT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace fragscope::package_test {

using fragscope::testing::Result;
using fragscope::testing::Shell;
using fragscope::testing::Slurp;

// `run` is the demo (fragmenting_training) under an installed fragscope, its JSON report in
// `report`: the demo's second OOM passed through as status 1, no warning (the agent found is of
// the same build) and both OOMs explained.
inline void ExpectTheDemosOoms(const Result& run, const std::string& report) {
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output.find("warning"), std::string::npos) << run.output;
  nlohmann::json j = nlohmann::json::parse(Slurp(report), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << run.output;
  ASSERT_EQ(j["ooms"].size(), 2u) << j.dump(2);
  EXPECT_EQ(j["ooms"][0]["class"], "fragmentation");
  EXPECT_EQ(j["ooms"][1]["class"], "capacity");
}

}  // namespace fragscope::package_test

#endif  // FRAGSCOPE_TESTS_PACKAGE_SHELL_RESULT_H_
