// `fragscope attach PID` on a CUDA program started WITHOUT the agent: the agent is injected
// (ptrace + dlopen) and libcuda's tracked functions are patched in place. The program
// (tests/agent/apps/attach_app.cc) caches cuMemAlloc/cuMemFree through
// cudaGetDriverEntryPoint before the attach and allocates in phases the test releases one by
// one. Checked against what the program printed and the fake driver's own live table
// (FAKECUDA_LIVE_DUMP): the trace holds exactly the window's events, memory from before the
// attach is unknown (never zero), and after the detach libcuda's bytes are the original ones and
// the program runs on.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "attach_test_util.h"
#include "fragscope/injector/ptrace_injector.h"
#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

using InjectTest = RuntimeTest;

const std::string kCli = FRAGSCOPE_CLI_BIN;
// Tracked driver functions whose bytes are compared before, during and after an attach.
const char* const kWatched[] = {"cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemCreate",
                                "cuLaunchKernel"};

RunOptions Plain(const TempDir& dir) {
  return RunOptions{false,
                    {{"XDG_RUNTIME_DIR", dir.path()}, {"FAKECUDA_LIVE_DUMP", dir.File("truth")}}};
}

RunOptions Cli(const TempDir& dir) { return RunOptions{false, {{"XDG_RUNTIME_DIR", dir.path()}}}; }

std::map<std::string, std::vector<uint8_t>> CodeBytes(int pid) {
  std::map<std::string, std::vector<uint8_t>> bytes;
  for (const char* name : kWatched) {
    std::optional<uint64_t> at = injector::FindSymbolInProcess(pid, "libcuda.so", name);
    if (!at) continue;
    std::vector<uint8_t> b(32);
    if (injector::ReadProcessMemory(pid, *at, b.data(), b.size())) bytes[name] = b;
  }
  return bytes;
}

// The bytes at `address` of the process as the file it maps there has them on disk.
std::vector<uint8_t> FileBytesAt(int pid, uint64_t address, size_t n) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0, end = 0, offset = 0;
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %*s %llx %*s %*s %n", &start, &end, &offset,
                    &path_at) < 3 ||
        address < start || address >= end || path_at <= 0) {
      continue;
    }
    std::ifstream file(line.substr(path_at), std::ios::binary);
    file.seekg(static_cast<std::streamoff>(offset + (address - start)));
    std::vector<uint8_t> bytes(n);
    if (file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(n))) {
      return bytes;
    }
  }
  return {};
}

// The watched functions' bytes in libcuda's file.
std::map<std::string, std::vector<uint8_t>> CodeBytesOnDisk(int pid) {
  std::map<std::string, std::vector<uint8_t>> bytes;
  for (const char* name : kWatched) {
    std::optional<uint64_t> at = injector::FindSymbolInProcess(pid, "libcuda.so", name);
    if (at) bytes[name] = FileBytesAt(pid, *at, 32);
  }
  return bytes;
}

// Allocations the program printed ("cudaMalloc 0x... size 0" / "cuMemAlloc 0x... size 0"),
// by phase: the lines before "ready 1" are phase 1, and so on.
std::vector<LiveSet> PrintedAllocations(const std::string& out) {
  std::vector<LiveSet> phases(1);
  for (const std::vector<std::string>& words : Lines(out)) {
    if (words.size() == 2 && words[0] == "ready") {
      phases.emplace_back();
    } else if (words.size() == 4 && (words[0] == "cudaMalloc" || words[0] == "cuMemAlloc") &&
               words[3] == "0") {
      phases.back()[ParseAddress(words[1])] = std::stoull(words[2]);
    }
  }
  return phases;
}

struct Window {
  LiveSet allocs;            // successful AllocEvents
  std::set<uint64_t> frees;  // successful FreeEvents
  int failures = 0;          // FailedAlloc
  LiveSet live;              // replayed from the snapshot on
};

Window Summarize(const Trace& trace) {
  Window w;
  for (const v1::Frame& f : trace.frames) {
    if (f.has_snapshot()) {
      w.live.clear();
      for (const auto& a : f.snapshot().allocations()) w.live[a.address()] = a.size();
    } else if (f.has_alloc() && f.alloc().result() == 0) {
      w.allocs[f.alloc().address()] = f.alloc().size();
      w.live[f.alloc().address()] = f.alloc().size();
    } else if (f.has_free() && f.free().result() == 0) {
      w.frees.insert(f.free().address());
      w.live.erase(f.free().address());
    } else if (f.has_failed()) {
      ++w.failures;
    }
  }
  return w;
}

// `quiet`: the program made no call between the patch and the wake, so the first snapshot is
// empty (a busy one's lists what it allocated in between: the patched driver already counted).
void ExpectInjectedStream(const Trace& trace, bool quiet = true) {
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.hello(), nullptr);
  EXPECT_TRUE(trace.hello()->attached());
  EXPECT_EQ(trace.hello()->backend(), v1::Hello::BACKEND_INJECTED);
  ASSERT_FALSE(trace.Snapshots().empty());
  const v1::Snapshot* first = trace.Snapshots().front();
  EXPECT_EQ(first->reason(), v1::Snapshot::REASON_STREAM_START);
  EXPECT_FALSE(first->complete_history()) << "memory from before the attach is not known";
  if (quiet) {
    EXPECT_EQ(first->allocations_size(), 0);
  }
  EXPECT_NE(trace.end(), nullptr);
}

// Hooks sit inside libcuda, under the runtime (NVIDIA's is built without frame pointers): every
// stack of the window's allocations still passes through it to the program's own frames and
// ends whole, at the thread's first frame.
void ExpectStacksReachTheProgram(const Trace& trace, const std::string& program) {
  std::map<uint64_t, const v1::Stack*> stacks;
  std::vector<const v1::Module*> modules;
  for (const v1::Frame& f : trace.frames) {
    if (f.has_stacks()) {
      for (const v1::Stack& s : f.stacks().stacks()) stacks[s.id()] = &s;
    }
    if (f.has_module_map()) {
      for (const v1::Module& m : f.module_map().modules()) modules.push_back(&m);
    }
  }
  auto in_program = [&](uint64_t pc) {
    for (const v1::Module* m : modules) {
      if (m->path() == program && pc >= m->load_address() && pc - m->load_address() < m->size()) {
        return true;
      }
    }
    return false;
  };
  int checked = 0;
  for (const v1::Frame& f : trace.frames) {
    if (!f.has_alloc() || f.alloc().result() != 0) continue;
    ASSERT_EQ(stacks.count(f.alloc().stack_id()), 1u) << "allocation without its stack";
    const v1::Stack& stack = *stacks[f.alloc().stack_id()];
    EXPECT_TRUE(std::any_of(stack.pcs().begin(), stack.pcs().end(), in_program))
        << "no frame of " << program << " in a stack of " << stack.pcs_size() << " frames";
    EXPECT_EQ(stack.end(), v1::STACK_END_OUTERMOST) << v1::StackEnd_Name(stack.end());
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_P(InjectTest, WindowIsExactPreAttachMemoryUnknownAndLibcudaRestored) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Plain(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const auto original = CodeBytes(app.pid());
  ASSERT_EQ(original.size(), std::size(kWatched)) << "libcuda's symbols not found in the process";

  LiveProcess attach(kCli,
                     {"attach", std::to_string(app.pid()), "-o", dir.File("t.fst"), "--format",
                      "json", "--report", dir.File("report.json")},
                     Cli(dir));
  ASSERT_TRUE(WaitForStreaming(AgentSocket(dir, app.pid()))) << attach.err();
  for (const auto& [name, bytes] : CodeBytes(app.pid())) {
    EXPECT_NE(bytes, original.at(name)) << name << " is not patched while attached";
  }
  app.Send("go");  // phase 2: through the runtime and the pointers cached before the attach
  ASSERT_TRUE(app.WaitForLine("ready 2"));
  kill(attach.pid(), SIGINT);  // Ctrl-C: detach
  ASSERT_EQ(attach.Finish(), 0) << attach.err();
  EXPECT_NE(attach.err().find("original bytes are restored"), std::string::npos) << attach.err();
  EXPECT_EQ(CodeBytes(app.pid()), original) << "detach must put libcuda's bytes back";
  EXPECT_EQ(CodeBytes(app.pid()), CodeBytesOnDisk(app.pid())) << "as the file has them";

  // The program runs on, correctly, and nothing more reaches the trace.
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 3"));
  app.Send("go");
  ASSERT_EQ(app.Finish(), 0) << app.err();
  const std::vector<LiveSet> printed = PrintedAllocations(app.out());
  ASSERT_EQ(printed.size(), 4u) << app.out();
  ASSERT_EQ(printed[0].size(), 5u);
  ASSERT_EQ(printed[1].size(), 2u);
  ASSERT_EQ(printed[2].size(), 2u) << "allocations after the detach fail";

  Trace trace = ReadTrace(dir.File("t.fst"));
  ExpectInjectedStream(trace);
  const Window w = Summarize(trace);
  // Exactly phase 2: its two allocations (one through the cached cuMemAlloc pointer), the two
  // frees of memory from before the attach (one through the cached cuMemFree), and the OOM.
  EXPECT_EQ(w.allocs, printed[1]);
  const uint64_t first_runtime = printed[0].begin()->first;  // a[0], lowest address
  uint64_t driver_alloc = 0;
  for (const auto& [address, size] : printed[0]) {
    if (size == 3 * (1u << 20) + 512) driver_alloc = address;  // d1
  }
  EXPECT_EQ(w.frees, (std::set<uint64_t>{first_runtime, driver_alloc}));
  EXPECT_EQ(w.failures, 1);
  // The fake driver agrees: what the window allocated is still live at exit, as the trace says.
  const LiveSet truth = GroundTruth(dir.File("truth"));
  for (const auto& [address, size] : w.live) {
    ASSERT_EQ(truth.count(address), 1u) << std::hex << address;
    EXPECT_EQ(truth.at(address), size);
  }

  // Memory from before the attach is untracked: measured from the driver's free/total, or
  // unknown with a reason, never zero.
  nlohmann::json report = nlohmann::json::parse(ReadFile(dir.File("report.json")), nullptr, false);
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report["process"]["history_complete"], false);
  const nlohmann::json& device = report["devices"][0];
  uint64_t before_still_live = 0;  // a[2], a[3]: allocated before, never freed
  for (const auto& [address, size] : printed[0]) {
    if (address != first_runtime && address != driver_alloc && truth.count(address)) {
      before_still_live += size;
    }
  }
  EXPECT_EQ(before_still_live, 7u << 20);
  if (device["untracked_bytes"].is_null()) {
    EXPECT_FALSE(device["untracked_null_reason"].get<std::string>().empty());
  } else {
    EXPECT_GE(device["untracked_bytes"].get<uint64_t>(), before_still_live) << device.dump();
  }
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(), (5u + 7u) << 20);
  ExpectStacksReachTheProgram(trace, AppPath("agent_attach_app"));
}

TEST_P(InjectTest, UntilTheProcessEndsTheTraceIsTheDriverMinusWhatCameBefore) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Plain(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  LiveProcess attach(kCli, {"attach", std::to_string(app.pid()), "-o", dir.File("t.fst")},
                     Cli(dir));
  ASSERT_TRUE(WaitForStreaming(AgentSocket(dir, app.pid()))) << attach.err();
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 2"));
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 3"));
  ASSERT_EQ(app.Finish(), 0) << app.err();
  ASSERT_EQ(attach.Finish(), 0) << attach.err();
  EXPECT_NE(attach.err().find("the process ended"), std::string::npos) << attach.err();

  Trace trace = ReadTrace(dir.File("t.fst"));
  ExpectInjectedStream(trace);
  // The driver's live set at exit, less what was allocated before the attach (which the agent
  // cannot know), is what the trace replays to.
  LiveSet expected = GroundTruth(dir.File("truth"));
  const std::vector<LiveSet> printed = PrintedAllocations(app.out());
  ASSERT_EQ(printed.size(), 4u) << app.out();
  for (const auto& [address, size] : printed[0]) expected.erase(address);
  EXPECT_EQ(Summarize(trace).live, expected);
  EXPECT_EQ(expected.size(), 4u);
}

TEST_P(InjectTest, ASecondAttachPatchesAgainAndForgetsTheFirstWindow) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Plain(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const auto original = CodeBytes(app.pid());
  {
    LiveProcess first(kCli, {"attach", std::to_string(app.pid()), "-o", dir.File("1.fst")},
                      Cli(dir));
    ASSERT_TRUE(WaitForStreaming(AgentSocket(dir, app.pid()))) << first.err();
    app.Send("go");
    ASSERT_TRUE(app.WaitForLine("ready 2"));
    kill(first.pid(), SIGINT);
    ASSERT_EQ(first.Finish(), 0) << first.err();
  }
  EXPECT_EQ(CodeBytes(app.pid()), original);
  LiveProcess second(kCli, {"attach", std::to_string(app.pid()), "-o", dir.File("2.fst")},
                     Cli(dir));
  ASSERT_TRUE(WaitForStreaming(AgentSocket(dir, app.pid()))) << second.err();
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 3"));
  kill(second.pid(), SIGINT);
  ASSERT_EQ(second.Finish(), 0) << second.err();
  EXPECT_EQ(CodeBytes(app.pid()), original);
  app.Send("go");
  ASSERT_EQ(app.Finish(), 0) << app.err();

  const std::vector<LiveSet> printed = PrintedAllocations(app.out());
  ASSERT_EQ(printed.size(), 4u);
  EXPECT_EQ(Summarize(ReadTrace(dir.File("1.fst"))).allocs, printed[1]);
  Trace trace = ReadTrace(dir.File("2.fst"));
  // The first window's allocations are not claimed live by the second stream: between the two
  // the agent saw nothing, so its table started empty again.
  ExpectInjectedStream(trace);
  EXPECT_EQ(Summarize(trace).allocs, printed[2]);
}

// Four threads allocate and free without pause (half through pointers cached before the
// attach) while the attach stops them, patches libcuda, streams for a second and unpatches:
// no call fails, the program runs on, and the stream has no hole (a free it cannot match can
// only be of a block allocated just before the window, one per thread at most).
TEST_P(InjectTest, PatchingUnderBusyThreadsLosesNothingAndBreaksNothing) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(FRAGSCOPE_LOOP_APP, {}, Plain(dir));
  ASSERT_TRUE(app.WaitForLine("running")) << app.err();
  const auto original = CodeBytes(app.pid());
  RunResult attach = RunProgram(
      kCli, {"attach", std::to_string(app.pid()), "--duration", "1", "-o", dir.File("t.fst")},
      Cli(dir));
  ASSERT_EQ(attach.exit_code, 0) << attach.err;
  EXPECT_NE(attach.err.find("original bytes are restored"), std::string::npos) << attach.err;
  EXPECT_EQ(CodeBytes(app.pid()), original);
  usleep(100000);  // the threads keep going on the restored driver
  app.Send("stop");
  ASSERT_EQ(app.Finish(), 0) << app.out() << app.err();
  EXPECT_NE(app.out().find("errors=0"), std::string::npos) << app.out();

  Trace trace = ReadTrace(dir.File("t.fst"));
  ExpectInjectedStream(trace, /*quiet=*/false);
  // Replayed in seq order, as the collector does (threads push to the ring out of order), from
  // the last snapshot on: the first one, or the resync after the ring overflowed on a machine
  // too slow to ship the loop's events (drops are counted, then a snapshot exact at its seq).
  const v1::Snapshot* last = trace.Snapshots().back();
  std::map<uint64_t, uint64_t> live;
  for (const auto& a : last->allocations()) live[a.address()] = a.size();
  std::vector<const v1::Frame*> events;
  int total_allocs = 0;
  for (const v1::Frame* e : trace.Events()) {
    if (e->has_alloc()) ++total_allocs;
    if (SeqOf(*e) > last->seq()) events.push_back(e);
  }
  EXPECT_GT(total_allocs, 100);
  std::stable_sort(events.begin(), events.end(),
                   [](const v1::Frame* a, const v1::Frame* b) { return SeqOf(*a) < SeqOf(*b); });
  const bool from_start = last->reason() == v1::Snapshot::REASON_STREAM_START;
  int allocs = 0, unmatched_frees = 0;
  for (const v1::Frame* event : events) {
    const v1::Frame& f = *event;
    if (f.has_alloc() && f.alloc().result() == 0) {
      ++allocs;
      EXPECT_EQ(live.count(f.alloc().address()), 0u) << "allocated twice without a free";
      live[f.alloc().address()] = f.alloc().size();
    } else if (f.has_free() && f.free().result() == 0) {
      if (live.erase(f.free().address()) == 0) ++unmatched_frees;
    }
  }
  if (from_start) {
    EXPECT_GT(allocs, 100);
  }
  // Only the first free of each thread can be of a block from before the patch.
  EXPECT_LE(unmatched_frees, from_start ? 4 : 0);
  EXPECT_LE(live.size(), 4u);
}

TEST_P(InjectTest, ErrorsNameTheProcessAndTheWayOut) {
  TempDir dir;
  // A process that is gone.
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  RunResult r = RunProgram(kCli, {"attach", std::to_string(gone)}, Cli(dir));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("no process with pid " + std::to_string(gone)), std::string::npos) << r.err;
  // A process without libcuda.
  LiveProcess plain("/bin/sleep", {"60"}, RunOptions{false, {}});
  r = RunProgram(kCli, {"attach", std::to_string(plain.pid())}, Cli(dir));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("pid " + std::to_string(plain.pid()) + " is not a CUDA process"),
            std::string::npos)
      << r.err;
  // A CUDA process another tracer (here: this test, as a debugger would) already holds.
  if (WhyNotPossible().empty()) {
    LiveProcess app(AppPath("agent_attach_app"), {}, Plain(dir));
    ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
    ASSERT_EQ(ptrace(PTRACE_SEIZE, app.pid(), nullptr, nullptr), 0) << strerror(errno);
    r = RunProgram(kCli, {"attach", std::to_string(app.pid())}, Cli(dir));
    ptrace(PTRACE_DETACH, app.pid(), nullptr, nullptr);
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_NE(r.err.find("is already traced by pid " + std::to_string(getpid())), std::string::npos)
        << r.err;
    app.Send("go");
    ASSERT_TRUE(app.WaitForLine("ready 2")) << "the refused attach left the program broken";
  }
}

// ptrace refused by the kernel: a non-dumpable program and an attach without CAP_SYS_PTRACE
// (setpriv drops it; root keeps its uid, so nothing but the capability is missing). The refusal
// names the pid and the ways out, exits 3, and leaves the program running untouched.
TEST_P(InjectTest, PtraceRefusedByTheKernelSaysWhyAndLeavesTheProgramAlone) {
  SKIP_IF_IMPOSSIBLE();
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to drop CAP_SYS_PTRACE with setpriv";
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) not installed";
  TempDir dir;
  RunOptions plain = Plain(dir);
  plain.env["ATTACH_APP_NOT_DUMPABLE"] = "1";
  LiveProcess app(AppPath("agent_attach_app"), {}, plain);
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string pid = std::to_string(app.pid());
  RunResult r = RunProgram(
      "/usr/bin/setpriv",
      {"--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace", "--", kCli, "attach", pid},
      Cli(dir));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("ptrace of pid " + pid + " was refused (EPERM)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("FRAGSCOPE_DORMANT=1"), std::string::npos) << r.err;
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 2")) << "the refused attach left the program broken";
  EXPECT_NE(app.out().find("oom 2"), std::string::npos) << app.out();
}

INSTANTIATE_TEST_SUITE_P(BothRuntimes, InjectTest, BothRuntimes(), RuntimeParamName);

}  // namespace
}  // namespace fragscope::agent_test
