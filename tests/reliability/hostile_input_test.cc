// Hostile input: a real trace (from the demo) cut at many points and with bits flipped goes
// through `fragscope report`, which must answer exit 3 with a message, or a partial result with
// a warning, or (a flip that still decodes) a report, and never crash or hang; the frame reader
// returns exactly the whole frames before a cut; crafted frames with huge counts or lengths
// cannot make the reader allocate without bound.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fragscope/trace/frame_limits.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/trace_format.h"
#include "reliability_support.h"

namespace fragscope::reliability_test {
namespace {

namespace fs = std::filesystem;
using agent_test::TempDir;

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A real trace: the demo training loop (which ends in an OOM) under the agent.
std::string DemoTrace(const TempDir& dir) {
  const std::string path = dir.File("demo.fst");
  RunResult run = agent_test::RunProgram(
      DemoBin(), {}, RunOptions{true, {{"FRAGSCOPE_OUTPUT", path}, {"FAKECUDA_CAPACITY", "4G"}}});
  EXPECT_EQ(run.signal, 0) << run.err;
  return agent_test::ReadFile(path);
}

// `fragscope report FILE`: exit 0 (bytes that still decode), or 3 with a "fragscope report:"
// message on stderr (refused, or partial result with a warning); never a signal.
void ExpectReportSurvives(const std::string& file, const std::string& what, bool json) {
  std::vector<std::string> args{"report", file};
  if (json) args.insert(args.end(), {"--format", "json"});
  RunResult r = agent_test::RunProgram(CliBin(), args, RunOptions{false, {}});
  ASSERT_EQ(r.signal, 0) << what << "\n" << r.err;
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << what << " exit " << r.exit_code << "\n"
                                                    << r.err;
  if (r.exit_code == 3) {
    // Only fragscope speaks: libprotobuf's own "[libprotobuf ERROR ...]" line (invalid UTF-8 in
    // a string field) used to come first.
    EXPECT_EQ(r.err.rfind("fragscope report: ", 0), 0u) << what << "\n" << r.err;
    EXPECT_GT(r.err.size(), std::string("fragscope report: ").size() + 10) << what;
  }
  EXPECT_EQ(r.err.find("libprotobuf"), std::string::npos) << what << "\n" << r.err;
}

TEST(ReliabilityHostileInput, TruncatedTracesThroughReportCommand) {
  TempDir dir;
  const std::string trace = DemoTrace(dir);
  ASSERT_GT(trace.size(), 1000u);
  // 60 cut points spread over the file, plus the header's edges.
  std::vector<size_t> cuts{0, 1, 8, 15, 16, 17, 18};
  for (int i = 1; i < 60; ++i) cuts.push_back(trace.size() * i / 60);
  int partial = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const std::string file = dir.File("cut.fst");
    WriteBytes(file, trace.substr(0, cuts[i]));
    ExpectReportSurvives(file, "cut at " + std::to_string(cuts[i]), i % 2 == 1);
    RunResult r = agent_test::RunProgram(CliBin(), {"report", file}, RunOptions{false, {}});
    if (r.err.find("warning:") != std::string::npos && !r.out.empty()) ++partial;
  }
  // Most cuts land inside a frame: a partial report with a warning, not just an error.
  EXPECT_GT(partial, 30);
}

TEST(ReliabilityHostileInput, BitFlippedTracesThroughReportCommand) {
  TempDir dir;
  const std::string trace = DemoTrace(dir);
  ASSERT_GT(trace.size(), 1000u);
  std::mt19937_64 rng(20240610);  // fixed: the same flips every run
  for (int i = 0; i < 80; ++i) {
    std::string flipped = trace;
    // A quarter of the flips in the first 512 bytes, where Hello, DeviceInfo and the first
    // stacks are; the rest anywhere.
    size_t at = i % 4 == 0 ? rng() % 512 : rng() % trace.size();
    int bit = static_cast<int>(rng() % 8);
    flipped[at] = static_cast<char>(flipped[at] ^ (1 << bit));
    const std::string file = dir.File("flip.fst");
    WriteBytes(file, flipped);
    ExpectReportSurvives(file, "bit " + std::to_string(bit) + " of byte " + std::to_string(at),
                         i % 2 == 1);
  }
}

// tests/RELIABILITY.md: "a truncated trace is read up to the last whole frame". For every cut in
// the first 16 KiB and 300 more across the file, the reader returns exactly the frames that end at
// or before the cut, and says kTruncated unless the cut is a frame boundary.
TEST(ReliabilityHostileInput, TruncatedTraceIsReadUpToTheLastWholeFrame) {
  TempDir dir;
  const std::string trace = DemoTrace(dir);
  const std::string file = dir.File("t.fst");
  WriteBytes(file, trace);
  std::vector<uint64_t> boundaries;  // offset just past each frame
  {
    absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(file);
    ASSERT_TRUE(reader.ok()) << reader.status();
    v1::Frame frame;
    while (reader->Next(&frame) == FrameReader::Result::kFrame) {
      // The events of a packed run come from one frame: one boundary for all of them.
      if (boundaries.empty() || boundaries.back() != reader->good_offset()) {
        boundaries.push_back(reader->good_offset());
      }
    }
    ASSERT_EQ(boundaries.size(), reader->frames_read());
    ASSERT_EQ(boundaries.back(), trace.size());
  }
  std::vector<size_t> cuts;
  for (size_t c = 0; c < std::min<size_t>(trace.size(), 16384); ++c) cuts.push_back(c);
  for (int i = 0; i < 300; ++i) cuts.push_back(trace.size() * i / 300);
  for (size_t cut : cuts) {
    ASSERT_EQ(truncate(file.c_str(), 0), 0);
    WriteBytes(file, trace.substr(0, cut));
    absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(file);
    if (cut < kTraceHeaderBytes) {
      EXPECT_FALSE(reader.ok()) << "cut " << cut;
      continue;
    }
    ASSERT_TRUE(reader.ok()) << "cut " << cut << ": " << reader.status();
    uint64_t expected = 0;
    while (expected < boundaries.size() && boundaries[expected] <= cut) ++expected;
    const bool on_boundary =
        cut == kTraceHeaderBytes || (expected > 0 && boundaries[expected - 1] == cut);
    v1::Frame frame;
    FrameReader::Result last;
    while ((last = reader->Next(&frame)) == FrameReader::Result::kFrame) {
    }
    ASSERT_EQ(reader->frames_read(), expected) << "cut " << cut;
    EXPECT_EQ(last, on_boundary ? FrameReader::Result::kEnd : FrameReader::Result::kTruncated)
        << "cut " << cut;
    if (!on_boundary) {
      EXPECT_FALSE(reader->error().empty()) << "cut " << cut;
    }
    EXPECT_EQ(reader->good_offset(), expected == 0 ? kTraceHeaderBytes : boundaries[expected - 1]);
  }
}

std::string Varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}

std::string Header() {
  unsigned char h[kTraceHeaderBytes];
  EncodeTraceHeader(kFormatMajor, kFormatMinor, h);
  return std::string(reinterpret_cast<char*>(h), sizeof(h));
}

// One Frame whose body field `field` (length-delimited) holds `body`, length-prefixed.
std::string FrameWith(int field, const std::string& body) {
  std::string frame = Varint((static_cast<uint64_t>(field) << 3) | 2) + Varint(body.size()) + body;
  return Varint(frame.size()) + frame;
}

// Runs `fragscope report file` in a child and returns its peak RSS in MiB (getrusage of the
// reaped child); the child runs under a 4 GiB address-space limit so a failing reader cannot
// take the build machine's memory with it (it aborts instead, which fails the test too).
struct Outcome {
  long max_rss_mib = 0;
  int exit_code = -1;
  int signal = 0;
};
Outcome ReportPeakRss(const std::string& file) {
  Outcome o;
  pid_t pid = fork();
  if (pid == 0) {
    rlimit limit{size_t{4} << 30, size_t{4} << 30};
    setrlimit(RLIMIT_AS, &limit);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(CliBin().c_str(), CliBin().c_str(), "report", file.c_str(), "--format", "json",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  o.max_rss_mib = usage.ru_maxrss / 1024;
  if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  return o;
}

// A frame length far above kMaxFrameBytes (claims 1 TiB) is refused before anything is
// allocated for it.
TEST(ReliabilityHostileInput, HugeFrameLengthIsRefusedWithoutAllocating) {
  if (UnderSanitizer()) GTEST_SKIP() << "RSS bounds are meaningless under a sanitizer";
  TempDir dir;
  const std::string file = dir.File("huge-length.fst");
  WriteBytes(file, Header() + Varint(uint64_t{1} << 40) + std::string(64, '\0'));
  Outcome o = ReportPeakRss(file);
  EXPECT_EQ(o.signal, 0);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_LT(o.max_rss_mib, 64) << "peak RSS of fragscope report, MiB";
}

// A legal-length frame (under kMaxFrameBytes) packed with the cheapest possible repeated
// entries: 2 bytes of input per LiveAllocation of a Snapshot, 1 byte per return address of a
// Stack. A reader with limits on counts keeps the peak near the frame size.
constexpr size_t kCraftedFrameBytes = 48u << 20;  // under the 64 MiB frame limit
constexpr long kRssLimitMib = 512;                // 10x the frame; the reader holds one frame

Outcome CraftedSnapshotRss(const TempDir& dir) {
  std::string entries;
  entries.reserve(kCraftedFrameBytes);
  while (entries.size() + 2 <= kCraftedFrameBytes) entries.append("\x22\x00", 2);  // field 4, len 0
  const std::string file = dir.File("snapshot-bomb.fst");
  WriteBytes(file, Header() + FrameWith(13, entries));
  return ReportPeakRss(file);
}

Outcome CraftedStackRss(const TempDir& dir) {
  // StackTable{stacks: [Stack{id: 1, pcs: packed [0, 0, ...]}]}
  std::string pcs(kCraftedFrameBytes, '\0');
  std::string stack = "\x08\x01" + std::string("\x12") + Varint(pcs.size()) + pcs;
  std::string table = "\x0a" + Varint(stack.size()) + stack;
  const std::string file = dir.File("stack-bomb.fst");
  WriteBytes(file, Header() + FrameWith(4, table));
  return ReportPeakRss(file);
}

// The 48 MiB Snapshot frame (24 M empty LiveAllocation entries, 2 bytes each) took
// `fragscope report` to a peak RSS of 2551 MiB (53x the input): FrameReader bounded the frame's
// bytes (kMaxFrameBytes, 64 MiB) but protobuf parsing then created one message object per entry.
// Fixed by FrameLimitViolation (collector/trace/frame_limits.h): the frame is refused before it
// is parsed, over the limit of 4 Mi repeated entries per frame.
TEST(ReliabilityHostileInput, CraftedSnapshotCountsCannotBlowUpReaderMemory) {
  if (UnderSanitizer()) GTEST_SKIP() << "RSS bounds are meaningless under a sanitizer";
  TempDir dir;
  Outcome o = CraftedSnapshotRss(dir);
  EXPECT_EQ(o.signal, 0);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_LT(o.max_rss_mib, kRssLimitMib) << "peak RSS of fragscope report, MiB";
}

// A 48 MiB StackTable frame holding one Stack with 48 M one-byte packed pcs reached a peak RSS
// of 823 MiB (17x): each pc became a uint64 in the parsed message. Fixed by the limit of 64 Ki
// return addresses per stack (the agent records at most 64).
TEST(ReliabilityHostileInput, CraftedStackLengthCannotBlowUpReaderMemory) {
  if (UnderSanitizer()) GTEST_SKIP() << "RSS bounds are meaningless under a sanitizer";
  TempDir dir;
  Outcome o = CraftedStackRss(dir);
  EXPECT_EQ(o.signal, 0);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_LT(o.max_rss_mib, kRssLimitMib) << "peak RSS of fragscope report, MiB";
}

// Unknown fields are kept one object each by libprotobuf too: 16 M unknown varint fields
// (3 bytes each) inside a Snapshot.
TEST(ReliabilityHostileInput, CraftedUnknownFieldsCannotBlowUpReaderMemory) {
  if (UnderSanitizer()) GTEST_SKIP() << "RSS bounds are meaningless under a sanitizer";
  TempDir dir;
  std::string fields;
  fields.reserve(kCraftedFrameBytes);
  const std::string one = Varint((99u << 3) | 0) + std::string(1, '\x01');  // field 99 = 1
  while (fields.size() + one.size() <= kCraftedFrameBytes) fields += one;
  const std::string file = dir.File("unknown-bomb.fst");
  WriteBytes(file, Header() + FrameWith(13, fields));
  Outcome o = ReportPeakRss(file);
  EXPECT_EQ(o.signal, 0);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_LT(o.max_rss_mib, kRssLimitMib) << "peak RSS of fragscope report, MiB";
}

// The limit is not a cliff: a frame at it (4 Mi empty entries, the most objects a frame may
// make) is read, within the same memory bound.
TEST(ReliabilityHostileInput, FrameAtTheEntryLimitIsReadWithinTheMemoryBound) {
  if (UnderSanitizer()) GTEST_SKIP() << "RSS bounds are meaningless under a sanitizer";
  TempDir dir;
  std::string entries;
  for (uint64_t i = 0; i < FrameLimits{}.max_entries_per_frame; ++i) entries.append("\x42\x00", 2);
  const std::string file = dir.File("at-limit.fst");
  WriteBytes(file, Header() + FrameWith(13, entries));
  Outcome o = ReportPeakRss(file);
  EXPECT_EQ(o.signal, 0);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_LT(o.max_rss_mib, kRssLimitMib) << "peak RSS of fragscope report, MiB";
}

// Sends `bytes` to the Unix socket `path` and closes; false if it could not.
bool SendToSocket(const std::string& path, const std::string& bytes) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  for (size_t done = 0; ok && done < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  if (fd >= 0) close(fd);
  return ok;
}

// A daemon parses each agent's frames on a thread of the agent's own, and a frame at the entry
// limit costs ~450 MiB to parse: three such streams at once took fragscope-collector to three
// times that. Its decode budget (collector/trace/include/fragscope/trace/decode_budget.h) has
// them take turns, so its peak stays near one frame's parse whatever the number of streams, and
// every frame is still read (none is refused for being big within the limits).
TEST(ReliabilityHostileInput, DaemonParsesFramesAtTheEntryLimitOneAtATime) {
  if (UnderSanitizer()) GTEST_SKIP() << "RSS bounds are meaningless under a sanitizer";
  TempDir dir;
  const std::string socket = dir.File("c.sock"), log = dir.File("daemon.log");
  const pid_t daemon = fork();
  ASSERT_GE(daemon, 0);
  if (daemon == 0) {
    // As ReportPeakRss: a daemon that parses all three at once still fits; a runaway aborts.
    rlimit limit{size_t{4} << 30, size_t{4} << 30};
    setrlimit(RLIMIT_AS, &limit);
    if (freopen(log.c_str(), "w", stderr) == nullptr) _exit(126);
    execl(CollectorBin().c_str(), CollectorBin().c_str(), "--socket", socket.c_str(), "--dir",
          dir.File("out").c_str(), "--no-traces", static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 3000 && !fs::exists(socket); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(socket)) << agent_test::ReadFile(log);
  std::string entries;
  for (uint64_t i = 0; i < FrameLimits{}.max_entries_per_frame; ++i) entries.append("\x42\x00", 2);
  const std::string stream = Header() + FrameWith(13, entries);
  constexpr int kStreams = 3;
  std::vector<std::thread> senders;
  std::vector<char> sent(kStreams, 0);
  for (int i = 0; i < kStreams; ++i) {
    senders.emplace_back([&, i] { sent[i] = SendToSocket(socket, stream); });
  }
  for (std::thread& t : senders) t.join();
  bool all_sent = true;
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_TRUE(sent[i]) << "stream " << i;
    all_sent = all_sent && sent[i];
  }
  // Each stream, its frame applied, ends without an End frame: one line each. (Not waited for
  // when a send failed or the daemon is gone: the checks below say what went wrong.)
  const std::string ended = "DISCONNECTED without a clean end";
  int status = 0;
  rusage usage{};
  bool reaped = false;
  for (int i = 0; all_sent && i < 60000 && Count(agent_test::ReadFile(log), ended) < kStreams;
       ++i) {
    if (wait4(daemon, &status, WNOHANG, &usage) == daemon) {
      reaped = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!reaped) {
    kill(daemon, SIGTERM);
    while (wait4(daemon, &status, 0, &usage) < 0 && errno == EINTR) {
    }
  }
  const std::string daemon_log = agent_test::ReadFile(log);
  ASSERT_TRUE(WIFEXITED(status)) << daemon_log;
  EXPECT_EQ(WEXITSTATUS(status), 0) << daemon_log;
  EXPECT_EQ(Count(daemon_log, ended), kStreams) << daemon_log;
  EXPECT_EQ(daemon_log.find("refused"), std::string::npos) << daemon_log;  // all were read
  // One frame's parse (~450 MiB, what `fragscope report` takes for it) plus the streams' read
  // buffers, well under two frames' worth; side by side the three took 1.4 GB.
  EXPECT_LT(usage.ru_maxrss / 1024, 2 * kRssLimitMib) << "peak RSS of fragscope-collector, MiB";
}

// What the user sees: the frames before the refused one are reported (exit 3 and a warning,
// as for a cut trace), and the warning names the file, the offset, the field, the count and
// the limit. Only fragscope speaks.
TEST(ReliabilityHostileInput, RefusedFrameIsNamedAndWhatCameBeforeIsReported) {
  TempDir dir;
  const std::string trace = DemoTrace(dir);
  std::string entries;
  for (int i = 0; i < 5'000'000; ++i) entries.append("\x22\x00", 2);
  const std::string file = dir.File("real-then-bomb.fst");
  WriteBytes(file, trace + FrameWith(13, entries));
  RunResult r = agent_test::RunProgram(CliBin(), {"report", file}, RunOptions{false, {}});
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.out.find("OOM"), std::string::npos) << "the demo's report, up to the bomb:\n"
                                                  << r.out;
  const std::string expected = "fragscope report: warning: " + file + ": frame at byte " +
                               std::to_string(trace.size()) + " refused: Snapshot.allocations " +
                               "holds 5000000 entries (5000000 repeated entries in the frame), " +
                               "over the limit of 4194304 repeated entries per frame";
  EXPECT_EQ(r.err.rfind(expected, 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("libprotobuf"), std::string::npos) << r.err;
}

// A `string` field that is not UTF-8 (Hello.agent_version stays a string) makes libprotobuf
// refuse the frame and, before fragscope's own message, print "[libprotobuf ERROR ...String
// field 'fragscope.v1.Hello.agent_version' contains invalid UTF-8 data...]". Only our message.
TEST(ReliabilityHostileInput, ProtobufDoesNotPrintItsOwnErrors) {
  TempDir dir;
  const std::string hello = "\x18\x07" + std::string("\x42\x02\xff\xfe");  // pid 7, version
  const std::string file = dir.File("bad-utf8.fst");
  WriteBytes(file, Header() + FrameWith(1, hello));
  for (bool json : {false, true}) {
    std::vector<std::string> args{"report", file};
    if (json) args.insert(args.end(), {"--format", "json"});
    RunResult r = agent_test::RunProgram(CliBin(), args, RunOptions{false, {}});
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_EQ(r.err.rfind("fragscope report: " + file + ": malformed frame at byte 16", 0), 0u)
        << r.err;
    EXPECT_EQ(r.err.find("libprotobuf"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line:\n" << r.err;
  }
}

// Linux paths are bytes. A program started from a directory whose name is not UTF-8 used to
// give a trace whose Hello (exe, argv) and ModuleMap (the program's path) frames libprotobuf
// refused as invalid `string`s, so nothing could be read. These fields are `bytes` now.
TEST(ReliabilityHostileInput, NonUtf8PathsGiveAReadableTraceAndReport) {
  TempDir dir;
  const std::string weird = dir.File("bin-\xff\xfe");
  ASSERT_EQ(mkdir(weird.c_str(), 0755), 0);
  const std::string app = weird + "/app-\xc3\x28";  // an invalid 2-byte sequence too
  fs::copy_file(RelApp("reliability_stress_app"), app);
  ASSERT_EQ(chmod(app.c_str(), 0755), 0);
  const std::string trace = dir.File("weird.fst");
  RunResult run = agent_test::RunProgram(app, {"load", "2", "100", "1"},
                                         RunOptions{true, {{"FRAGSCOPE_OUTPUT", trace}}});
  ASSERT_EQ(run.exit_code, 0) << run.err;

  absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(trace);
  ASSERT_TRUE(reader.ok()) << reader.status();
  v1::Frame frame;
  FrameReader::Result last;
  bool saw_exe = false, saw_argv0 = false, saw_module = false, saw_end = false;
  while ((last = reader->Next(&frame)) == FrameReader::Result::kFrame) {
    if (frame.has_hello()) {
      saw_exe = frame.hello().exe() == app;
      saw_argv0 = frame.hello().argv_size() > 0 && frame.hello().argv(0) == app;
    }
    for (const v1::Module& m : frame.module_map().modules()) saw_module |= m.path() == app;
    saw_end |= frame.has_end();
  }
  EXPECT_EQ(last, FrameReader::Result::kEnd) << reader->error();
  EXPECT_TRUE(saw_exe);
  EXPECT_TRUE(saw_argv0);
  EXPECT_TRUE(saw_module);
  EXPECT_TRUE(saw_end);

  for (const char* format : {"text", "json", "html"}) {
    RunResult r = agent_test::RunProgram(CliBin(), {"report", trace, "--format", format},
                                         RunOptions{false, {}});
    EXPECT_EQ(r.exit_code, 0) << format << "\n" << r.err;
    EXPECT_EQ(r.err, "") << format;
    EXPECT_FALSE(r.out.empty()) << format;
  }
  RunResult dump = agent_test::RunProgram(FRAGSCOPE_REL_DUMP_BIN, {trace}, RunOptions{false, {}});
  EXPECT_EQ(dump.exit_code, 0) << dump.err;
}

}  // namespace
}  // namespace fragscope::reliability_test
