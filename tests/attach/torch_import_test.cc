// `fragscope attach PID` injected into a Python process: with torch loaded and CUDA
// initialized, the agent imports PyTorch's caching-allocator state before its first snapshot
// (interpose/src/python/python_state.h), so PyTorch's segments and blocks are exact from the start,
// while memory from before the attach outside PyTorch stays `untracked`.
//
// The program is tests/attach/apps/torch_state_app.py: CI has python3 but not torch, so a
// stand-in `torch` module in sys.modules describes segments the program really allocated
// through the fake CUDA runtime. RealTorch* runs real PyTorch on the fake device when CMake was
// given -DFRAGSCOPE_TORCH_PYTHON (ctest -L torch) and skips, saying why, otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "attach_test_util.h"
#include "fragscope/model/format_bytes.h"
#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

const std::string kCli = FRAGSCOPE_CLI_BIN;
const std::string kApp = FRAGSCOPE_TORCH_APP;
constexpr uint64_t kMiB = 1 << 20;

RunOptions Cli(const TempDir& dir) { return RunOptions{false, {{"XDG_RUNTIME_DIR", dir.path()}}}; }

// What the program said it holds (its `state {...}` line).
nlohmann::json State(const LiveProcess& app) {
  for (const std::vector<std::string>& words : Lines(app.out())) {
    if (words.size() >= 2 && words[0] == "state") {
      const std::string& out = app.out();
      const size_t at = out.find("state ") + 6;
      return nlohmann::json::parse(out.substr(at, out.find('\n', at) - at));
    }
  }
  return nlohmann::json();
}

nlohmann::json Report(const TempDir& dir) {
  return nlohmann::json::parse(ReadFile(dir.File("report.json")), nullptr, false);
}

// Live allocations of a snapshot by address, and those entered from PyTorch's state.
struct SnapshotView {
  std::map<uint64_t, uint64_t> allocations;
  std::set<uint64_t> from_torch;
  std::map<uint64_t, uint64_t> blocks;  // address -> size
  std::set<uint64_t> pending;
};

SnapshotView View(const v1::Snapshot& s) {
  SnapshotView v;
  for (const auto& a : s.allocations()) {
    v.allocations[a.address()] = a.size();
    if (a.api() == v1::API_torch_snapshot) v.from_torch.insert(a.address());
  }
  for (const auto& b : s.blocks()) {
    v.blocks[b.address()] = b.size();
    if (b.pending_free()) v.pending.insert(b.address());
  }
  return v;
}

// Memory from before the attach outside PyTorch: measured (at least what the program holds
// there) or unknown with a reason, never zero.
void ExpectUntracked(const nlohmann::json& device, uint64_t at_least) {
  if (device["untracked_bytes"].is_null()) {
    EXPECT_FALSE(device["untracked_null_reason"].get<std::string>().empty()) << device.dump();
  } else {
    EXPECT_GE(device["untracked_bytes"].get<uint64_t>(), at_least) << device.dump();
  }
}

// Attaches to `app` (by injection, writing t.fst and a JSON report.json in `dir`), sends it
// each command and waits for the line that ends its answer, then detaches (SIGINT) and keeps
// the attach's stderr in *err. With `started`, the commands wait until the attach's stderr
// holds it too (what the attach does right after the wake). Callers:
// ASSERT_NO_FATAL_FAILURE(AttachDuring(...)).
void AttachDuring(const TempDir& dir, LiveProcess& app,
                  const std::vector<std::pair<std::string, std::string>>& commands,
                  std::string* err, const std::string& started = "") {
  LiveProcess attach(kCli,
                     {"attach", std::to_string(app.pid()), "-o", dir.File("t.fst"), "--format",
                      "json", "--report", dir.File("report.json")},
                     Cli(dir));
  ASSERT_TRUE(WaitForStreaming(AgentSocket(dir, app.pid()))) << attach.err();
  for (int i = 0; i < 3000 && attach.err().find(started) == std::string::npos; ++i) {
    usleep(10000);
  }
  ASSERT_NE(attach.err().find(started), std::string::npos) << attach.err();
  for (const auto& [command, answer] : commands) {
    app.Send(command);
    ASSERT_TRUE(app.WaitForLine(answer, 120)) << command << ": " << app.err();
  }
  kill(attach.pid(), SIGINT);
  const int exit_code = attach.Finish();
  *err = attach.err();
  ASSERT_EQ(exit_code, 0) << *err;
}

TEST(TorchImportTest, PyTorchStateIsExactFromTheFirstSnapshotTheRestUntracked) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(FRAGSCOPE_PYTHON3, {kApp, "fake"}, Cli(dir));
  ASSERT_TRUE(app.WaitForLine("ready")) << app.err();
  const nlohmann::json state = State(app);
  ASSERT_TRUE(state.is_object()) << app.out();

  std::string err;
  // After the attach: a segment the hooks see.
  ASSERT_NO_FATAL_FAILURE(AttachDuring(dir, app, {{"alloc", "allocated"}}, &err));
  EXPECT_NE(err.find("imported PyTorch's caching allocator state: 3 segments, 3 blocks "
                     "(device 0)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("outside PyTorch's caching allocator is reported as untracked"),
            std::string::npos)
      << err;
  app.Send("ping");
  ASSERT_TRUE(app.WaitForLine("pong")) << "the program must run on after the import";

  // The first snapshot: PyTorch's segments (API_torch_snapshot) and its active blocks, the
  // all-free segment marked by a zero-byte block at its start; nothing else from before.
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.hello(), nullptr);
  EXPECT_EQ(trace.hello()->backend(), v1::Hello::BACKEND_INJECTED);
  ASSERT_FALSE(trace.Snapshots().empty());
  const v1::Snapshot& first = *trace.Snapshots().front();
  EXPECT_EQ(first.reason(), v1::Snapshot::REASON_STREAM_START);
  EXPECT_FALSE(first.complete_history());
  const SnapshotView view = View(first);
  const std::vector<uint64_t> segments = state["segments"].get<std::vector<uint64_t>>();
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(view.from_torch, std::set<uint64_t>(segments.begin(), segments.end()));
  EXPECT_EQ(view.allocations,
            (std::map<uint64_t, uint64_t>{
                {segments[0], 2 * kMiB}, {segments[1], 20 * kMiB}, {segments[2], 4 * kMiB}}));
  EXPECT_EQ(view.blocks, (std::map<uint64_t, uint64_t>{{segments[0], 512},
                                                       {segments[0] + 1536, 4096},
                                                       {segments[1], 8 * kMiB},
                                                       {segments[2], 0}}));
  EXPECT_EQ(view.pending, std::set<uint64_t>{segments[0] + 1536});
  // The 8 MiB block's Python frames (torch's memory history) are its site, sent before the
  // snapshot; the others have none.
  EXPECT_NE(err.find("1 block has the Python frames torch's memory history kept as its site"),
            std::string::npos)
      << err;
  std::map<uint64_t, const v1::SymbolizedStack*> defined;
  for (const v1::Frame& f : trace.frames) {
    if (f.has_snapshot()) break;
    if (f.has_symbolized_stack()) defined[f.symbolized_stack().id()] = &f.symbolized_stack();
  }
  for (const v1::LiveBlock& b : first.blocks()) {
    if (b.address() != segments[1]) {
      EXPECT_EQ(defined.count(b.stack_id()), 0u) << b.address();
      continue;
    }
    ASSERT_EQ(defined.count(b.stack_id()), 1u) << "no SymbolizedStack for " << b.stack_id();
    const v1::SymbolizedStack& site = *defined[b.stack_id()];
    ASSERT_EQ(site.frames_size(), 1);
    EXPECT_EQ(site.frames(0).function(), "build_model");
    EXPECT_EQ(site.frames(0).file(), "/app/model.py");
    EXPECT_EQ(site.frames(0).line(), 10u);
  }

  // The report: PyTorch's reserved and allocated, plus the segment allocated after the attach
  // (opaque: all allocated); the memory allocated outside PyTorch before it is untracked.
  const nlohmann::json report = Report(dir);
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report["process"]["history_complete"], false);
  const nlohmann::json& device = report["devices"][0];
  EXPECT_EQ(device["reserved_bytes"].get<uint64_t>(), state["reserved"].get<uint64_t>() + 2 * kMiB)
      << device.dump();
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(),
            state["allocated"].get<uint64_t>() + 2 * kMiB)
      << device.dump();
  EXPECT_EQ(device["pending_free_bytes"].get<uint64_t>(), state["pending"].get<uint64_t>())
      << device.dump();
  ExpectUntracked(device, state["outside_bytes"].get<uint64_t>());
  app.Finish();
}

// After the import PyTorch's blocks are not followed, but its OOM observer (installed by the
// import) brings them up to date at an OOM, before the failure reaches the agent: the
// post-mortem is judged against the blocks of the OOM, not those of the attach.
TEST(TorchImportTest, AnOomIsJudgedAgainstTheBlocksOfTheOom) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(FRAGSCOPE_PYTHON3, {kApp, "fake"}, Cli(dir));
  ASSERT_TRUE(app.WaitForLine("ready")) << app.err();
  std::string err;
  // Segment 2's block freed, segment 3 filled, then a 30 MiB request fails.
  ASSERT_NO_FATAL_FAILURE(AttachDuring(dir, app, {{"oom", "oomed"}}, &err));
  EXPECT_NE(app.out().find("observers 1\n"), std::string::npos) << app.out();
  EXPECT_NE(err.find("PyTorch's blocks are brought up to date at each OOM (its OOM observer, "
                     "before the failure is judged) and at the detach"),
            std::string::npos)
      << err;

  const nlohmann::json report = Report(dir);
  ASSERT_FALSE(report.is_discarded());
  ASSERT_EQ(report["ooms"].size(), 1u) << report.dump();
  const nlohmann::json& oom = report["ooms"][0];
  EXPECT_TRUE(oom["from_sub_allocator"].get<bool>());
  EXPECT_EQ(oom["requested_bytes"].get<uint64_t>(), 30 * kMiB);
  // Segment 1's 512-byte block and segment 3's 4 MiB one; segment 2 all free. At the attach
  // it was 8 MiB + 512 allocated, and 12 MiB the largest free range.
  EXPECT_EQ(oom["allocated_bytes"].get<uint64_t>(), 4 * kMiB + 512) << oom.dump();
  EXPECT_EQ(oom["largest_free_range_bytes"].get<uint64_t>(), 20 * kMiB) << oom.dump();
  EXPECT_EQ(report["devices"][0]["allocated_bytes"].get<uint64_t>(), 4 * kMiB + 512);
  EXPECT_EQ(report["unmatched_events"].get<uint64_t>(), 0u);
  // The failed call is the Python line that made the request (the app's loop calling torch's
  // observers), not the observer's own ctypes stack.
  ASSERT_TRUE(oom["stack"].is_array() && !oom["stack"].empty()) << oom.dump();
  const std::string file = oom["stack"][0].value("file", std::string());
  EXPECT_TRUE(file.ends_with("torch_state_app.py")) << oom["stack"].dump();
  // The OOM came right after its own sync: judged as usual, not against an older sync.
  EXPECT_TRUE(oom["blocks_synced_at_seq"].is_null()) << oom.dump();
  EXPECT_EQ(oom["explanation"].get<std::string>().find("syncs only"), std::string::npos)
      << oom.dump();
  // The stream: the attach's snapshot (naming the import's sync), the OOM's diff and its mark,
  // then the failure.
  std::vector<std::string> marks;
  for (const nlohmann::json& e : oom["recent_events"]) {
    if (e["kind"] == "mark") marks.push_back(e["label"].get<std::string>());
  }
  EXPECT_EQ(marks, (std::vector<std::string>{"PyTorch blocks synced (OOM)"}));
  EXPECT_EQ(report["block_syncs"].get<uint64_t>(), 3u) << "the import, the OOM, the detach";
  // The 4 MiB block was read from a snapshot at the OOM: no allocation site, rather than the
  // observer's own stack (ctypes, libffi) passed off as one.
  for (const nlohmann::json& site : oom["sites_at_failure"]) {
    EXPECT_EQ(site["stack_id"].get<uint64_t>(), 0u) << site.dump();
  }
  app.Finish();
}

// Blocks that change after the import without an OOM are brought up to date at the detach,
// while the stream still runs: the report's last figures are PyTorch's.
TEST(TorchImportTest, TheDetachBringsTheBlocksUpToDate) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(FRAGSCOPE_PYTHON3, {kApp, "fake"}, Cli(dir));
  ASSERT_TRUE(app.WaitForLine("ready")) << app.err();
  std::string err;
  // Segment 2's block freed, segment 3 filled: no driver call.
  ASSERT_NO_FATAL_FAILURE(AttachDuring(dir, app, {{"churn", "churned"}}, &err));
  // Segment 2's block freed; segment 3's zero-byte mark freed and its block allocated.
  EXPECT_NE(err.find("PyTorch's blocks brought up to date at the detach (3 block events)"),
            std::string::npos)
      << err;
  const nlohmann::json report = Report(dir);
  ASSERT_FALSE(report.is_discarded());
  const nlohmann::json& device = report["devices"][0];
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(), 4 * kMiB + 512) << device.dump();
  EXPECT_EQ(device["largest_free_range_bytes"].get<uint64_t>(), 20 * kMiB) << device.dump();
  EXPECT_EQ(report["unmatched_events"].get<uint64_t>(), 0u);
  EXPECT_TRUE(report["ooms"].empty());
  // Known at the import and at the detach's sync only, and the report says so; the final
  // figures are the detach's.
  EXPECT_EQ(report["block_syncs"].get<uint64_t>(), 2u) << report.dump();
  EXPECT_TRUE(report["blocks_known_at_end"].get<bool>());
  // The stream began at the attach's snapshot: peaks before it are not in it.
  EXPECT_TRUE(report["process"]["history_from_seq"].is_number_unsigned()) << report.dump();
  // No driver call during the attach, yet the wake's own free/total sample measures what lies
  // outside PyTorch's memory: at least the 3 MiB the program took outside it.
  ASSERT_FALSE(device["untracked_bytes"].is_null()) << device.dump();
  EXPECT_GE(device["untracked_bytes"].get<uint64_t>(), 3 * kMiB);
  app.Finish();
}

// A process started with the agent dormant and the PyTorch adapter's fallback (no C++
// extension): its snapshot diffs keep PyTorch's blocks in the live table without shipping
// anything. The attach wakes the agent (no injection, no ptrace) and has the diff run at its
// start and at the detach through the control socket, so the blocks are exact there, and the
// report knows they were read at these syncs only.
TEST(TorchImportTest, ADormantAgentsFallbackDiffRunsAtTheAttachAndTheDetach) {
  TempDir dir;
  RunOptions options{true,
                     {{"XDG_RUNTIME_DIR", dir.path()},
                      {"FRAGSCOPE_DORMANT", "1"},
                      {"FRAGSCOPE_ADAPTER_DIR", FRAGSCOPE_ADAPTER_DIR}}};
  LiveProcess app(FRAGSCOPE_PYTHON3, {kApp, "fallback"}, options);
  ASSERT_TRUE(app.WaitForLine("ready")) << app.err();
  std::string err;
  // Segment 2's block freed, segment 3 filled: no driver call, so only a diff can tell.
  ASSERT_NO_FATAL_FAILURE(AttachDuring(dir, app, {{"churn", "churned"}}, &err,
                                       "PyTorch's blocks brought up to date at the attach"));
  // Nothing changed since the diff at the start; then segment 2's block freed and segment 3's
  // block allocated.
  EXPECT_NE(err.find("PyTorch's blocks brought up to date at the attach (0 block events"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("PyTorch's blocks brought up to date at the detach (2 block events"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("injected"), std::string::npos) << "a preloaded agent is woken: " << err;
  const nlohmann::json report = Report(dir);
  ASSERT_FALSE(report.is_discarded());
  const nlohmann::json& device = report["devices"][0];
  // PyTorch's 4 MiB + 512, and the 3 MiB outside it: a preloaded agent saw that allocated.
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(), 7 * kMiB + 512) << device.dump();
  EXPECT_EQ(device["largest_free_range_bytes"].get<uint64_t>(), 20 * kMiB) << device.dump();
  EXPECT_EQ(report["unmatched_events"].get<uint64_t>(), 0u);
  // The dormant diff (named by the wake's snapshot), the attach's and the detach's.
  EXPECT_EQ(report["block_syncs"].get<uint64_t>(), 3u) << report.dump();
  EXPECT_TRUE(report["blocks_known_at_end"].get<bool>());
  app.Finish();
}

// Without the adapter's snapshot diff there is no observer, and the attach says what that
// means.
TEST(TorchImportTest, WithoutTheAdapterNoObserverIsInstalledAndTheAttachSaysSo) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(FRAGSCOPE_PYTHON3, {kApp, "fake"}, Cli(dir));
  ASSERT_TRUE(app.WaitForLine("ready")) << app.err();
  RunOptions options = Cli(dir);
  options.env["FRAGSCOPE_ADAPTER_DIR"] = dir.path();  // no fragscope_torch_diff.py there
  RunResult attach = RunProgram(
      kCli, {"attach", std::to_string(app.pid()), "--duration", "1", "-o", dir.File("t.fst")},
      options);
  ASSERT_EQ(attach.exit_code, 0) << attach.err;
  EXPECT_NE(attach.err.find("no OOM observer (no fragscope_torch_diff.py in the adapter folder '" +
                            dir.path() + "'): an OOM is judged against the blocks of the attach"),
            std::string::npos)
      << attach.err;
  app.Send("oom");
  ASSERT_TRUE(app.WaitForLine("oomed")) << app.err();
  EXPECT_NE(app.out().find("observers 0\n"), std::string::npos) << app.out();
  app.Finish();
}

// PyTorch's expandable segments: pages of VMM handles mapped into a reservation. The import
// reads each page's mapping and handle from the driver, so the state is exact from the attach
// on: the pages of one reservation are one segment with the blocks across them, a page mapped
// after the attach joins it, and a page from before it is given back by its unmap and release.
TEST(TorchImportTest, ExpandableSegmentsAreImportedPageByPage) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(FRAGSCOPE_PYTHON3, {kApp, "expandable"}, Cli(dir));
  ASSERT_TRUE(app.WaitForLine("ready")) << app.err();
  const nlohmann::json state = State(app);
  ASSERT_TRUE(state.is_object()) << app.out();

  std::string err;
  // grow maps the hole between the two runs; shrink unmaps and releases the last page, mapped
  // before the attach.
  ASSERT_NO_FATAL_FAILURE(AttachDuring(dir, app, {{"grow", "grown"}, {"shrink", "shrunk"}}, &err));
  EXPECT_NE(err.find("imported PyTorch's caching allocator state: 0 segments, 1 blocks "
                     "(device 0); 2 expandable segment runs of 4 pages, read from the driver\n"),
            std::string::npos)
      << err;

  // The first snapshot holds the program's own handle values, mapped where it mapped them.
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_FALSE(trace.Snapshots().empty());
  const v1::Snapshot& first = *trace.Snapshots().front();
  std::map<uint64_t, uint64_t> mapped;  // address -> handle
  for (const v1::LiveMapping& m : first.mappings()) {
    EXPECT_EQ(m.size(), 2 * kMiB);
    mapped[m.address()] = m.handle();
  }
  std::map<uint64_t, uint64_t> expected;
  for (const auto& [address, handle] : state["pages"].items()) {
    expected[std::stoull(address)] = handle.get<uint64_t>();
  }
  EXPECT_EQ(mapped, expected);
  EXPECT_EQ(first.handles_size(), 4);
  EXPECT_EQ(first.reservations_size(), 0);  // its extent is nowhere to be read
  const std::vector<uint64_t> runs = state["segments"].get<std::vector<uint64_t>>();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(View(first).blocks,
            (std::map<uint64_t, uint64_t>{{runs[0] + kMiB, 3 * kMiB}, {runs[1], 0}}));

  const nlohmann::json report = Report(dir);
  ASSERT_FALSE(report.is_discarded());
  ASSERT_EQ(report["devices"].size(), 1u) << report.dump();
  const nlohmann::json& device = report["devices"][0];
  // 4 pages, one mapped after the attach, one given back.
  EXPECT_EQ(device["reserved_bytes"].get<uint64_t>(), state["reserved"].get<uint64_t>())
      << device.dump();
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(), state["allocated"].get<uint64_t>())
      << device.dump();
  EXPECT_EQ(device["segments"].get<uint64_t>(), 1u) << device.dump();
  EXPECT_EQ(device["unmapped_handle_bytes"].get<uint64_t>(), 0u) << device.dump();
  // [0, 1) and [4, 8) MiB of the joined pages are free; [8, 10) is unmapped again.
  EXPECT_EQ(device["largest_free_range_bytes"].get<uint64_t>(), 4 * kMiB) << device.dump();
  EXPECT_EQ(report["unmatched_events"].get<uint64_t>(), 0u);
  ExpectUntracked(device, state["outside_bytes"].get<uint64_t>());
  app.Finish();
}

TEST(TorchImportTest, WithoutTorchNothingIsImportedAndTheAttachSaysSo) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(FRAGSCOPE_PYTHON3, {kApp, "plain"}, Cli(dir));
  ASSERT_TRUE(app.WaitForLine("ready")) << app.err();
  const nlohmann::json state = State(app);
  RunResult attach =
      RunProgram(kCli,
                 {"attach", std::to_string(app.pid()), "--duration", "1", "-o", dir.File("t.fst"),
                  "--format", "json", "--report", dir.File("report.json")},
                 Cli(dir));
  ASSERT_EQ(attach.exit_code, 0) << attach.err;
  EXPECT_NE(attach.err.find("PyTorch's state not imported (torch is not imported in this Python "
                            "process); memory allocated before the attach is reported as "
                            "untracked"),
            std::string::npos)
      << attach.err;
  app.Send("ping");
  ASSERT_TRUE(app.WaitForLine("pong"));

  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_FALSE(trace.Snapshots().empty());
  EXPECT_EQ(trace.Snapshots().front()->allocations_size(), 0);
  EXPECT_EQ(trace.Snapshots().front()->blocks_size(), 0);
  const nlohmann::json report = Report(dir);
  ASSERT_FALSE(report.is_discarded());
  const nlohmann::json& devices = report["devices"];
  if (!devices.empty()) {
    EXPECT_EQ(devices[0]["reserved_bytes"].get<uint64_t>(), 0u);
    ExpectUntracked(devices[0],
                    state["reserved"].get<uint64_t>() + state["outside_bytes"].get<uint64_t>());
  }
  app.Finish();
}

// The main thread sleeps in C holding the GIL: the import gives up after --torch-wait, the
// attach goes on without it and says so, and the helper thread that later gets the GIL enters
// nothing (the stream holds no PyTorch segment) and leaves the program working.
TEST(TorchImportTest, AHeldGilBoundsTheWaitAndImportsNothingLate) {
  SKIP_IF_IMPOSSIBLE();
  TempDir dir;
  LiveProcess app(FRAGSCOPE_PYTHON3, {kApp, "fake"}, Cli(dir));
  ASSERT_TRUE(app.WaitForLine("ready")) << app.err();
  app.Send("hold 4");
  ASSERT_TRUE(app.WaitForLine("holding"));
  LiveProcess attach(
      kCli, {"attach", std::to_string(app.pid()), "--torch-wait", "1", "-o", dir.File("t.fst")},
      Cli(dir));
  ASSERT_TRUE(WaitForStreaming(AgentSocket(dir, app.pid()))) << attach.err();
  ASSERT_TRUE(app.WaitForLine("held")) << app.err();
  app.Send("ping");  // the main thread releases the GIL: the abandoned helper takes it, and ends
  ASSERT_TRUE(app.WaitForLine("pong")) << app.err();
  app.Send("ping");
  ASSERT_TRUE(app.WaitForLine("pong")) << app.err();
  kill(attach.pid(), SIGINT);
  ASSERT_EQ(attach.Finish(), 0) << attach.err();
  EXPECT_NE(attach.err().find("PyTorch's state not imported (the Python interpreter's lock (GIL) "
                              "was not free within 1000 ms"),
            std::string::npos)
      << attach.err();
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  for (const v1::Snapshot* s : trace.Snapshots()) {
    EXPECT_TRUE(View(*s).from_torch.empty()) << "entered after the wait was given up";
  }
  app.Finish();
}

// How real PyTorch runs on the fake device, without the agent, with
// PYTORCH_CUDA_ALLOC_CONF=`alloc_conf`.
RunOptions RealTorchOptions(const TempDir& dir, const std::string& alloc_conf) {
  RunOptions options = Cli(dir);
  // torch finds NVIDIA's runtime through its RPATH: the fake one is preloaded in its place
  // (tests/fakecuda/README.md, "Real PyTorch"). The agent is not.
  options.env["LD_PRELOAD"] = FakeCudaLibDir() + "/libcudart.so.13";
  options.env["LD_LIBRARY_PATH"] = FakeCudaLibDir();  // its NVML, for expandable segments
  options.env["FAKECUDA_CAPACITY"] = "768M";
  options.env["PYTHONNOUSERSITE"] = "1";
  if (!alloc_conf.empty()) options.env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf;
  return options;
}

// Real PyTorch 2.x on the fake device, started without the agent, then attached by injection
// for one second.
class RealTorchImportTest : public ::testing::Test {
 protected:
  // Starts the program with PYTORCH_CUDA_ALLOC_CONF=`alloc_conf`, attaches, and reads the
  // report. Skips the test without a python that imports torch. Callers:
  // ASSERT_NO_FATAL_FAILURE(StartAndAttach(...)), then return if IsSkipped().
  // With `commands`, the attach lasts until the program has answered each of them (its last
  // line for a command: the command's name + "n"/"k": `grown`, `shrunk`).
  void StartAndAttach(const std::string& alloc_conf,
                      const std::vector<std::pair<std::string, std::string>>& commands = {}) {
    const std::string python = FRAGSCOPE_TORCH_PYTHON;
    if (python.empty()) {
      GTEST_SKIP() << "no python with torch configured (cmake -DFRAGSCOPE_TORCH_PYTHON=/path/to/"
                      "python; see README.md, PyTorch)";
    }
    if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << python << " is not executable";
    SKIP_IF_IMPOSSIBLE();
    app_ = std::make_unique<LiveProcess>(python, std::vector<std::string>{kApp, "real"},
                                         RealTorchOptions(dir_, alloc_conf));
    if (!app_->WaitForLine("ready", 600)) {
      if (app_->err().find("No module named 'torch'") != std::string::npos) {
        GTEST_SKIP() << python << " cannot import torch";
      }
      FAIL() << app_->err();
    }
    state_ = State(*app_);
    if (commands.empty()) {
      attach_ =
          RunProgram(kCli,
                     {"attach", std::to_string(app_->pid()), "--duration", "1", "-o",
                      dir_.File("t.fst"), "--format", "json", "--report", dir_.File("report.json")},
                     Cli(dir_));
      ASSERT_EQ(attach_.exit_code, 0) << attach_.err;
    } else {
      ASSERT_NO_FATAL_FAILURE(AttachDuring(dir_, *app_, commands, &attach_.err));
    }
    app_->Send("ping");
    ASSERT_TRUE(app_->WaitForLine("pong"));
    report_ = Report(dir_);
    ASSERT_FALSE(report_.is_discarded());
    ASSERT_EQ(report_["devices"].size(), 1u) << report_.dump();
  }
  void TearDown() override {
    if (app_) app_->Finish();
  }

  TempDir dir_;
  std::unique_ptr<LiveProcess> app_;
  nlohmann::json state_;  // what the program said it holds, before the attach
  RunResult attach_;
  nlohmann::json report_;
};

// The figures equal torch.cuda.memory_reserved() and memory_allocated() as the program read
// them before the attach.
TEST_F(RealTorchImportTest, ReservedAndAllocatedEqualTorchs) {
  ASSERT_NO_FATAL_FAILURE(StartAndAttach(""));
  if (IsSkipped()) return;
  EXPECT_NE(attach_.err.find("imported PyTorch's caching allocator state: "), std::string::npos)
      << attach_.err;
  const nlohmann::json& device = report_["devices"][0];
  EXPECT_EQ(device["reserved_bytes"].get<uint64_t>(), state_["reserved"].get<uint64_t>())
      << device.dump() << "\n"
      << attach_.err;
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(), state_["allocated"].get<uint64_t>())
      << device.dump();
  ExpectUntracked(device, state_["outside_bytes"].get<uint64_t>());
  Trace trace = ReadTrace(dir_.File("t.fst"));
  ASSERT_FALSE(trace.Snapshots().empty());
  const std::vector<uint64_t> segments = state_["segments"].get<std::vector<uint64_t>>();
  EXPECT_EQ(View(*trace.Snapshots().front()).from_torch,
            std::set<uint64_t>(segments.begin(), segments.end()));
}

// Expandable segments (VMM reservations with pages mapped into them): the import reads their
// pages from the driver, so the figures equal torch's as well, one segment per pool.
TEST_F(RealTorchImportTest, ExpandableSegmentsAreExactToo) {
  ASSERT_NO_FATAL_FAILURE(StartAndAttach("expandable_segments:True"));
  if (IsSkipped()) return;
  // torch's two pools (small, large): one expandable segment each.
  EXPECT_NE(attach_.err.find("0 segments, "), std::string::npos) << attach_.err;
  EXPECT_NE(attach_.err.find("; 2 expandable segment runs of "), std::string::npos) << attach_.err;
  EXPECT_EQ(attach_.err.find("not imported"), std::string::npos) << attach_.err;
  const nlohmann::json& device = report_["devices"][0];
  EXPECT_EQ(device["device"].get<int>(), 0);
  EXPECT_EQ(device["reserved_bytes"].get<uint64_t>(), state_["reserved"].get<uint64_t>())
      << device.dump();
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(), state_["allocated"].get<uint64_t>())
      << device.dump();
  EXPECT_EQ(device["segments"].get<uint64_t>(), 2u) << device.dump();
  EXPECT_EQ(report_["unmatched_events"].get<uint64_t>(), 0u);
  ExpectUntracked(device, state_["outside_bytes"].get<uint64_t>());
  EXPECT_FALSE(report_["process"]["history_complete"].get<bool>());
}

// The last line `word N` the program printed.
uint64_t LastFigure(const LiveProcess& app, const std::string& word) {
  uint64_t figure = 0;
  for (const std::vector<std::string>& words : Lines(app.out())) {
    if (words.size() == 2 && words[0] == word) figure = std::stoull(words[1]);
  }
  return figure;
}

// After the attach torch maps more pages into its expandable segment (for a tensor the detach's
// sync brings in), then frees every tensor and empties its cache: it unmaps and releases pages
// mapped before the attach too. Reserved follows torch's all the way, and every unmap and
// release matches a page the import entered.
TEST_F(RealTorchImportTest, ExpandableSegmentsGrowAfterTheAttach) {
  ASSERT_NO_FATAL_FAILURE(StartAndAttach("expandable_segments:True", {{"grow", "grown"}}));
  if (IsSkipped()) return;
  const uint64_t grown = LastFigure(*app_, "reserved");
  EXPECT_GT(grown, state_["reserved"].get<uint64_t>());
  const nlohmann::json& device = report_["devices"][0];
  EXPECT_EQ(device["reserved_bytes"].get<uint64_t>(), grown) << device.dump();
  EXPECT_EQ(device["segments"].get<uint64_t>(), 2u) << device.dump();
  // The tensor allocated after the attach, in by the detach's sync.
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(), LastFigure(*app_, "allocated"))
      << device.dump() << "\n"
      << attach_.err;
  EXPECT_EQ(report_["unmatched_events"].get<uint64_t>(), 0u);
}

TEST_F(RealTorchImportTest, ExpandableSegmentsGiveBackPagesFromBeforeTheAttach) {
  ASSERT_NO_FATAL_FAILURE(
      StartAndAttach("expandable_segments:True", {{"grow", "grown"}, {"shrink", "shrunk"}}));
  if (IsSkipped()) return;
  const nlohmann::json& device = report_["devices"][0];
  EXPECT_EQ(device["reserved_bytes"].get<uint64_t>(), LastFigure(*app_, "reserved"))
      << device.dump();
  EXPECT_EQ(device["unmapped_handle_bytes"].get<uint64_t>(), 0u) << device.dump();
  EXPECT_EQ(report_["unmatched_events"].get<uint64_t>(), 0u);
}

// The same without expandable segments: empty_cache gives back cudaMalloc segments from before
// the attach, their blocks die with them, and the detach's sync frees them late: no mismatch.
TEST_F(RealTorchImportTest, SegmentsGivenBackAfterTheAttachLeaveNoMismatch) {
  ASSERT_NO_FATAL_FAILURE(StartAndAttach("", {{"grow", "grown"}, {"shrink", "shrunk"}}));
  if (IsSkipped()) return;
  const nlohmann::json& device = report_["devices"][0];
  EXPECT_EQ(device["reserved_bytes"].get<uint64_t>(), LastFigure(*app_, "reserved"))
      << device.dump();
  EXPECT_EQ(device["allocated_bytes"].get<uint64_t>(), 0u) << device.dump();
  EXPECT_EQ(report_["unmatched_events"].get<uint64_t>(), 0u);
}

// A tensor allocated after the attach is not followed until an OOM: torch's OOM observer then
// brings the blocks up to date, so the post-mortem's allocated is torch's at the OOM.
void ExpectOomJudgedAtTheOom(const nlohmann::json& report, const LiveProcess& app) {
  const nlohmann::json* judged = nullptr;
  for (const nlohmann::json& oom : report["ooms"]) {
    if (oom["from_sub_allocator"].get<bool>()) judged = &oom;
  }
  ASSERT_NE(judged, nullptr) << report["ooms"].dump();
  EXPECT_EQ((*judged)["allocated_bytes"].get<uint64_t>(), LastFigure(app, "allocated"))
      << judged->dump();
  EXPECT_EQ(report["devices"][0]["allocated_bytes"].get<uint64_t>(), LastFigure(app, "allocated"));
}

TEST_F(RealTorchImportTest, AnOomIsJudgedAgainstTheBlocksOfTheOom) {
  ASSERT_NO_FATAL_FAILURE(StartAndAttach("", {{"grow", "grown"}, {"oom", "oomed"}}));
  if (IsSkipped()) return;
  EXPECT_NE(attach_.err.find("brought up to date at each OOM"), std::string::npos) << attach_.err;
  ExpectOomJudgedAtTheOom(report_, *app_);
}

TEST_F(RealTorchImportTest, AnOomWithExpandableSegmentsIsJudgedAgainstTheBlocksOfTheOom) {
  ASSERT_NO_FATAL_FAILURE(
      StartAndAttach("expandable_segments:True", {{"grow", "grown"}, {"oom", "oomed"}}));
  if (IsSkipped()) return;
  ExpectOomJudgedAtTheOom(report_, *app_);
  EXPECT_EQ(report_["unmatched_events"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace fragscope::agent_test
