// A dormant agent (FRAGSCOPE_DORMANT=1) woken through its control socket: the stream it sends
// starts with an exact snapshot, follows calls through driver pointers the program cached
// before the wake, stops on `sleep`, and only our own user may ask.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "attach_client.h"
#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

using AttachTest = RuntimeTest;

// A minimal collector: accepts one connection and keeps every byte until the peer closes.
class Sink {
 public:
  explicit Sink(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 1);
    thread_ = std::thread([this] {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 60000) <= 0) return;  // safety net: no agent came
      int c = accept(fd_, nullptr, nullptr);
      char buffer[65536];
      ssize_t n;
      while ((n = read(c, buffer, sizeof(buffer))) > 0) data_.append(buffer, n);
      close(c);
    });
  }
  ~Sink() {
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  const std::string& path() const { return path_; }
  // Waits for the peer to close, then parses what it sent.
  Trace Collect(const std::string& file) {
    thread_.join();
    std::ofstream(file, std::ios::binary) << data_;
    return ReadTrace(file);
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::string data_;
  std::thread thread_;
};

std::multiset<uint64_t> Sizes(const LiveSet& live) {
  std::multiset<uint64_t> sizes;
  for (const auto& [address, size] : live) sizes.insert(size);
  return sizes;
}

size_t CountFailures(const Trace& trace) {
  size_t n = 0;
  for (const v1::Frame* f : trace.Events()) n += f->has_failed() ? 1 : 0;
  return n;
}

TEST_P(AttachTest, WokenStreamIsExactAndFollowsCachedDriverPointers) {
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Dormant(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control)) << app.err();
  EXPECT_EQ(Control(control, "status").substr(0, 10), "ok dormant");
  Sink sink(dir.File("collector.sock"));
  std::string answer = Control(control, "wake " + sink.path());
  ASSERT_EQ(answer.substr(0, 12), "ok streaming") << answer << app.err();
  EXPECT_NE(answer.find("live=4"), std::string::npos) << answer;  // a[0], a[2], a[3], d1
  const std::string status = Control(control, "status");
  EXPECT_EQ(status.substr(0, 12), "ok streaming");
  // The live table's load: the 4 live entries of the default 2^18 slots, none ever refused.
  EXPECT_NE(status.find(" live=4 slots=262144 "), std::string::npos) << status;
  EXPECT_NE(status.find(" refused=0 full_at=0"), std::string::npos) << status;
  EXPECT_EQ(Control(control, "wake " + sink.path()).substr(0, 5), "error");  // already
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 2"));
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 3"));
  ASSERT_EQ(app.Finish(), 0) << app.err();

  Trace trace = sink.Collect(dir.File("woken.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.hello(), nullptr);
  EXPECT_TRUE(trace.hello()->attached());
  ASSERT_FALSE(trace.Snapshots().empty());
  const v1::Snapshot& first = *trace.Snapshots()[0];
  EXPECT_EQ(first.reason(), v1::Snapshot::REASON_STREAM_START);
  EXPECT_TRUE(first.complete_history());
  EXPECT_EQ(first.allocations_size(), 4);
  for (const v1::Frame* f : trace.Events()) {
    EXPECT_GT(SeqOf(*f), first.seq()) << "an event the snapshot already holds: " << Describe(*f);
  }
  std::vector<std::string> events = DescribeEvents(trace);
  auto has = [&](const std::string& line) {
    return std::find(events.begin(), events.end(), line) != events.end();
  };
  // Calls through the pointers cached before the wake are in the stream.
  EXPECT_TRUE(has("alloc cuMemAlloc_v2 size=7340032 kind=DEVICE dev=0"))
      << ::testing::PrintToString(events);
  EXPECT_TRUE(has("free cuMemFree_v2 size=3146240 dev=0")) << ::testing::PrintToString(events);
  EXPECT_TRUE(has("alloc cuMemAlloc_v2 size=13631488 kind=DEVICE dev=0"));
  EXPECT_EQ(CountFailures(trace), 1u);
  ASSERT_NE(trace.end(), nullptr);
  const LiveSet truth = GroundTruth(dir.File("truth"));
  EXPECT_EQ(Replay(trace), truth);

  // The same program with the agent streaming from the start ends in the same state.
  TempDir full_dir;
  RunOptions full{true,
                  {{"FRAGSCOPE_OUTPUT", full_dir.File("full.fst")},
                   {"FAKECUDA_LIVE_DUMP", full_dir.File("truth")}}};
  LiveProcess full_app(AppPath("agent_attach_app"), {}, full);
  for (int phase = 1; phase <= 3; ++phase) {
    ASSERT_TRUE(full_app.WaitForLine("ready " + std::to_string(phase)));
    if (phase < 3) full_app.Send("go");
  }
  ASSERT_EQ(full_app.Finish(), 0) << full_app.err();
  Trace full_trace = ReadTrace(full_dir.File("full.fst"));
  ASSERT_TRUE(full_trace.clean) << full_trace.error;
  EXPECT_EQ(Sizes(Replay(full_trace)), Sizes(Replay(trace)));
  EXPECT_EQ(CountFailures(full_trace), CountFailures(trace));
}

TEST_P(AttachTest, SleepEndsTheStreamAndAWakeAfterItStartsExactAgain) {
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Dormant(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control)) << app.err();
  EXPECT_EQ(Control(control, "sleep").substr(0, 5), "error");  // not attached
  LiveSet at_detach;
  {
    Sink sink(dir.File("c1.sock"));
    ASSERT_EQ(Control(control, "wake " + sink.path()).substr(0, 12), "ok streaming");
    app.Send("go");
    ASSERT_TRUE(app.WaitForLine("ready 2"));
    EXPECT_EQ(Control(control, "sleep").substr(0, 10), "ok dormant");
    Trace trace = sink.Collect(dir.File("first.fst"));  // returns: the agent closed the stream
    ASSERT_TRUE(trace.clean) << trace.error;
    ASSERT_NE(trace.end(), nullptr);
    at_detach = Replay(trace);
    for (const auto& [address, size] : at_detach) {
      EXPECT_NE(size, 11u << 20) << "a phase-3 allocation in a stream that ended before it";
    }
    EXPECT_EQ(at_detach.size(), 4u);  // a[2], a[3], 5 MiB, 7 MiB
  }
  app.Send("go");  // phase 3, dormant again
  ASSERT_TRUE(app.WaitForLine("ready 3"));
  EXPECT_EQ(Control(control, "status").substr(0, 10), "ok dormant");
  Sink sink(dir.File("c2.sock"));
  ASSERT_EQ(Control(control, "wake " + sink.path()).substr(0, 12), "ok streaming");
  ASSERT_EQ(app.Finish(), 0) << app.err();
  Trace second = sink.Collect(dir.File("second.fst"));
  ASSERT_TRUE(second.clean) << second.error;
  // What happened while dormant is in the second wake's snapshot.
  EXPECT_EQ(Replay(second), GroundTruth(dir.File("truth")));
  EXPECT_EQ(Replay(second).size(), at_detach.size() + 2);
}

// A sub-allocator read by snapshot diffs while the agent is dormant: its blocks are in the live
// table, its sync marks are not shipped. The woken stream's snapshot names the last sync, so the
// collector knows these blocks are a sync's, not followed (proto: Snapshot.last_blocks_synced_seq).
// Runs agent_attach_app dormant with `options`, wakes it after phase 1, lets it finish and
// returns the stream it sent. Callers: ASSERT_NO_FATAL_FAILURE.
void WokenAfterPhaseOne(const TempDir& dir, const RunOptions& options, Trace* trace) {
  LiveProcess app(AppPath("agent_attach_app"), {}, options);
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control)) << app.err();
  Sink sink(dir.File("collector.sock"));
  ASSERT_EQ(Control(control, "wake " + sink.path()).substr(0, 12), "ok streaming") << app.err();
  for (int phase = 2; phase <= 3; ++phase) {
    app.Send("go");
    ASSERT_TRUE(app.WaitForLine("ready " + std::to_string(phase)));
  }
  ASSERT_EQ(app.Finish(), 0) << app.err();
  *trace = sink.Collect(dir.File("woken.fst"));
  ASSERT_TRUE(trace->clean) << trace->error;
  ASSERT_FALSE(trace->Snapshots().empty());
}

// Dormant allocations live in per-thread logs until folded (allocation_log.h). Threads that
// free their own newest allocations (cancelled in the log), free each other's (a release that
// misses the table folds the logs first) and exit before the wake (their logs are folded and
// given back): the woken stream still ends exactly where the fake device does. The same with
// the logs off, so both paths stay exact.
TEST_P(AttachTest, ThreadsFreeingEachOthersDormantAllocationsWakeExact) {
  for (const char* logs : {"1", "0"}) {
    SCOPED_TRACE(std::string("FRAGSCOPE_DORMANT_LOGS=") + logs);
    TempDir dir;
    RunOptions options = Dormant(dir);
    options.env["ATTACH_APP_THREADS"] = "4";
    options.env["FRAGSCOPE_DORMANT_LOGS"] = logs;
    Trace trace;
    ASSERT_NO_FATAL_FAILURE(WokenAfterPhaseOne(dir, options, &trace));
    const LiveSet truth = GroundTruth(dir.File("truth"));
    EXPECT_EQ(Replay(trace), truth);
    // Per thread: 40 allocated, 14 freed at once, 13 of the 26 kept freed by another thread.
    size_t thread_blocks = 0;
    for (const auto& [address, size] : truth) thread_blocks += size < (size_t{1} << 20) ? 1 : 0;
    EXPECT_EQ(thread_blocks, 4u * 13u);
    EXPECT_EQ(trace.Snapshots()[0]->allocations_size(), 4 + 4 * 13);  // with a[0], a[2], a[3], d1
  }
}

// A dormant release takes its allocation out of the thread's log before the real call (as it
// must: once freed, the address may be reused at once), so a release that then fails has to put
// it back. Here cudaFree fails (a sticky launch error, injected) once for the log's newest entry
// and once for an older one: the woken snapshot still holds the allocation, and the stream ends
// where the fake device does.
TEST_P(AttachTest, ADormantReleaseThatFailsKeepsItsAllocation) {
  constexpr uint64_t kMiB = 1 << 20;
  for (bool newest : {true, false}) {
    SCOPED_TRACE(newest ? "the newest entry's release fails" : "an older entry's release fails");
    TempDir dir;
    RunOptions options = Dormant(dir);
    options.env["FAKECUDA_FAIL_CALLS"] = "cuMemFree:1";
    if (newest) options.env["ATTACH_APP_FAILED_FREE"] = "1";  // else a[1]'s release fails
    Trace trace;
    ASSERT_NO_FATAL_FAILURE(WokenAfterPhaseOne(dir, options, &trace));
    const LiveSet truth = GroundTruth(dir.File("truth"));
    EXPECT_EQ(Replay(trace), truth);
    std::multiset<uint64_t> snapshot_sizes;
    for (const auto& a : trace.Snapshots()[0]->allocations()) snapshot_sizes.insert(a.size());
    // a[0], a[2], a[3], d1 and the allocation whose release failed.
    const uint64_t kept = newest ? kMiB / 2 + 4096 : 2 * kMiB;
    EXPECT_EQ(snapshot_sizes,
              (std::multiset<uint64_t>{kMiB, 3 * kMiB, 4 * kMiB, 3 * kMiB + 512, kept}));
  }
}

TEST_P(AttachTest, TheWokenSnapshotNamesTheSyncItsBlocksCameFrom) {
  TempDir dir;
  RunOptions options = Dormant(dir);
  options.env["ATTACH_APP_SYNCED_BLOCKS"] = "1";
  Trace trace;
  ASSERT_NO_FATAL_FAILURE(WokenAfterPhaseOne(dir, options, &trace));
  const v1::Snapshot& first = *trace.Snapshots()[0];
  ASSERT_EQ(first.blocks_size(), 1);
  EXPECT_EQ(first.blocks(0).size(), 1u << 20);
  // The site set while dormant: the snapshot names it, and its SymbolizedStack comes first.
  const uint64_t site = first.blocks(0).stack_id();
  bool defined_before = false;
  for (const v1::Frame& f : trace.frames) {
    if (f.has_snapshot()) break;
    if (f.has_symbolized_stack() && f.symbolized_stack().id() == site) {
      defined_before = true;
      ASSERT_EQ(f.symbolized_stack().frames_size(), 1);
      EXPECT_EQ(f.symbolized_stack().frames(0).function(), "load_weights");
    }
  }
  EXPECT_TRUE(defined_before) << "stack " << site;
  // The sync came after the block and the phase-1 allocations, before the wake.
  EXPECT_GT(first.last_blocks_synced_seq(), 0u);
  EXPECT_LE(first.last_blocks_synced_seq(), first.seq());
  for (const v1::Frame* f : trace.Events()) {
    EXPECT_FALSE(f->has_mark()) << "a dormant mark was shipped: " << Describe(*f);
  }

  // Without a sync the snapshot says the blocks (none here) are followed.
  TempDir plain_dir;
  Trace plain;
  ASSERT_NO_FATAL_FAILURE(WokenAfterPhaseOne(plain_dir, Dormant(plain_dir), &plain));
  EXPECT_EQ(plain.Snapshots()[0]->last_blocks_synced_seq(), 0u);
}

// A dormant agent does not ask the driver for the current device at each allocation; a wake
// reads the device from each allocation instead. Allocations on device 1 made while dormant
// must come out on device 1 in the snapshot, in the free of one of them (made while device 0
// is current), and again after a sleep and a second wake.
TEST_P(AttachTest, DevicesOfDormantAllocationsAreReadAtTheWake) {
  TempDir dir;
  RunOptions options = Dormant(dir);
  options.env["FAKECUDA_DEVICES"] = "2";
  options.env["ATTACH_APP_SECOND_DEVICE"] = "1";
  LiveProcess app(AppPath("agent_attach_app"), {}, options);
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control)) << app.err();
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  {
    Sink sink(dir.File("c1.sock"));
    std::string answer = Control(control, "wake " + sink.path());
    ASSERT_EQ(answer.substr(0, 12), "ok streaming") << answer << app.err();
    EXPECT_NE(answer.find("live=7"), std::string::npos) << answer;
    app.Send("go");
    ASSERT_TRUE(app.WaitForLine("ready 2"));
    EXPECT_EQ(Control(control, "sleep").substr(0, 10), "ok dormant");
    Trace trace = sink.Collect(dir.File("first.fst"));
    ASSERT_TRUE(trace.clean) << trace.error;
    ASSERT_FALSE(trace.Snapshots().empty());
    std::map<uint64_t, int> device_by_size;
    for (const auto& a : trace.Snapshots()[0]->allocations()) device_by_size[a.size()] = a.device();
    EXPECT_EQ(device_by_size, (std::map<uint64_t, int>{{1 * kMiB, 0},
                                                       {3 * kMiB, 0},
                                                       {4 * kMiB, 0},
                                                       {3 * kMiB + 512, 0},
                                                       {2 * kMiB + 4096, 1},
                                                       {6 * kMiB, 1},
                                                       {3 * kMiB / 2, 1}}));
    // The stream-ordered one carries device 1's default pool, as the program printed it.
    std::string printed_pool;
    for (const std::vector<std::string>& words : Lines(app.out())) {
      if (words.size() == 6 && words[0] == "cudaMallocAsync" && words[4] == "pool") {
        printed_pool = words[5];
      }
    }
    ASSERT_FALSE(printed_pool.empty()) << app.out();
    uint64_t snapshot_pool = 0;
    for (const auto& a : trace.Snapshots()[0]->allocations()) {
      if (a.size() == 3 * kMiB / 2) snapshot_pool = a.pool();
    }
    EXPECT_EQ(snapshot_pool, ParseAddress(printed_pool));
    EXPECT_NE(snapshot_pool, 0u);
    std::vector<std::string> events = DescribeEvents(trace);
    EXPECT_NE(std::find(events.begin(), events.end(), "free cudaFree size=2101248 dev=1"),
              events.end())
        << ::testing::PrintToString(events);
    // The devices the snapshot names are described in the stream.
    std::set<int> described;
    for (const v1::Frame& f : trace.frames) {
      if (f.has_device()) described.insert(f.device().ordinal());
    }
    EXPECT_EQ(described, (std::set<int>{0, 1}));
  }
  app.Send("go");  // phase 3, dormant again: 9 MiB on device 1
  ASSERT_TRUE(app.WaitForLine("ready 3"));
  Sink sink(dir.File("c2.sock"));
  ASSERT_EQ(Control(control, "wake " + sink.path()).substr(0, 12), "ok streaming");
  ASSERT_EQ(app.Finish(), 0) << app.err();
  Trace second = sink.Collect(dir.File("second.fst"));
  ASSERT_TRUE(second.clean) << second.error;
  const LiveAllocations truth = GroundTruthAllocations(dir.File("truth"));
  EXPECT_EQ(ReplayAllocations(second), truth);
  EXPECT_EQ(
      std::count_if(truth.begin(), truth.end(), [](const auto& e) { return e.second.device == 1; }),
      3);  // 6 MiB, 1.5 MiB (stream-ordered) and 9 MiB
}

TEST_P(AttachTest, UnknownCommandsAreAnswered) {
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Dormant(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control));
  EXPECT_EQ(Control(control, "dance").substr(0, 21), "error unknown command");
  EXPECT_EQ(Control(control, "wake relative.sock").substr(0, 21), "error unknown command");
  std::string answer = Control(control, "wake " + dir.File("nobody-listens.sock"));
  EXPECT_EQ(answer.rfind("error the agent cannot connect to", 0), 0u) << answer;
  EXPECT_EQ(Control(control, "status").substr(0, 10), "ok dormant");
  struct stat st;
  ASSERT_EQ(stat((dir.path() + "/fragscope").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(app.Finish(), 0) << app.err();
  EXPECT_NE(access(control.c_str(), F_OK), 0) << "the socket outlived the process";
}

TEST_P(AttachTest, AnotherUserIsRefusedEvenWhenFileModesLetItIn) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root to run a peer under another uid (setuid(65534) in a child)";
  }
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Dormant(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control));
  // Open the way on purpose, so that only SO_PEERCRED stands between.
  ASSERT_EQ(chmod(dir.path().c_str(), 0711), 0);
  ASSERT_EQ(chmod((dir.path() + "/fragscope").c_str(), 0711), 0);
  ASSERT_EQ(chmod(control.c_str(), 0666), 0);
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    std::string answer = Control(control, "status");
    _exit(answer.rfind("error refused", 0) == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: could not change uid, 1: not refused";
  EXPECT_EQ(Control(control, "status").substr(0, 10), "ok dormant");  // we still may
  ASSERT_EQ(app.Finish(), 0) << app.err();
}

INSTANTIATE_TEST_SUITE_P(BothRuntimes, AttachTest, BothRuntimes(), RuntimeParamName);

}  // namespace
}  // namespace fragscope::agent_test
