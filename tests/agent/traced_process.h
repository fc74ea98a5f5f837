// Integration-test helpers: run a test program with (or without) libfragscope.so preloaded on the
// fake CUDA device, and read back and summarize the trace it wrote.
#ifndef FRAGSCOPE_TESTS_AGENT_TRACED_PROCESS_H_
#define FRAGSCOPE_TESTS_AGENT_TRACED_PROCESS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fragscope.pb.h"

namespace fragscope::agent_test {

// Paths baked in by CMake.
std::string AgentLibrary();  // libfragscope.so
std::string AppPath(const std::string& name);
std::string FakeCudaLibDir();
// NVIDIA's libcudart.so.13 beside the fake driver; "" when the toolkit has none.
std::string NvidiaRuntimeDir();

// Which CUDA runtime a program linked against libcudart.so.13 gets: this project's fake one, or
// NVIDIA's own from the toolkit, both over the fake driver.
enum class Runtime { kFake, kNvidia };
const char* RuntimeName(Runtime runtime);  // "FakeRuntime", "NvidiaRuntime" (test names)

// The runtime a RunOptions gets when none is named: kFake, unless a RuntimeTest fixture (below)
// is running its test on NVIDIA's.
Runtime DefaultRuntime();

// A fixture for tests that run on both runtimes (TEST_P, instantiated with
// INSTANTIATE_TEST_SUITE_P(..., BothRuntimes(), RuntimeParamName)): every RunOptions made during
// the test defaults to the test's runtime, and the NVIDIA case is skipped, with the reason, where
// the toolkit has no libcudart.so.13.
class RuntimeTest : public ::testing::TestWithParam<Runtime> {
 protected:
  void SetUp() override;
  void TearDown() override;
};
::testing::internal::ParamGenerator<Runtime> BothRuntimes();
std::string RuntimeParamName(const ::testing::TestParamInfo<Runtime>& info);

// A fresh directory under $TMPDIR (or /tmp), removed with its contents by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> List() const;  // file names, sorted

 private:
  std::string path_;
};

struct RunOptions {
  bool preload = true;                     // LD_PRELOAD the agent
  std::map<std::string, std::string> env;  // extra environment (FRAGSCOPE_*, FAKECUDA_*, ...)
  Runtime runtime = DefaultRuntime();      // which libcudart.so.13 the library path offers
  std::string library_dir = {};            // if set, LD_LIBRARY_PATH instead of `runtime`'s
};

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
};

// What execve(2) gets to run `program args...` by RunOptions' rules: the test's environment
// less FRAGSCOPE_*, FAKECUDA_*, LD_PRELOAD, LD_LIBRARY_PATH and CUDA_VISIBLE_DEVICES, then the
// fake CUDA libraries (or, for Runtime::kNvidia, only the fake driver and NVML beside NVIDIA's
// runtime), the agent when `options.preload`, and `options.env`. Built before fork(),
// so the child only calls execve. The char* arrays point into this object: keep it alive and
// unmoved until execve.
class ChildCommand {
 public:
  ChildCommand(const std::string& program, const std::vector<std::string>& args,
               const RunOptions& options);
  ChildCommand(const ChildCommand&) = delete;
  ChildCommand& operator=(const ChildCommand&) = delete;
  const char* program() const { return argv_[0].c_str(); }
  char* const* argv() { return argv_ptrs_.data(); }
  char* const* envp() { return env_ptrs_.data(); }

 private:
  std::vector<std::string> argv_, env_;
  std::vector<char*> argv_ptrs_, env_ptrs_;
};

// Runs `program args...` to completion with a clean environment (no inherited FRAGSCOPE_*,
// FAKECUDA_* or LD_PRELOAD), the fake CUDA libraries on LD_LIBRARY_PATH, and `options`.
RunResult RunProgram(const std::string& program, const std::vector<std::string>& args,
                     const RunOptions& options);

// A program started with pipes on stdin and stdout (stderr goes to a file), to drive step by
// step: wait for a line it prints, send it a line. Not thread-safe.
class LiveProcess {
 public:
  LiveProcess(const std::string& program, const std::vector<std::string>& args,
              const RunOptions& options);
  ~LiveProcess();  // kills the program if it still runs
  LiveProcess(const LiveProcess&) = delete;
  LiveProcess& operator=(const LiveProcess&) = delete;

  int pid() const { return pid_; }
  // Reads stdout until a line equal to `line`; false at end of output or after `timeout_s`
  // (a safety net against a hung program, not a timing assertion).
  bool WaitForLine(const std::string& line, int timeout_s = 60);
  void Send(const std::string& line);  // writes line + "\n" to stdin
  // Closes stdin and waits for the exit; returns the exit code, -1 if killed by a signal.
  int Finish();
  const std::string& out() const { return out_; }  // stdout read so far
  std::string err() const;                         // stderr so far

 private:
  TempDir io_;
  int pid_ = -1;
  int in_ = -1;
  int out_fd_ = -1;
  std::string out_;
  size_t scanned_ = 0;
  bool finished_ = false;
  int exit_code_ = -1;
};

struct Trace {
  bool opened = false;
  std::string error;   // why it could not be read, if it could not
  bool clean = false;  // the file ended on a frame boundary
  std::vector<v1::Frame> frames;

  const v1::Hello* hello() const;
  const v1::End* end() const;  // the End frame, or nullptr
  // Frames that are events (alloc, free, map, handle, failed, block, mark), in stream order.
  std::vector<const v1::Frame*> Events() const;
  std::vector<const v1::Snapshot*> Snapshots() const;
  // Stack ids defined by StackTable frames.
  std::map<uint64_t, std::vector<uint64_t>> Stacks() const;
};

Trace ReadTrace(const std::string& path);

// One line per event, without the fields that vary from run to run (addresses, seq, time,
// tid, stack, stream and pool handles): e.g. "alloc cudaMalloc size=1048576 kind=DEVICE dev=0".
std::string Describe(const v1::Frame& frame);
std::vector<std::string> DescribeEvents(const Trace& trace);

// Common fields of any event frame.
uint64_t SeqOf(const v1::Frame& frame);
uint64_t StackOf(const v1::Frame& frame);
uint64_t AddressOf(const v1::Frame& frame);  // address (handle for HandleEvent), 0 if none

// The whole content of a file ("" if unreadable).
std::string ReadFile(const std::string& path);

// Lines of the program's stdout split into words.
std::vector<std::vector<std::string>> Lines(const std::string& out);
// Parses "0x7f..." (hex), "1024" (decimal) or "(nil)" as printed by the test programs.
uint64_t ParseAddress(const std::string& text);

}  // namespace fragscope::agent_test

#endif  // FRAGSCOPE_TESTS_AGENT_TRACED_PROCESS_H_
