// The CI snippet of viewer-cli/README.md must stay true: its `run:` lines are executed here, in
// order, with the bundled demo standing in for `python train.py` and the built `fragscope` on
// PATH.
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

std::vector<std::string> SnippetRunLines() {
  std::ifstream in(FRAGSCOPE_README);
  std::string line;
  std::vector<std::string> runs;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.find("<!-- ci-snippet:begin -->") != std::string::npos) inside = true;
    if (line.find("<!-- ci-snippet:end -->") != std::string::npos) inside = false;
    auto at = line.find("- run: ");
    if (inside && at != std::string::npos) runs.push_back(line.substr(at + 7));
  }
  return runs;
}

TEST(ReadmeCiSnippet, RunLinesWorkAndTheGateCatchesTheDemosFragmentation) {
  std::vector<std::string> runs = SnippetRunLines();
  ASSERT_EQ(runs.size(), 3u) << "the README snippet changed: update this test with it";
  char tmpl[] = "/tmp/fragscope-snippet-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  const std::string bin_dir = std::filesystem::path(FRAGSCOPE_CLI_BIN).parent_path();
  std::vector<int> status;
  for (std::string cmd : runs) {
    const std::string workload = "python train.py --steps 50";
    if (auto at = cmd.find(workload); at != std::string::npos) {
      cmd.replace(at, workload.size(), FRAGSCOPE_DEMO_BIN);
    }
    std::string shell = "cd " + dir + " && PATH=" + bin_dir +
                        ":$PATH FAKECUDA_CAPACITY=4G sh -c '" + cmd + "' >/dev/null 2>&1";
    int s = std::system(shell.c_str());
    status.push_back(WIFEXITED(s) ? WEXITSTATUS(s) : -1);
  }
  EXPECT_EQ(status[0], 0) << "run (with || true)";
  EXPECT_EQ(status[1], 0) << "html report";
  EXPECT_TRUE(std::filesystem::file_size(dir + "/fragscope-report.html") > 1000);
  // The demo's cache is 96 % fragmented at its peak: the gate must fail the job.
  EXPECT_EQ(status[2], 1) << "gate";
  std::ifstream junit(dir + "/gate.xml");
  std::stringstream ss;
  ss << junit.rdbuf();
  EXPECT_NE(ss.str().find("<failure"), std::string::npos) << ss.str();
  std::filesystem::remove_all(dir);
}

}  // namespace
