// `cmake --install BUILD --prefix P` as a user installs from source: P holds what `fragscope run`
// needs (the agent, the CUPTI library beside it, the PyTorch adapter), and P/bin/fragscope, run
// from another folder with no variable pointing it anywhere, preloads P's agent, puts P's adapter
// on PYTHONPATH and reports the program's allocations from the trace it wrote.
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "shell_result.h"

namespace fragscope {
namespace {

using package_test::ExpectTheDemosOoms;
using package_test::Result;
using package_test::Shell;
using package_test::Slurp;

const std::string kPrefix = FRAGSCOPE_TEST_PREFIX;

class InstallPrefix : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/fragscope-install-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  static void TearDownTestSuite() { std::system(("rm -rf " + dir_).c_str()); }
  // `command` from a folder outside the build and the prefix, the fake driver (a 4 GiB device)
  // on LD_LIBRARY_PATH, and no variable that points fragscope at an agent or adapter.
  static Result Installed(const std::string& command) {
    return Shell("cd " + dir_ +
                 " && env -u FRAGSCOPE_AGENT -u FRAGSCOPE_ADAPTER_DIR -u PYTHONPATH " +
                 "LD_LIBRARY_PATH=" + FAKECUDA_LIB_DIR +
                 " FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " + kPrefix + "/bin/fragscope " +
                 command);
  }
  static std::string dir_;
};
std::string InstallPrefix::dir_;

TEST_F(InstallPrefix, HoldsWhatRunNeeds) {
  std::vector<std::string> files = {"bin/fragscope",
                                    "bin/fragscope-collector",
                                    "bin/fragscope-dump",
                                    "lib/libfragscope.so",
                                    "include/fragscope/annotate.h",
                                    "share/fragscope/adapter/sitecustomize.py",
                                    "share/fragscope/adapter/fragscope_torch_adapter.cpp",
                                    "share/fragscope/adapter/fragscope_torch_diff.py"};
  if (FRAGSCOPE_HAVE_CUPTI) files.push_back("lib/libfragscope_cupti.so");
  for (const std::string& file : files) {
    EXPECT_EQ(access((kPrefix + "/" + file).c_str(), R_OK), 0) << kPrefix << "/" << file;
  }
  // Python's byte code of the source tree's adapter is no part of an install.
  EXPECT_NE(access((kPrefix + "/share/fragscope/adapter/__pycache__").c_str(), F_OK), 0);
}

TEST_F(InstallPrefix, InstalledRunTracesAProgramAndItsTraceIsReported) {
  const std::string trace = dir_ + "/t.fst", json = dir_ + "/t.json";
  Result run = Installed("run -o " + trace + " --format json --report " + json + " -- " +
                         FRAGSCOPE_DEMO_BIN);
  ExpectTheDemosOoms(run, json);
  EXPECT_NE(run.output.find("trace written to " + trace), std::string::npos) << run.output;
  Result report = Installed("report " + trace);
  EXPECT_EQ(report.exit_code, 0) << report.output;
  // Its allocations: the device's peak and the failed request of its first OOM.
  EXPECT_NE(report.output.find("OOM on device 0: requested 772.00 MiB"), std::string::npos)
      << report.output;
  EXPECT_NE(report.output.find("peak 3.44 GiB"), std::string::npos) << report.output;
}

TEST_F(InstallPrefix, InstalledRunUsesTheInstalledAdapterAndCuptiLibrary) {
  Result python =
      Installed("run --quiet -- python3 -c 'import sitecustomize; print(sitecustomize.__file__)'");
  EXPECT_NE(python.output.find(kPrefix + "/share/fragscope/adapter/sitecustomize.py"),
            std::string::npos)
      << python.output;
  if (!FRAGSCOPE_HAVE_CUPTI) GTEST_SKIP() << "this build has no CUPTI library";
  // The fake driver loads no injection library: the run gets as far as saying so, which it does
  // only once it found libfragscope_cupti.so beside the agent.
  Result cupti = Installed("run --backend cupti -- true");
  EXPECT_EQ(cupti.output.find("not found"), std::string::npos) << cupti.output;
  EXPECT_NE(cupti.output.find("CUPTI"), std::string::npos) << cupti.output;
}

// torch-setup builds with the installed adapter, so into the cache runs of this install read. A
// stand-in python that prints what it was asked to run shows which adapter file that is.
TEST_F(InstallPrefix, TorchSetupRunsTheInstalledAdapter) {
  const std::string python = dir_ + "/python-stand-in";
  ASSERT_EQ(Shell("printf '#!/bin/sh\\necho \"ran $*\"\\n' > " + python + " && chmod +x " + python)
                .exit_code,
            0);
  Result setup = Installed("torch-setup --python " + python);
  EXPECT_EQ(setup.exit_code, 0) << setup.output;
  EXPECT_NE(setup.output.find("ran " + kPrefix + "/share/fragscope/adapter/sitecustomize.py"),
            std::string::npos)
      << setup.output;
}

}  // namespace
}  // namespace fragscope
