// The relocatable bundle (scripts/package) as a user gets it: unpacked into a folder of its own,
// every program and library finds its libraries inside it (glibc's aside), and its `fragscope
// run`, started from another folder, preloads its own agent and explains the demo's two OOMs on
// the fake device. A bundle whose agent is missing, or is another build's, says so.
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "agent_of_another_build.h"
#include "gtest/gtest.h"
#include "shell_result.h"

namespace fragscope {
namespace {

using package_test::ExpectTheDemosOoms;
using package_test::Result;
using package_test::Shell;
using package_test::Slurp;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class PackageBundle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/fragscope-package-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    unpack_ = Shell("mkdir -p " + dir_ + "/unpacked " + dir_ + "/elsewhere && tar -xzf " +
                    FRAGSCOPE_TEST_BUNDLE + " -C " + dir_ + "/unpacked && ls -d " + dir_ +
                    "/unpacked/fragscope-*");
    bundle_ = Trim(unpack_.output);
  }
  static void TearDownTestSuite() { std::system(("rm -rf " + dir_).c_str()); }

  void SetUp() override {
    ASSERT_EQ(unpack_.exit_code, 0) << FRAGSCOPE_TEST_BUNDLE << ": " << unpack_.output;
  }

  // A copy of the bundle to break, at `name` beside the unpacked one.
  static std::string Copy(const std::string& name) {
    const std::string copy = dir_ + "/" + name;
    EXPECT_EQ(Shell("cp -a " + bundle_ + " " + copy).exit_code, 0);
    return copy;
  }

  // The demo under `bundle`'s fragscope, run from a folder outside the bundle, the fake CUDA
  // driver on LD_LIBRARY_PATH and no variable that points fragscope at an agent.
  static Result RunDemo(const std::string& bundle, const std::string& report) {
    return Shell("cd " + dir_ + "/elsewhere && env -u FRAGSCOPE_AGENT -u FRAGSCOPE_ADAPTER_DIR " +
                 "LD_LIBRARY_PATH=" + FAKECUDA_LIB_DIR +
                 " FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " + bundle +
                 "/bin/fragscope run --format json --report " + report + " -- " +
                 FRAGSCOPE_DEMO_BIN);
  }

  static std::string Version(const std::string& bundle) {
    Result r = Shell(bundle + "/bin/fragscope --version");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return Trim(r.output.substr(r.output.find(' ') + 1));
  }

  static std::string dir_, bundle_;
  static Result unpack_;
};
std::string PackageBundle::dir_, PackageBundle::bundle_;
Result PackageBundle::unpack_;

TEST_F(PackageBundle, HoldsTheProgramsTheLibrariesTheAdapterAndGpuCheck) {
  for (const char* file :
       {"bin/fragscope", "bin/fragscope-collector", "bin/fragscope-dump", "lib/libfragscope.so",
        "lib/libfragscope_cupti.so", "lib/libcapstone.so.4", "include/fragscope/annotate.h",
        "share/fragscope/adapter/sitecustomize.py", "scripts/gpu-check"}) {
    struct stat st;
    EXPECT_EQ(stat((bundle_ + "/" + file).c_str(), &st), 0) << file << " missing in " << bundle_;
  }
  struct stat st;
  ASSERT_EQ(stat(FRAGSCOPE_TEST_BUNDLE, &st), 0);
  EXPECT_LE(st.st_size, 64 << 20) << FRAGSCOPE_TEST_BUNDLE;
}

// ldd of every ELF file, without LD_LIBRARY_PATH: each library resolves to the bundle's lib/,
// except glibc's own, which the host provides.
TEST_F(PackageBundle, EveryLibraryResolvesInsideTheBundleButGlibc) {
  const std::set<std::string> glibc = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0",
                                       "librt.so.1"};
  Result files = Shell("ls " + bundle_ + "/bin/* " + bundle_ + "/lib/*.so*");
  ASSERT_EQ(files.exit_code, 0) << files.output;
  std::istringstream list(files.output);
  std::set<std::string> bundled_seen;
  int checked = 0;
  const std::regex line(R"(^\s*(\S+) => (\S+) \(0x[0-9a-f]+\)$)");
  for (std::string file; std::getline(list, file);) {
    Result ldd = Shell("env -u LD_LIBRARY_PATH ldd " + file);
    ASSERT_EQ(ldd.exit_code, 0) << file << ": " << ldd.output;
    EXPECT_EQ(ldd.output.find("not found"), std::string::npos) << file << ":\n" << ldd.output;
    std::istringstream lines(ldd.output);
    for (std::string l; std::getline(lines, l);) {
      std::smatch m;
      if (!std::regex_match(l, m, line)) continue;  // linux-vdso, ld-linux: no "=>"
      const std::string name = m[1], path = m[2];
      if (glibc.count(name) != 0) continue;
      char* real = realpath(path.c_str(), nullptr);
      const std::string resolved = real != nullptr ? real : path;
      free(real);
      EXPECT_EQ(resolved.rfind(bundle_ + "/lib/", 0), 0u)
          << file << " takes " << name << " from " << path << ", outside the bundle";
      bundled_seen.insert(name);
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);
  // The CLI's own dependencies are among them (a bundle that lost them would pass vacuously).
  for (const char* prefix :
       {"libprotobuf.so", "libabsl_", "libdw.so", "libelf.so", "libstdc++.so", "libgcc_s.so"}) {
    bool found = false;
    for (const std::string& name : bundled_seen) found |= name.rfind(prefix, 0) == 0;
    EXPECT_TRUE(found) << prefix << "* resolved from the bundle by nothing";
  }
}

// The agent dlopens libcapstone.so.4 by name for `attach`: its RUNPATH must find the bundle's.
TEST_F(PackageBundle, TheAgentsRunpathFindsTheBundledCapstone) {
  Result dynamic = Shell("readelf -d " + bundle_ + "/lib/libfragscope.so");
  ASSERT_EQ(dynamic.exit_code, 0) << dynamic.output;
  EXPECT_NE(dynamic.output.find("(RUNPATH)            Library runpath: [$ORIGIN]"),
            std::string::npos)
      << dynamic.output;
}

TEST_F(PackageBundle, RunFromAnotherFolderExplainsTheDemosOoms) {
  const std::string report = dir_ + "/bundle-report.json";
  ExpectTheDemosOoms(RunDemo(bundle_, report), report);
}

TEST_F(PackageBundle, MissingAgentSaysWhichFileAndWhereItLooked) {
  const std::string copy = Copy("no-agent");
  ASSERT_EQ(std::remove((copy + "/lib/libfragscope.so").c_str()), 0);
  Result run = RunDemo(copy, dir_ + "/no-agent.json");
  EXPECT_EQ(run.exit_code, 3) << run.output;  // kExitBadInput; the demo never ran
  EXPECT_NE(run.output.find("agent library libfragscope.so not found"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("looked next to this fragscope (" + copy + "/bin) in " + copy +
                            "/lib/libfragscope.so, " + copy + "/lib64/libfragscope.so"),
            std::string::npos)
      << run.output;
}

// Another build's agent in the bundle (here: the bundle's own with its version string changed,
// which is all that tells two builds apart) runs, and the run says so.
TEST_F(PackageBundle, AnAgentOfAnotherBuildIsReported) {
  const std::string copy = Copy("mixed");
  const std::string version = Version(copy);
  ASSERT_FALSE(version.empty());
  const std::string agent = copy + "/lib/libfragscope.so";
  const std::string other = fragscope::testing::CopyAgentOfAnotherBuild(agent, version, agent);
  ASSERT_FALSE(other.empty());

  Result run = RunDemo(copy, dir_ + "/mixed.json");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("ran an agent of version '" + other + "' (" + agent +
                            "), but this fragscope is version '" + version + "'"),
            std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace fragscope
