// What the package tests need: commands run as a user types them, and the check of the demo's
// run that each way of installing must pass.
#ifndef FRAGSCOPE_TESTS_PACKAGE_SHELL_RESULT_H_
#define FRAGSCOPE_TESTS_PACKAGE_SHELL_RESULT_H_

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace fragscope::package_test {

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// `command` under /bin/sh, its output and exit status (-1 if it did not exit).
inline Result Shell(const std::string& command) {
  Result r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The whole file ("" if it cannot be read).
inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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
