// The fake CUDA 12 runtime (libcudart.so.12): it reaches the driver with the lookups NVIDIA's
// libcudart.so.12 makes (data/cudart12-driver-lookups.txt), and the agent, preloaded into a
// program linked against it, records its cudaMalloc/cudaFree through the agent's
// cudaMalloc@libcudart.so.12 exports, also next to a CUDA 13 runtime in the same process.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>

#include <string>
#include <vector>

#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

std::vector<std::string> NonCommentLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line[0] != '#') lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

// "<what> <address> <size> <result>" lines printed by cu12_app.
struct Call {
  std::string what;
  uint64_t address;
  std::string size;
  std::string result;
};
std::vector<Call> Calls(const std::string& out) {
  std::vector<Call> calls;
  for (const auto& words : Lines(out)) {
    if (words.size() == 4) calls.push_back({words[0], ParseAddress(words[1]), words[2], words[3]});
  }
  return calls;
}

TEST(Cu12Test, LooksUpTheDriverLikeLibcudart12) {
  TempDir dir;
  RunResult run = RunProgram(FRAGSCOPE_CU12_APP, {"malloc"},
                             RunOptions{false, {{"FAKECUDA_LOOKUP_LOG", dir.File("lookups")}}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> expected = NonCommentLines(ReadFile(FRAGSCOPE_CU12_LOOKUPS_TXT));
  ASSERT_GT(expected.size(), 400u);
  // Differs from CUDA 13's, or this test would not tell the two builds apart.
  ASSERT_NE(expected, NonCommentLines(ReadFile(FRAGSCOPE_CU13_LOOKUPS_TXT)));
  EXPECT_EQ(NonCommentLines(ReadFile(dir.File("lookups"))), expected);
  EXPECT_NE(run.out.find("runtime 12090\n"), std::string::npos) << run.out;
}

// `cu12_app malloc` ran under the agent: it succeeded, said `runtime` on its output, and its
// trace holds one event per call, at the addresses the program printed.
void ExpectMallocScenarioTraced(const RunResult& run, const std::string& trace_path,
                                const std::string& runtime) {
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find(runtime), std::string::npos) << run.out;
  Trace trace = ReadTrace(trace_path);
  ASSERT_TRUE(trace.opened) << trace.error;
  EXPECT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.end(), nullptr);
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cudaMalloc size=1048576 kind=DEVICE dev=0",
                                       "alloc cudaMalloc size=300 kind=DEVICE dev=0",
                                       "free cudaFree size=300 dev=0",
                                       "free cudaFree size=1048576 dev=0",
                                   }));
  std::vector<Call> calls = Calls(run.out);
  std::vector<const v1::Frame*> events = trace.Events();
  ASSERT_EQ(calls.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(calls[i].result, "0");
    EXPECT_EQ(AddressOf(*events[i]), calls[i].address) << i;
  }
}

TEST(Cu12Test, AgentRecordsCu12RuntimeCalls) {
  TempDir dir;
  RunResult run = RunProgram(FRAGSCOPE_CU12_APP, {"malloc"},
                             RunOptions{true, {{"FRAGSCOPE_OUTPUT", dir.File("trace.fst")}}});
  ExpectMallocScenarioTraced(run, dir.File("trace.fst"), "runtime 12090\n");
}

// NVIDIA's own CUDA 12 runtime (the nvidia-cuda-runtime-cu12 wheel's libcudart.so.12, not in
// the toolkit this project builds with) on the fake driver: the same events as on the fake CUDA
// 12 runtime. Optional: FRAGSCOPE_TEST_NVIDIA_CUDART12=/path/to/libcudart.so.12.
TEST(Cu12Test, NvidiasCu12RuntimeGivesTheSameTrace) {
  const char* cudart12 = std::getenv("FRAGSCOPE_TEST_NVIDIA_CUDART12");
  if (!cudart12 || !*cudart12) {
    GTEST_SKIP() << "set FRAGSCOPE_TEST_NVIDIA_CUDART12 to NVIDIA's libcudart.so.12 (pip "
                    "download nvidia-cuda-runtime-cu12) to run it";
  }
  TempDir libs, dir;
  ASSERT_EQ(symlink(cudart12, libs.File("libcudart.so.12").c_str()), 0) << cudart12;
  ASSERT_EQ(
      symlink((FakeCudaLibDir() + "/libcuda.so.1").c_str(), libs.File("libcuda.so.1").c_str()), 0);
  RunOptions options{true, {{"FRAGSCOPE_OUTPUT", dir.File("trace.fst")}}};
  options.library_dir = libs.path();
  RunResult run = RunProgram(FRAGSCOPE_CU12_APP, {"malloc"}, options);
  ExpectMallocScenarioTraced(run, dir.File("trace.fst"), "runtime 12");
}

// Both runtimes loaded RTLD_LOCAL (outside the global scope): each plugin's cudaMalloc binds to
// the agent's export of its version, which must still reach that same runtime.
// RTLD_NEXT cannot see a runtime outside the global scope; the agent then finds it among the
// loaded objects by file name (this failed with cudaErrorSymbolNotFound before that).
TEST(Cu12Test, Cu12AndCu13RuntimesInOneProcess) {
  {  // Without the agent the program works, so a failure below is the agent's.
    RunResult bare = RunProgram(FRAGSCOPE_CU12_LOADER,
                                {FRAGSCOPE_CU12_PLUGIN12, "4096", FRAGSCOPE_CU12_PLUGIN13, "8192"},
                                RunOptions{false, {}});
    ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  }
  TempDir dir;
  RunResult run = RunProgram(FRAGSCOPE_CU12_LOADER,
                             {FRAGSCOPE_CU12_PLUGIN12, "4096", FRAGSCOPE_CU12_PLUGIN13, "8192"},
                             RunOptions{true, {{"FRAGSCOPE_OUTPUT", dir.File("trace.fst")}}});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("runtime 12090\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("runtime 13000\n"), std::string::npos) << run.out;
  Trace trace = ReadTrace(dir.File("trace.fst"));
  ASSERT_TRUE(trace.opened) << trace.error;
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cudaMalloc size=4096 kind=DEVICE dev=0",
                                       "free cudaFree size=4096 dev=0",
                                       "alloc cudaMalloc size=8192 kind=DEVICE dev=0",
                                       "free cudaFree size=8192 dev=0",
                                   }));
  std::vector<Call> calls = Calls(run.out);
  std::vector<const v1::Frame*> events = trace.Events();
  ASSERT_EQ(calls.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(AddressOf(*events[i]), calls[i].address) << i;
  }
}

}  // namespace
}  // namespace fragscope::agent_test
