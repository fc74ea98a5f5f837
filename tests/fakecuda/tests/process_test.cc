// Whole programs on the fake: the runtime's driver lookups equal the recorded libcudart 13
// sequence, FAKECUDA_LIVE_DUMP matches what the program holds, nvcc-built and statically
// linked programs run, and FAKECUDA_FAIL_AT / FAKECUDA_NULL act across a process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct Result {
  int status = -1;
  std::string out;
};

// Runs argv with the current environment, FAKECUDA_* cleared and `env` overriding.
Result RunProgram(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env) {
  std::vector<std::string> entries;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    std::string key = entry.substr(0, entry.find('='));
    if (key.rfind("FAKECUDA_", 0) != 0 && !env.count(key)) entries.push_back(entry);
  }
  for (const auto& [k, v] : env) entries.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  Result result;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) result.out.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::vector<std::string> Lines(const std::string& text, bool skip_comments) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  std::string line;
  while (std::getline(stream, line)) {
    if (line.empty() || (skip_comments && line[0] == '#')) continue;
    lines.push_back(line);
  }
  return lines;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempPath(const char* name) {
  std::string path = ::testing::TempDir() + "fakecuda_" + name + "_" + std::to_string(getpid());
  unlink(path.c_str());
  return path;
}

void ExpectLookupsMatchRecording(const std::vector<std::string>& argv) {
  std::string log = TempPath("lookups");
  Result r =
      RunProgram(argv, {{"FAKECUDA_LOOKUP_LOG", log}, {"LD_LIBRARY_PATH", FAKECUDA_LIB_DIR}});
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<std::string> expected = Lines(ReadFile(FAKECUDA_LOOKUPS_TXT), true);
  std::vector<std::string> actual = Lines(ReadFile(log), false);
  ASSERT_GT(expected.size(), 400u);
  EXPECT_EQ(actual, expected);
  unlink(log.c_str());
}

TEST(ProcessTest, SharedRuntimeLooksUpTheDriverLikeLibcudart13) {
  ExpectLookupsMatchRecording({FAKECUDA_PROBE, "live"});
}

TEST(ProcessTest, StaticRuntimeLooksUpTheDriverLikeLibcudart13) {
  ExpectLookupsMatchRecording({FAKECUDA_PROBE_STATIC, "live"});
}

TEST(ProcessTest, LiveDumpListsWhatTheProgramHolds) {
  std::string dump = TempPath("live");
  Result r = RunProgram({FAKECUDA_PROBE, "live"}, {{"FAKECUDA_LIVE_DUMP", dump}});
  ASSERT_EQ(r.status, 0) << r.out;
  std::set<std::string> printed;
  for (const std::string& line : Lines(r.out, false)) printed.insert(line);
  ASSERT_EQ(printed.size(), 3u);
  std::set<std::string> dumped;
  for (const std::string& line : Lines(ReadFile(dump), false)) {
    if (line.rfind("pool_chunk ", 0) != 0) dumped.insert(line);
  }
  EXPECT_EQ(dumped, printed);
  unlink(dump.c_str());
}

TEST(ProcessTest, FailAtMakesTheNthCudaMallocFail) {
  Result r = RunProgram({FAKECUDA_PROBE, "oom"}, {{"FAKECUDA_FAIL_AT", "2"}});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(Lines(r.out, false),
            (std::vector<std::string>{"cudaSuccess", "cudaErrorMemoryAllocation", "cudaSuccess",
                                      "last cudaErrorMemoryAllocation"}));
}

TEST(ProcessTest, CapacityExhaustionIsAnOutOfMemory) {
  // 8M of capacity, 4M of context: two 1 MiB allocations share a page, the third... also fits;
  // so use a context overhead that leaves exactly one page.
  Result r = RunProgram({FAKECUDA_PROBE, "oom"},
                        {{"FAKECUDA_CAPACITY", "8M"}, {"FAKECUDA_CTX_OVERHEAD", "6M"}});
  ASSERT_EQ(r.status, 0);
  // One free page: the first 1 MiB opens a shared page, the second fills it, the third fails.
  EXPECT_EQ(Lines(r.out, false),
            (std::vector<std::string>{"cudaSuccess", "cudaSuccess", "cudaErrorMemoryAllocation",
                                      "last cudaErrorMemoryAllocation"}));
}

TEST(ProcessTest, NullModeRunsWithoutAccounting) {
  Result r =
      RunProgram({FAKECUDA_PROBE, "oom"}, {{"FAKECUDA_NULL", "1"}, {"FAKECUDA_CAPACITY", "1M"}});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(Lines(r.out, false), (std::vector<std::string>{"cudaSuccess", "cudaSuccess",
                                                           "cudaSuccess", "last cudaSuccess"}));
}

TEST(ProcessTest, NvccCompiledProgramRunsOnTheFake) {
  std::string app = FAKECUDA_NVCC_APP;
  if (app.empty()) GTEST_SKIP() << "nvcc not found at configure time";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the uninstrumented nvcc program cannot load a sanitizer-built fake runtime";
#endif
  std::string dump = TempPath("nvcc_live");
  Result r =
      RunProgram({app}, {{"LD_LIBRARY_PATH", FAKECUDA_LIB_DIR}, {"FAKECUDA_LIVE_DUMP", dump}});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "ok\n");
  EXPECT_EQ(ReadFile(dump), "");  // everything freed
  unlink(dump.c_str());
  ExpectLookupsMatchRecording({app});
}

}  // namespace
