// What must hold whatever the program does: same results with and without the agent, no
// deadlock or crash with 16 threads, fork, exec, CUDA calls from static constructors and atexit,
// an unwritable output or a vanished collector; causal sequence numbers; nothing lost silently.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <map>
#include <set>
#include <thread>

#include "fragscope/trace/frame_reader.h"
#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

using InvariantsTest = RuntimeTest;

// The second word of the output line that begins with `first` (a pid the app printed), "" if
// there is none.
std::string SecondWordOfLine(const RunResult& run, const std::string& first) {
  for (const auto& line : Lines(run.out)) {
    if (line.size() > 1 && line[0] == first) return line[1];
  }
  return "";
}

RunOptions Traced(const std::string& path, std::map<std::string, std::string> env = {}) {
  env["FRAGSCOPE_OUTPUT"] = path;
  return RunOptions{true, env};
}

// Replays alloc/free events in seq order; fails if an address is allocated while live or
// freed while not live (what a reused address with a badly ordered seq would look like).
void ExpectCausalOrder(const Trace& trace) {
  std::map<uint64_t, const v1::Frame*> by_seq;
  for (const v1::Frame* f : trace.Events()) {
    ASSERT_TRUE(by_seq.emplace(SeqOf(*f), f).second) << "duplicate seq " << SeqOf(*f);
  }
  std::set<uint64_t> live;
  for (const auto& [seq, f] : by_seq) {
    if (f->has_alloc()) {
      ASSERT_TRUE(live.insert(f->alloc().address()).second) << "allocated while live, seq " << seq;
    } else if (f->has_free() && f->free().result() == 0) {
      ASSERT_EQ(live.erase(f->free().address()), 1u) << "freed while not live, seq " << seq;
    }
  }
}

TEST_P(InvariantsTest, SixteenThreads) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"threads"}, Traced(dir.File("t.fst")));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("failures 0"), std::string::npos);
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.end(), nullptr);
  const uint64_t expected = 16 * 200 * 2;
  EXPECT_EQ(trace.end()->events_recorded(), expected);
  EXPECT_EQ(trace.Events().size() + trace.end()->total_dropped(), expected);
  std::set<uint32_t> tids;
  size_t allocs = 0;
  for (const v1::Frame* f : trace.Events()) {
    if (f->has_alloc()) {
      ++allocs;
      tids.insert(f->alloc().tid());
      EXPECT_EQ(f->alloc().api(), v1::API_cudaMalloc);
    } else {
      ASSERT_TRUE(f->has_free()) << Describe(*f);
      EXPECT_EQ(f->free().api(), v1::API_cudaFree);
      EXPECT_EQ(f->free().result(), 0);
    }
  }
  if (trace.end()->total_dropped() == 0) {
    EXPECT_EQ(allocs, expected / 2);
    EXPECT_EQ(tids.size(), 16u);
    ExpectCausalOrder(trace);
  }
}

TEST_P(InvariantsTest, ErrnoAndCudaErrorStateAreThoseOfTheProgram) {
  TempDir dir;
  RunResult traced =
      RunProgram(AppPath("agent_runtime_app"), {"error_state"}, Traced(dir.File("t.fst")));
  RunResult plain =
      RunProgram(AppPath("agent_runtime_app"), {"error_state"}, RunOptions{false, {}});
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, plain.out);
  EXPECT_NE(traced.out.find("errno 4321 last 2 again 0"), std::string::npos) << traced.out;
  Trace trace = ReadTrace(dir.File("t.fst"));
  std::vector<std::string> events = DescribeEvents(trace);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0], "failed cudaMalloc size=1125899906842624 result=2 dev=0");
  EXPECT_TRUE(trace.Events()[0]->failed().has_mem_info());
}

// The agent links its C++ runtime in and must keep it to itself. Exported from a preloaded
// library, its __gxx_personality_v0, __cxa_* and std::terminate interposed on the program's own
// libstdc++: PyTorch's autograd thread, unwound by pthread_exit while Python finalized, ran our
// personality routine and died in our terminate ("terminate called without an active
// exception"), and a program's std::set_terminate handler would not have been ours to call.
TEST_P(InvariantsTest, TheAgentExportsItsApiAndNoCxxRuntime) {
  void* agent = dlopen(AgentLibrary().c_str(), RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(agent, nullptr) << dlerror();
  // dlsym on a handle searches the library and its dependencies, none of which is libstdc++.
  for (const char* runtime : {"__gxx_personality_v0", "__cxa_throw", "__cxa_begin_catch",
                              "__cxa_rethrow", "_ZSt9terminatev", "_ZSt13set_terminatePFvvE",
                              "_Znwm", "_ZdlPv", "_ZN10__cxxabiv119__terminate_handlerE"}) {
    EXPECT_EQ(dlsym(agent, runtime), nullptr) << runtime << " is exported by the agent";
  }
  for (const char* api : {"cudaMalloc", "cuMemAlloc_v2", "fragscope_mark", "sigaction", "dlsym"}) {
    EXPECT_NE(dlsym(agent, api), nullptr) << api << " is not exported";
  }
  dlclose(agent);
}

// A vfork child shares the parent's memory until it execs and resets its signals there, as
// Python's subprocess module does. The agent keeps the program's handlers in a table behind its
// own dispatcher; written by such a child, that table lost them, and the parent's next signal
// took the default action: a Ctrl-C killed a Python program instead of raising
// KeyboardInterrupt after any subprocess.run().
TEST_P(InvariantsTest, AVforkChildDoesNotTakeTheProgramsSignalHandlers) {
  TempDir dir;
  RunResult run =
      RunProgram(AppPath("agent_runtime_app"), {"vfork_signals"}, Traced(dir.File("t.fst")));
  RunResult plain =
      RunProgram(AppPath("agent_runtime_app"), {"vfork_signals"}, RunOptions{false, {}});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("handled 1, handler is the program's: yes"), std::string::npos)
      << plain.out;
  EXPECT_EQ(run.signal, 0) << "killed by signal " << run.signal;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("handled 1, handler is the program's: yes"), std::string::npos) << run.out;
  Trace trace = ReadTrace(dir.File("t.fst"));
  EXPECT_TRUE(trace.clean) << trace.error;
  EXPECT_EQ(DescribeEvents(trace).size(), 2u);
}

TEST_P(InvariantsTest, ForkedChildStaysSilentByDefault) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"fork"}, Traced(dir.File("t.fst")));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("child_status 0"), std::string::npos);
  EXPECT_EQ(dir.List(), std::vector<std::string>{"t.fst"});
  Trace trace = ReadTrace(dir.File("t.fst"));
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cudaMalloc size=1048576 kind=DEVICE dev=0",
                                       "free cudaFree size=1048576 dev=0",
                                   }));
  ASSERT_NE(trace.end(), nullptr);
  EXPECT_EQ(trace.hello()->pid(), trace.hello()->pid());
}

TEST_P(InvariantsTest, ForkedChildStartsItsOwnStreamWhenFollowed) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"fork"},
                             Traced(dir.File("t.fst"), {{"FRAGSCOPE_FOLLOW_FORK", "1"}}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string child_pid = SecondWordOfLine(run, "child");
  ASSERT_FALSE(child_pid.empty());
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"t.fst", "t.fst." + child_pid}));
  Trace parent = ReadTrace(dir.File("t.fst"));
  Trace child = ReadTrace(dir.File("t.fst." + child_pid));
  ASSERT_NE(parent.hello(), nullptr);
  ASSERT_NE(child.hello(), nullptr);
  EXPECT_EQ(parent.hello()->stream_index(), 0u);
  EXPECT_EQ(child.hello()->stream_index(), 1u);
  EXPECT_EQ(std::to_string(child.hello()->pid()), child_pid);
  EXPECT_EQ(child.hello()->ppid(), parent.hello()->pid());
  // The parent's live 1 MiB buffer is not the child's: only the child's own events.
  EXPECT_EQ(DescribeEvents(child), (std::vector<std::string>{
                                       "alloc cudaMalloc size=2097152 kind=DEVICE dev=0",
                                       "free cudaFree size=2097152 dev=0",
                                   }));
  EXPECT_EQ(DescribeEvents(parent).size(), 2u);
  ASSERT_NE(child.end(), nullptr);
  EXPECT_EQ(child.end()->events_recorded(), 2u);
}

TEST_P(InvariantsTest, FollowedChildWithPidPatternGetsItsOwnFile) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"fork"},
                             Traced(dir.File("t.%p.fst"), {{"FRAGSCOPE_FOLLOW_FORK", "1"}}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string child_pid = SecondWordOfLine(run, "child");
  ASSERT_FALSE(child_pid.empty());
  Trace child = ReadTrace(dir.File("t." + child_pid + ".fst"));
  ASSERT_TRUE(child.clean) << child.error;
  ASSERT_NE(child.hello(), nullptr);
  EXPECT_EQ(child.hello()->stream_index(), 1u);
  EXPECT_EQ(dir.List().size(), 2u);
}

TEST_P(InvariantsTest, ExecdProgramIsTracedByItsOwnPreload) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"exec"}, Traced(dir.File("t.%p.fst")));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string child_pid;
  for (const auto& line : Lines(run.out)) {
    if (line[0] == "exec_child") {
      child_pid = line[1];
      EXPECT_EQ(line[3], "0");
    }
  }
  ASSERT_FALSE(child_pid.empty());
  std::vector<std::string> files = dir.List();
  ASSERT_EQ(files.size(), 2u);
  Trace child = ReadTrace(dir.File("t." + child_pid + ".fst"));
  ASSERT_TRUE(child.clean) << child.error;
  EXPECT_EQ(DescribeEvents(child).size(), 4u);  // the "malloc" scenario
  EXPECT_EQ(child.hello()->argv_size(), 2);
  EXPECT_EQ(child.hello()->argv(1), "malloc");
  for (const std::string& f : files) {
    if (f == "t." + child_pid + ".fst") continue;
    Trace parent = ReadTrace(dir.File(f));
    EXPECT_EQ(DescribeEvents(parent), (std::vector<std::string>{
                                          "alloc cudaMalloc size=1048576 kind=DEVICE dev=0",
                                          "free cudaFree size=1048576 dev=0",
                                      }));
  }
}

// An exec in place ends the image's stream: every event of the first image is in its file,
// which ends with End.exec (no failed exec left its End behind), and the next image writes a
// file of its own, which says which image it is. This failed before the agent interposed exec:
// the first image's file kept what the drain had written by chance (1 of 20 events in one run)
// and had no End, and with "%p" the second image truncated it (same pid).
void ExpectImagesOfExecInPlace(const std::string& first_path, const std::string& second_path) {
  Trace first = ReadTrace(first_path);
  ASSERT_TRUE(first.clean) << first_path << ": " << first.error;
  ASSERT_NE(first.hello(), nullptr);
  EXPECT_EQ(first.hello()->exec_image(), 0u);
  std::vector<std::string> events = DescribeEvents(first);
  ASSERT_EQ(events.size(), 23u);
  EXPECT_EQ(events[20], "alloc cudaMalloc size=3145728 kind=DEVICE dev=0");
  EXPECT_EQ(events[22], "free cudaFree size=5000 dev=0");
  ASSERT_NE(first.end(), nullptr);
  EXPECT_TRUE(first.end()->exec());
  EXPECT_EQ(first.end()->events_recorded(), 23u);
  EXPECT_EQ(first.end()->total_dropped(), 0u);
  int ends = 0;
  for (const v1::Frame& f : first.frames) ends += f.has_end() ? 1 : 0;
  EXPECT_EQ(ends, 1);

  Trace second = ReadTrace(second_path);
  ASSERT_TRUE(second.clean) << second_path << ": " << second.error;
  ASSERT_NE(second.hello(), nullptr);
  EXPECT_EQ(second.hello()->exec_image(), 1u);
  EXPECT_EQ(second.hello()->pid(), first.hello()->pid());
  EXPECT_EQ(second.hello()->argv(1), "malloc");
  EXPECT_EQ(DescribeEvents(second).size(), 4u);
  ASSERT_NE(second.end(), nullptr);
  EXPECT_FALSE(second.end()->exec());
}

TEST_P(InvariantsTest, ExecInPlaceEndsTheStreamAndTheNextImageGetsItsOwnFile) {
  TempDir dir;
  RunResult run =
      RunProgram(AppPath("agent_runtime_app"), {"exec_in_place"}, Traced(dir.File("t.%p.fst")));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("failed_exec -1 2"), std::string::npos)
      << run.out;  // ENOENT, as without us
  const std::string pid = SecondWordOfLine(run, "exec_in_place");
  ASSERT_FALSE(pid.empty()) << run.out;
  EXPECT_EQ(dir.List(),
            (std::vector<std::string>{"t." + pid + ".exec-1.fst", "t." + pid + ".fst"}));
  ExpectImagesOfExecInPlace(dir.File("t." + pid + ".fst"), dir.File("t." + pid + ".exec-1.fst"));
}

TEST_P(InvariantsTest, ExecInPlaceWithAPlainOutputKeepsBothImages) {
  TempDir dir;
  RunResult run =
      RunProgram(AppPath("agent_runtime_app"), {"exec_in_place"}, Traced(dir.File("t.fst")));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const std::string pid = SecondWordOfLine(run, "exec_in_place");
  ASSERT_FALSE(pid.empty()) << run.out;
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"t." + pid + ".exec-1.fst", "t.fst"}));
  ExpectImagesOfExecInPlace(dir.File("t.fst"), dir.File("t." + pid + ".exec-1.fst"));
}

// A followed child that leaves with _exit keeps every event and ends its stream with its exit
// status. Before, _exit skipped the agent's exit steps and the child's ring went with it.
TEST_P(InvariantsTest, FollowedChildLeavingWithUnderscoreExitKeepsItsStream) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"fork_exit"},
                             Traced(dir.File("t.%p.fst"), {{"FRAGSCOPE_FOLLOW_FORK", "1"}}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string child_pid = SecondWordOfLine(run, "child");
  ASSERT_FALSE(child_pid.empty());
  EXPECT_NE(run.out.find("child_status 7"), std::string::npos) << run.out;
  Trace child = ReadTrace(dir.File("t." + child_pid + ".fst"));
  ASSERT_TRUE(child.clean) << child.error;
  EXPECT_EQ(DescribeEvents(child).size(), 6u);
  ASSERT_NE(child.end(), nullptr);
  EXPECT_EQ(child.end()->exit_status(), 7);
  EXPECT_EQ(child.end()->events_recorded(), 6u);
}

// sysv_signal, bsd_signal and sigset, which the agent interposes so that their handlers run
// behind its dispatcher, answer and behave as without it: System V's reset on delivery, X/Open's
// hold and release, the previous dispositions returned.
TEST_P(InvariantsTest, OtherSignalInstallersBehaveAsWithoutTheAgent) {
  TempDir dir;
  RunResult run =
      RunProgram(AppPath("agent_runtime_app"), {"signal_apis"}, Traced(dir.File("t.fst")));
  RunResult plain =
      RunProgram(AppPath("agent_runtime_app"), {"signal_apis"}, RunOptions{false, {}});
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  EXPECT_NE(plain.out.find("sysv caught 1 reset 1"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("released caught 4"), std::string::npos) << plain.out;
  EXPECT_EQ(DescribeEvents(ReadTrace(dir.File("t.fst"))).size(), 2u);
}

TEST_P(InvariantsTest, CudaCallsFromStaticConstructorsAndAtexitAreRecorded) {
  TempDir dir;
  RunOptions traced = Traced(dir.File("t.fst"), {{"RUNTIME_APP_STATIC_CTOR", "1"}});
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"static_ctor_atexit"}, traced);
  RunResult plain = RunProgram(AppPath("agent_runtime_app"), {"static_ctor_atexit"},
                               RunOptions{false, {{"RUNTIME_APP_STATIC_CTOR", "1"}}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // Results are the program's own (addresses may differ between runs).
  auto results = [](const std::string& out) {
    std::string kept;
    for (const auto& line : Lines(out)) {
      if (line[0] == "atexit") kept += line[2] + " " + line[4];
    }
    return kept;
  };
  EXPECT_EQ(results(run.out), results(plain.out));
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.end(), nullptr);
  std::vector<std::string> events = DescribeEvents(trace);
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events[0], "alloc cudaMalloc size=11111 kind=DEVICE dev=0");  // static constructor
  EXPECT_EQ(events[1], "alloc cudaMalloc size=33333 kind=DEVICE dev=0");  // main
  EXPECT_EQ(events[2], "free cudaFree size=33333 dev=0");
  // The atexit handler's calls come after main's, whatever the runtime answered them.
  EXPECT_EQ(events[3].rfind("free cudaFree size=11111", 0), 0u) << events[3];
  // A free the torn-down runtime refused puts its allocation back (the free ships first).
  size_t next = 4;
  if (events[next].find("put_back") != std::string::npos) {
    EXPECT_EQ(events[next].rfind("alloc cudaMalloc size=11111", 0), 0u) << events[next];
    ++next;
  }
  ASSERT_GT(events.size(), next);
  EXPECT_NE(events[next].find("cudaMalloc size=22222"), std::string::npos) << events[next];
}

// CUDA calls from a library destructor that runs after the agent's own are recorded, and the
// stream still ends after them.
TEST_P(InvariantsTest, CallsFromLibraryDestructorsComeBeforeEnd) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_late_app"), {}, Traced(dir.File("t.fst")));
  RunResult plain = RunProgram(AppPath("agent_late_app"), {}, RunOptions{false, {}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  std::vector<std::string> events = DescribeEvents(trace);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0], "alloc cudaMalloc size=7777 kind=DEVICE dev=0");
  EXPECT_EQ(events[1].rfind("free cudaFree size=7777", 0), 0u) << events[1];
  size_t next = 2;
  if (events[next].find("put_back") != std::string::npos) {  // refused by the torn-down runtime
    EXPECT_EQ(events[next].rfind("alloc cudaMalloc size=7777", 0), 0u) << events[next];
    ++next;
  }
  ASSERT_GT(events.size(), next);
  EXPECT_NE(events[next].find("cudaMalloc size=4444"), std::string::npos) << events[next];
  ASSERT_TRUE(trace.frames.back().has_end());
  EXPECT_EQ(trace.end()->events_recorded(), events.size());
}

TEST_P(InvariantsTest, UnwritableOutputWarnsOnceAndTheProgramRunsOn) {
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"malloc"},
                             Traced("/nonexistent-fragscope-dir/sub/t.fst"));
  RunResult plain = RunProgram(AppPath("agent_runtime_app"), {"malloc"}, RunOptions{false, {}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> a, b;
  for (const auto& l : Lines(run.out)) a.push_back(l[0] + " " + l[3]);
  for (const auto& l : Lines(plain.out)) b.push_back(l[0] + " " + l[3]);
  EXPECT_EQ(a, b);
  size_t first = run.err.find("fragscope: cannot write trace file");
  ASSERT_NE(first, std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("fragscope:", first + 1), std::string::npos) << run.err;
}

// A collector listening on a Unix socket receives exactly the stream a file would hold.
TEST_P(InvariantsTest, SocketOutputCarriesTheSameStream) {
  TempDir dir;
  std::string path = dir.File("collector.sock");
  int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  std::vector<std::string> received;
  bool ended = false;
  std::thread collector([&] {
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    absl::StatusOr<FrameReader> reader = FrameReader::FromFd(fd, "socket");
    if (!reader.ok()) return;
    v1::Frame frame;
    while (reader->Next(&frame) == FrameReader::Result::kFrame) {
      if (frame.has_end()) ended = true;
      if (frame.has_alloc() || frame.has_free()) received.push_back(Describe(frame));
    }
  });
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"malloc"},
                             RunOptions{true, {{"FRAGSCOPE_SOCKET", path}}});
  collector.join();
  close(listener);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(ended);
  EXPECT_EQ(received, (std::vector<std::string>{
                          "alloc cudaMalloc size=1048576 kind=DEVICE dev=0",
                          "alloc cudaMalloc size=300 kind=DEVICE dev=0",
                          "free cudaFree size=300 dev=0",
                          "free cudaFree size=1048576 dev=0",
                      }));
}

TEST_P(InvariantsTest, NoCollectorListeningTheProgramRunsOn) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"threads"},
                             RunOptions{true, {{"FRAGSCOPE_SOCKET", dir.File("nobody.sock")}}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("failures 0"), std::string::npos);
  EXPECT_NE(run.err.find("fragscope: cannot connect to"), std::string::npos) << run.err;
}

// The collector goes away mid-stream: the program runs on unaffected (no SIGPIPE, same results).
TEST_P(InvariantsTest, CollectorVanishingMidStreamDoesNotDisturbTheProgram) {
  TempDir dir;
  std::string path = dir.File("collector.sock");
  int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  std::thread collector([&] {
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    char header[16];
    ssize_t got = read(fd, header, sizeof(header));  // the stream started...
    (void)got;
    close(fd);  // ...and the collector is gone
  });
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"burst"},
                             RunOptions{true, {{"FRAGSCOPE_SOCKET", path}}});
  collector.join();
  close(listener);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.signal, 0);
  EXPECT_NE(run.out.find("burst done"), std::string::npos);
  // The agent's lines: the disconnect, said once, then a "reconnected" line for each time its
  // retry found the socket accepting again (this listener still queues connections, and how
  // often the retry comes round depends on the machine's load: not counted), nothing else.
  std::vector<std::string> lines;
  for (size_t at = run.err.find("fragscope:"); at != std::string::npos;
       at = run.err.find("fragscope:", at + 1)) {
    lines.push_back(run.err.substr(at, run.err.find('\n', at) - at));
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i == 0) {
      EXPECT_NE(lines[0].find("events are counted as dropped"), std::string::npos) << run.err;
    } else {
      EXPECT_EQ(lines[i].rfind("fragscope: reconnected to " + path, 0), 0u) << run.err;
    }
  }
}

TEST_P(InvariantsTest, DormantAgentRecordsNothing) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"malloc"},
                             Traced(dir.File("t.fst"), {{"FRAGSCOPE_DORMANT", "1"}}));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(dir.List().empty());
}

// Whether or not the ring overflows, every event is either in the trace or counted as dropped,
// and drops are followed by a re-synchronizing snapshot.
TEST_P(InvariantsTest, EventsAreShippedOrCountedAsDropped) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"burst"},
                             Traced(dir.File("t.fst"), {{"FRAGSCOPE_RING_MB", "1"}}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.end(), nullptr);
  EXPECT_EQ(trace.end()->events_recorded(), 100000u);
  uint64_t dropped_in_frames = 0;
  bool resync_after_drops = true;
  for (size_t i = 0; i < trace.frames.size(); ++i) {
    if (!trace.frames[i].has_drops()) continue;
    dropped_in_frames += trace.frames[i].drops().dropped_events();
    EXPECT_EQ(trace.frames[i].drops().reason(), v1::Drops::REASON_RING_FULL);
    resync_after_drops = resync_after_drops && i + 1 < trace.frames.size() &&
                         trace.frames[i + 1].has_snapshot() &&
                         trace.frames[i + 1].snapshot().reason() == v1::Snapshot::REASON_RESYNC;
  }
  EXPECT_TRUE(resync_after_drops);
  EXPECT_EQ(dropped_in_frames, trace.end()->total_dropped());
  EXPECT_EQ(trace.Events().size() + trace.end()->total_dropped(), 100000u);
}

// Every snapshot is exact at its seq: the allocations it lists are those the events up to that
// seq leave live.
TEST_P(InvariantsTest, PeriodicSnapshotsAreConsistentWithTheEvents) {
  TempDir dir;
  RunResult run = RunProgram(AppPath("agent_runtime_app"), {"threads"},
                             Traced(dir.File("t.fst"), {{"FRAGSCOPE_SNAPSHOT_EVERY", "500"}}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_NE(trace.end(), nullptr);
  ASSERT_EQ(trace.end()->total_dropped(), 0u) << "ring too small for this test";
  std::map<uint64_t, const v1::Frame*> by_seq;
  for (const v1::Frame* f : trace.Events()) by_seq[SeqOf(*f)] = f;
  std::vector<const v1::Snapshot*> snapshots = trace.Snapshots();
  ASSERT_GE(snapshots.size(), 6u);
  for (const v1::Snapshot* s : snapshots) {
    EXPECT_EQ(s->reason(), v1::Snapshot::REASON_PERIODIC);
    std::map<uint64_t, uint64_t> replayed;
    for (const auto& [seq, f] : by_seq) {
      if (seq > s->seq()) break;
      if (f->has_alloc()) replayed[f->alloc().address()] = f->alloc().size();
      if (f->has_free()) replayed.erase(f->free().address());
    }
    std::map<uint64_t, uint64_t> listed;
    for (const v1::LiveAllocation& a : s->allocations()) listed[a.address()] = a.size();
    EXPECT_EQ(listed, replayed) << "snapshot at seq " << s->seq();
  }
}

INSTANTIATE_TEST_SUITE_P(BothRuntimes, InvariantsTest, BothRuntimes(), RuntimeParamName);

}  // namespace
}  // namespace fragscope::agent_test
