// The agent preloaded into programs using the CUDA runtime: linked shared (runtime symbols
// interposed, the runtime's own driver calls folded into one event), linked statically (driver
// events only), and driver entry points obtained through cudaGetDriverEntryPoint(ByVersion).
// Every test runs twice: on this project's fake runtime and on NVIDIA's own libcudart.so.13
// from the toolkit, both over the fake driver; the traces must be the same.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

class RuntimeRoutesTest : public RuntimeTest {
 protected:
  Trace RunApp(const std::string& app, std::vector<std::string> args,
               std::map<std::string, std::string> env = {}) {
    env["FRAGSCOPE_OUTPUT"] = dir_.File("trace.fst");
    run_ = RunProgram(AppPath(app), args, RunOptions{true, env, GetParam()});
    EXPECT_EQ(run_.exit_code, 0) << run_.err;
    Trace trace = ReadTrace(dir_.File("trace.fst"));
    EXPECT_TRUE(trace.opened) << trace.error;
    EXPECT_TRUE(trace.clean) << trace.error;
    EXPECT_NE(trace.end(), nullptr);
    return trace;
  }
  // Addresses printed as "<what> <address> <size> <result>" for lines whose <what> is in `whats`
  // (all such lines if empty), skipping null pointers.
  std::vector<uint64_t> Printed() const {
    std::vector<uint64_t> addresses;
    for (const auto& line : Lines(run_.out)) {
      if (line.size() == 4 && line[1] != "(nil)" && line[1].rfind("0x", 0) == 0) {
        addresses.push_back(ParseAddress(line[1]));
      }
    }
    return addresses;
  }
  uint64_t Value(const std::string& key) const {
    for (const auto& line : Lines(run_.out)) {
      if (line.size() >= 2 && line[0] == key) return ParseAddress(line[1]);
    }
    return ~0ull;
  }

  TempDir dir_;
  RunResult run_;
};

// One event per runtime call, named after it, with no event for the driver call it makes.
TEST_P(RuntimeRoutesTest, SharedRuntimeOneEventPerCall) {
  Trace trace = RunApp("agent_runtime_app", {"malloc"});
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cudaMalloc size=1048576 kind=DEVICE dev=0",
                                       "alloc cudaMalloc size=300 kind=DEVICE dev=0",
                                       "free cudaFree size=300 dev=0",
                                       "free cudaFree size=1048576 dev=0",
                                   }));
  std::vector<const v1::Frame*> events = trace.Events();
  std::vector<uint64_t> printed = Printed();
  ASSERT_EQ(printed.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(AddressOf(*events[i]), printed[i]);
  EXPECT_EQ(trace.end()->events_recorded(), 4u);
}

// Stacks start in the program (not in the agent) and the module map covers their frames.
TEST_P(RuntimeRoutesTest, StacksStartAtTheCallerAndResolveToModules) {
  Trace trace = RunApp("agent_runtime_app", {"malloc"});
  struct Range {
    std::string path;
    uint64_t begin, end;
  };
  std::vector<Range> modules;
  for (const v1::Frame& f : trace.frames) {
    if (!f.has_module_map()) continue;
    for (const v1::Module& m : f.module_map().modules()) {
      modules.push_back({m.path(), m.load_address(), m.load_address() + m.size()});
    }
  }
  auto module_of = [&](uint64_t pc) -> std::string {
    for (const Range& r : modules) {
      if (pc >= r.begin && pc < r.end) return r.path;
    }
    return "";
  };
  std::map<uint64_t, std::vector<uint64_t>> stacks = trace.Stacks();
  const v1::Frame* first = trace.Events().at(0);
  ASSERT_TRUE(first->has_alloc());
  const std::vector<uint64_t>& pcs = stacks[first->alloc().stack_id()];
  ASSERT_GE(pcs.size(), 2u);
  // The innermost frame is the program's call site of cudaMalloc, then main's caller chain.
  EXPECT_NE(module_of(pcs[0]).find("agent_runtime_app"), std::string::npos) << module_of(pcs[0]);
  for (uint64_t pc : pcs) {
    std::string module = module_of(pc);
    EXPECT_FALSE(module.empty()) << std::hex << pc;
    EXPECT_EQ(module.find("libfragscope"), std::string::npos) << module;
  }
  // The main program is listed under its real path, with a build-id.
  bool program_listed = false;
  for (const v1::Frame& f : trace.frames) {
    if (!f.has_module_map()) continue;
    for (const v1::Module& m : f.module_map().modules()) {
      if (m.path() == trace.hello()->exe()) {
        program_listed = true;
        EXPECT_FALSE(m.build_id().empty());
      }
    }
  }
  EXPECT_TRUE(program_listed);
}

TEST_P(RuntimeRoutesTest, EveryRuntimeAllocationFamily) {
  Trace trace = RunApp("agent_runtime_app", {"families"});
  const uint64_t pitch = Value("pitch");
  const uint64_t pitch3d = Value("pitch3d");
  const uint64_t stream = Value("stream");
  const uint64_t pool = Value("pool");
  auto s = [](uint64_t v) { return std::to_string(v); };
  EXPECT_EQ(
      DescribeEvents(trace),
      (std::vector<std::string>{
          "alloc cudaMallocAsync size=5000 kind=POOL dev=0",
          "free cudaFreeAsync size=5000 dev=0",
          "alloc cudaMallocPitch size=" + s(pitch * 10) + " kind=PITCHED dev=0 pitch=" + s(pitch),
          "alloc cudaMalloc3D size=" + s(pitch3d * 20) + " kind=PITCHED dev=0 pitch=" + s(pitch3d),
          "alloc cudaMallocManaged size=4321 kind=MANAGED dev=0",
          "alloc cudaMallocFromPoolAsync size=999 kind=POOL dev=0",
          "free cudaFreeAsync size=999 dev=0",
          "free cudaFree size=" + s(pitch * 10) + " dev=0",
          "free cudaFree size=" + s(pitch3d * 20) + " dev=0",
          "free cudaFree size=4321 dev=0",
      }));
  std::vector<const v1::Frame*> e = trace.Events();
  ASSERT_EQ(e.size(), 10u);
  EXPECT_EQ(e[0]->alloc().stream(), stream);
  EXPECT_NE(e[0]->alloc().pool(), 0u);
  EXPECT_EQ(e[1]->free().stream(), stream);
  EXPECT_EQ(e[5]->alloc().pool(), pool);
  EXPECT_EQ(e[5]->alloc().stream(), stream);
  EXPECT_EQ(e[6]->free().pool(), pool);
}

TEST_P(RuntimeRoutesTest, DriverEntryPointsFromTheRuntime) {
  Trace trace = RunApp("agent_runtime_app", {"entrypoint"});
  const uint64_t page = 2 << 20;
  auto s = [](uint64_t v) { return std::to_string(v); };
  EXPECT_EQ(DescribeEvents(trace),
            (std::vector<std::string>{
                "map cuMemAddressReserve OP_RESERVE size=" + s(4 * page) + " dev=-1",
                "handle cuMemCreate OP_CREATE size=" + s(2 * page) + " dev=0",
                "map cuMemMap OP_MAP size=" + s(2 * page) + " dev=0",
                "map cuMemUnmap OP_UNMAP size=" + s(2 * page) + " dev=0",
                "handle cuMemRelease OP_RELEASE size=" + s(2 * page) + " dev=0",
                "map cuMemAddressFree OP_FREE_RANGE size=" + s(4 * page) + " dev=-1",
                // @2000 is the legacy 32-bit ABI, never blindly the newest.
                "alloc cuMemAlloc size=512 kind=DEVICE dev=0",
                "free cuMemFree size=512 dev=0",
                // cudaGetDriverEntryPoint: the runtime's CUDA version picks _v2.
                "alloc cuMemAlloc_v2 size=" + s(3 * page) + " kind=DEVICE dev=0",
                "free cuMemFree_v2 size=" + s(3 * page) + " dev=0",
            }));
}

// A statically linked runtime cannot be interposed; its driver calls are, through the
// dlsym + cuGetProcAddress route it takes like the shared one. (The program is linked with the
// fake libcudart_static.a or with NVIDIA's.)
TEST_P(RuntimeRoutesTest, StaticRuntimeIsSeenAtTheDriver) {
#ifndef FRAGSCOPE_TEST_HAVE_NVIDIA_STATIC_APP
  if (GetParam() == Runtime::kNvidia) GTEST_SKIP() << "the toolkit has no libcudart_static.a";
#endif
  Trace trace =
      RunApp(GetParam() == Runtime::kNvidia ? "agent_static_app_nvidia" : "agent_static_app", {});
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cuMemAlloc_v2 size=1048576 kind=DEVICE dev=0",
                                       "alloc cuMemAlloc_v2 size=4096 kind=DEVICE dev=0",
                                       "free cuMemFree_v2 size=4096 dev=0",
                                       "free cuMemFree_v2 size=1048576 dev=0",
                                   }));
  std::vector<uint64_t> printed;
  for (const auto& line : Lines(run_.out)) printed.push_back(ParseAddress(line[1]));
  std::vector<const v1::Frame*> events = trace.Events();
  ASSERT_EQ(printed.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(AddressOf(*events[i]), printed[i]);
}

// A stream-ordered allocation made while its stream captures a graph is graph memory
// (kind=GRAPH, in_capture); one on the legacy default stream, which no capture can include, is
// its pool's. The per-thread default stream is stream 0 of the _ptsz entry points: its capture
// state is the per-thread stream's, not the legacy stream's.
TEST_P(RuntimeRoutesTest, AllocationsInsideAGraphCaptureAreGraphMemory) {
  Trace trace = RunApp("agent_runtime_app", {"capture"}, {});
  ASSERT_EQ(run_.exit_code, 0) << run_.out << run_.err;
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cudaMallocAsync size=1000 kind=POOL dev=0",
                                       "alloc cudaMallocAsync size=2000 kind=GRAPH dev=0",
                                       "alloc cudaMallocAsync size=3000 kind=GRAPH dev=0",
                                   }))
      << run_.out;
}

TEST_P(RuntimeRoutesTest, InjectedFailureIsAFailedAllocWithTheDriversResult) {
  Trace trace = RunApp("agent_runtime_app", {"malloc"}, {{"FAKECUDA_FAIL_AT", "2"}});
  std::vector<std::string> described = DescribeEvents(trace);
  ASSERT_EQ(described.size(), 3u) << run_.out;
  EXPECT_EQ(described[0], "alloc cudaMalloc size=1048576 kind=DEVICE dev=0");
  EXPECT_EQ(described[1], "failed cudaMalloc size=300 result=2 dev=0");
  EXPECT_EQ(described[2], "free cudaFree size=1048576 dev=0");
  const v1::FailedAlloc& f = trace.Events()[1]->failed();
  EXPECT_TRUE(f.has_mem_info());
  EXPECT_GT(f.device_total_bytes(), 0u);
  EXPECT_LE(f.device_free_bytes(), f.device_total_bytes());
}

// A free ships before the real call (so a cudaFree that waits for the device does not hold its
// seq back); when the runtime then refuses it, the allocation is put back by an event of its
// own, after the free, with the allocation's own site.
TEST_P(RuntimeRoutesTest, ARefusedFreePutsTheAllocationBack) {
  Trace trace = RunApp("agent_runtime_app", {"refused_free"});
  ASSERT_GE(Lines(run_.out).size(), 3u) << run_.out;
  EXPECT_EQ(Lines(run_.out)[1][3], "900") << run_.out;  // cudaErrorStreamCaptureUnsupported
  EXPECT_EQ(Lines(run_.out)[2][3], "0") << run_.out;
  EXPECT_EQ(DescribeEvents(trace),
            (std::vector<std::string>{
                "alloc cudaMalloc size=1048576 kind=DEVICE dev=0",
                "free cudaFree size=1048576 dev=0",
                "alloc cudaMalloc size=1048576 kind=DEVICE dev=0 put_back release_result=900",
                "free cudaFree size=1048576 dev=0",
            }));
  std::vector<const v1::Frame*> events = trace.Events();
  ASSERT_EQ(events.size(), 4u);
  for (const v1::Frame* e : events) EXPECT_EQ(AddressOf(*e), Printed()[0]);
  EXPECT_LT(SeqOf(*events[1]), SeqOf(*events[2]));
  EXPECT_LT(SeqOf(*events[2]), SeqOf(*events[3]));
  EXPECT_NE(StackOf(*events[0]), 0u);
  EXPECT_EQ(StackOf(*events[2]), StackOf(*events[0]));  // the allocation's site, not the free's
  EXPECT_EQ(trace.end()->events_recorded(), 4u);
}

// A failed stream-ordered allocation is preceded by a sample of its pool: what the pool keeps
// beyond its live blocks (here a block freed on the stream) is the pool's, not memory outside
// the process, when the collector judges the failure.
TEST_P(RuntimeRoutesTest, FailedPoolAllocationSamplesItsPoolFirst) {
  Trace trace = RunApp("agent_runtime_app", {"pool_oom"});
  const v1::Frame* failed = nullptr;
  const v1::Frame* sample = nullptr;  // the last pool sample before the failure
  for (const v1::Frame& f : trace.frames) {
    if (f.has_failed()) {
      failed = &f;
      break;
    }
    if (f.has_mem_info() && f.mem_info().pool() != 0) sample = &f;
  }
  ASSERT_NE(failed, nullptr) << run_.out;
  ASSERT_NE(sample, nullptr) << "no pool sample before the failure";
  EXPECT_EQ(failed->failed().api(), v1::API_cudaMallocAsync);
  EXPECT_EQ(sample->mem_info().pool(), failed->failed().pool());
  uint64_t reserved = 0, used = 0;
  for (const auto& line : Lines(run_.out)) {
    if (line.size() == 6 && line[0] == "pool") {
      EXPECT_EQ(ParseAddress(line[1]), sample->mem_info().pool());
      reserved = std::stoull(line[3]);
      used = std::stoull(line[5]);
    }
  }
  EXPECT_EQ(sample->mem_info().pool_reserved_bytes(), reserved) << run_.out;
  EXPECT_EQ(sample->mem_info().pool_used_bytes(), used) << run_.out;
  EXPECT_GE(reserved, uint64_t{128} << 20) << "the pool keeps the freed block";
}

TEST_P(RuntimeRoutesTest, AnnotationsBecomeBlockFailedAndMarkFrames) {
  Trace trace = RunApp("agent_runtime_app", {"annotate"});
  EXPECT_EQ(DescribeEvents(trace),
            (std::vector<std::string>{
                "alloc cudaMalloc size=1048576 kind=DEVICE dev=0",
                "mark step 1",
                "block OP_ALLOC size=4096 dev=0 pool=7",
                "block OP_ALLOC size=8192 dev=0 pool=7",
                "block OP_FREE_PENDING size=4096 dev=0 pool=7",
                "block OP_FREE size=4096 dev=0 pool=7",
                "failed fragscope_alloc_failed size=1073741824 result=2 dev=0 sub_allocator",
                "mark step 2",
                "free cudaFree size=1048576 dev=0",
            }));
  const uint64_t segment = Value("segment");
  std::vector<const v1::Frame*> e = trace.Events();
  EXPECT_EQ(e[2]->block().address(), segment);
  EXPECT_EQ(e[3]->block().address(), segment + 4096);
  EXPECT_EQ(e[2]->block().api(), v1::API_fragscope_block_alloc);
  EXPECT_EQ(e[3]->block().api(), v1::API_fragscope_block_alloc);
  EXPECT_EQ(e[5]->block().api(), v1::API_fragscope_block_free);
  // A block reported live has its caller's stack; one reported after the fact (_late) none.
  EXPECT_NE(e[2]->block().stack_id(), 0u);
  EXPECT_EQ(e[3]->block().stack_id(), 0u);
  EXPECT_NE(run_.out.find("active 1"), std::string::npos);
}

// An adapter's source-level sites (annotate.h fragscope_source_stack, fragscope_block_site):
// equal stacks get one id, each is shipped once as a SymbolizedStack ahead of the first event
// that names it, and the site events carry the block's address and the id.
TEST_P(RuntimeRoutesTest, SourceSitesAreShippedOnceBeforeTheEventsNamingThem) {
  Trace trace = RunApp("agent_runtime_app", {"source_sites"});
  std::vector<uint64_t> ids;
  for (const auto& line : Lines(run_.out)) {
    if (line.size() == 4 && line[0] == "sites") {
      for (int i = 1; i < 4; ++i) ids.push_back(std::stoull(line[i]));
    }
  }
  ASSERT_EQ(ids.size(), 3u) << run_.out;
  EXPECT_NE(ids[0], 0u);
  EXPECT_EQ(ids[1], ids[0]);  // the same frames again
  EXPECT_NE(ids[2], 0u);
  EXPECT_NE(ids[2], ids[0]);
  std::map<uint64_t, const v1::SymbolizedStack*> defined;
  int definitions = 0;
  std::vector<std::pair<uint64_t, uint64_t>> sites;                   // address, stack
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> freed_sites;  // address, size, stack
  for (const v1::Frame& f : trace.frames) {
    if (f.has_block() && f.block().op() == v1::BlockEvent::OP_SITE_FREED) {
      freed_sites.emplace_back(f.block().address(), f.block().size(), f.block().stack_id());
    }
    if (f.has_symbolized_stack()) {
      ++definitions;
      defined[f.symbolized_stack().id()] = &f.symbolized_stack();
    }
    if (f.has_block() && f.block().op() == v1::BlockEvent::OP_SITE) {
      EXPECT_EQ(defined.count(f.block().stack_id()), 1u) << "a site event before its stack";
      sites.emplace_back(f.block().address(), f.block().stack_id());
    }
  }
  EXPECT_EQ(definitions, 2);
  const uint64_t segment = Value("segment");
  EXPECT_EQ(sites, (std::vector<std::pair<uint64_t, uint64_t>>{
                       {segment, ids[0]}, {segment + 8192, ids[2]}, {segment + 4096, ids[0]}}));
  // A site learned after the block's free carries its size too (only a source id is taken).
  EXPECT_EQ(
      freed_sites,
      (std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>{{segment + 8192, 4096, ids[0]}}));
  ASSERT_EQ(defined.count(ids[0]), 1u);
  const v1::SymbolizedStack& a = *defined[ids[0]];
  ASSERT_EQ(a.frames_size(), 2);
  EXPECT_EQ(a.frames(0).function(), "forward");
  EXPECT_EQ(a.frames(0).file(), "model.py");
  EXPECT_EQ(a.frames(0).line(), 42u);
  EXPECT_EQ(a.frames(1).function(), "<module>");
  EXPECT_EQ(a.frames(1).file(), "train.py");
  EXPECT_EQ(a.frames(1).line(), 7u);
  ASSERT_EQ(defined.count(ids[2]), 1u);
  const v1::SymbolizedStack& b = *defined[ids[2]];
  ASSERT_EQ(b.frames_size(), 2);
  EXPECT_EQ(b.frames(1).function(), "");  // null text and line 0 ship as empty, not dropped
  EXPECT_EQ(b.frames(1).line(), 0u);
  // A failure reported with a source site carries it; the plain one its caller's pc stack.
  std::map<uint64_t, uint64_t> failure_stacks;  // size -> stack
  for (const v1::Frame* f : trace.Events()) {
    if (f->has_failed()) failure_stacks[f->failed().size()] = f->failed().stack_id();
  }
  ASSERT_EQ(failure_stacks.size(), 2u);
  EXPECT_EQ(failure_stacks[uint64_t{1} << 29], ids[2]);
  EXPECT_NE(failure_stacks[uint64_t{1} << 30], 0u);
  EXPECT_LT(failure_stacks[uint64_t{1} << 30], uint64_t{1} << 32);
}

TEST_P(RuntimeRoutesTest, AnnotationsAreHarmlessWithoutTheAgent) {
  RunResult plain =
      RunProgram(AppPath("agent_runtime_app"), {"annotate"}, RunOptions{false, {}, GetParam()});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("active 0"), std::string::npos);
}

// What the trace says is live at exit is what the fake driver really holds.
TEST_P(RuntimeRoutesTest, LiveSetAtExitMatchesTheDriversGroundTruth) {
  Trace trace = RunApp("agent_runtime_app", {"leak"}, {{"FAKECUDA_LIVE_DUMP", dir_.File("live")}});
  std::map<uint64_t, uint64_t> live;  // address -> size, replayed from the trace
  for (const v1::Frame* f : trace.Events()) {
    if (f->has_alloc()) live[f->alloc().address()] = f->alloc().size();
    if (f->has_free()) live.erase(f->free().address());
  }
  std::map<uint64_t, uint64_t> truth;
  for (const auto& line : Lines(ReadFile(dir_.File("live")))) {
    // "<kind> <address> <size> <device> ..." as written by the fake.
    if (line.size() >= 3 && line[1].rfind("0x", 0) == 0) {
      truth[ParseAddress(line[1])] = std::stoull(line[2]);
    }
  }
  EXPECT_EQ(live.size(), 5u);
  EXPECT_EQ(live, truth);
}

// An ordinary program compiled by nvcc with -cudart shared (skipped where nvcc is absent):
// kernels on two streams, a device variable, kernel queries and stream-ordered allocation.
TEST_P(RuntimeRoutesTest, NvccCompiledProgram) {
#ifndef FRAGSCOPE_TEST_HAVE_NVCC_APP
  GTEST_SKIP() << "nvcc not found at configure time";
#else
  Trace trace = RunApp("agent_nvcc_app", {});
  for (const char* step : {"symbol 0", "attributes 0", "occupancy 0", "launch 0", "copy 0",
                           "stream_launch 0", "sync 0"}) {
    EXPECT_NE(run_.out.find(std::string("\n") + step + "\n"), std::string::npos) << step << " in\n"
                                                                                 << run_.out;
  }
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cudaMalloc size=1024 kind=DEVICE dev=0",
                                       "alloc cudaMallocAsync size=1048576 kind=POOL dev=0",
                                       "free cudaFreeAsync size=1048576 dev=0",
                                       "free cudaFree size=1024 dev=0",
                                   }));
  std::vector<uint64_t> printed;  // "<call> <address> <result>"
  for (const auto& line : Lines(run_.out)) {
    if (line.size() == 3 && line[1].rfind("0x", 0) == 0) printed.push_back(ParseAddress(line[1]));
  }
  std::vector<const v1::Frame*> events = trace.Events();
  ASSERT_EQ(printed.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(AddressOf(*events[i]), printed[i]) << i;
  // The kernel launch went through the failure-only hook and, succeeding, left no event.
  EXPECT_EQ(trace.end()->events_recorded(), 4u);
#endif
}

// Every allocation family, a device reset and exit: NVIDIA's runtime and the fake one make the
// same driver calls the agent records, so their traces hold the same events; on each, what the
// trace leaves live at exit is what the driver holds.
TEST(RuntimeParityTest, SameEventsOnBothRuntimes) {
  if (NvidiaRuntimeDir().empty()) GTEST_SKIP() << "the CUDA toolkit has no libcudart.so.13";
  std::map<Runtime, std::vector<std::string>> described;
  for (Runtime runtime : {Runtime::kFake, Runtime::kNvidia}) {
    SCOPED_TRACE(RuntimeName(runtime));
    TempDir dir;
    RunResult run = RunProgram(AppPath("agent_runtime_app"), {"parity"},
                               RunOptions{true,
                                          {{"FRAGSCOPE_OUTPUT", dir.File("t.fst")},
                                           {"FAKECUDA_LIVE_DUMP", dir.File("live")}},
                                          runtime});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    for (const auto& line : Lines(run.out)) {
      ASSERT_EQ(line.size(), 4u) << run.out;
      EXPECT_EQ(line[3], "0") << "failed: " << line[0];
    }
    Trace trace = ReadTrace(dir.File("t.fst"));
    ASSERT_TRUE(trace.clean) << trace.error;
    described[runtime] = DescribeEvents(trace);
    std::map<uint64_t, uint64_t> live, truth;
    for (const v1::Frame* f : trace.Events()) {
      if (f->has_alloc()) live[f->alloc().address()] = f->alloc().size();
      if (f->has_free()) live.erase(f->free().address());
    }
    for (const auto& line : Lines(ReadFile(dir.File("live")))) {
      if (line.size() >= 3) truth[ParseAddress(line[1])] = std::stoull(line[2]);
    }
    EXPECT_EQ(live, truth);
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live.begin()->second, 4096u);
  }
  EXPECT_EQ(described[Runtime::kNvidia], described[Runtime::kFake]);
  const std::vector<std::string>& e = described[Runtime::kFake];
  ASSERT_EQ(e.size(), 21u);
  EXPECT_EQ(e[0], "alloc cudaMalloc size=1048576 kind=DEVICE dev=0");
  EXPECT_EQ(e[1], "alloc cudaMallocAsync size=5000 kind=POOL dev=0");
  EXPECT_EQ(e[3], "alloc cudaMallocFromPoolAsync size=999 kind=POOL dev=0");
  EXPECT_EQ(e[5], "alloc cudaMallocManaged size=4321 kind=MANAGED dev=0");
  EXPECT_EQ(e[8], "map cuMemAddressReserve OP_RESERVE size=4194304 dev=-1");
  EXPECT_EQ(e[18], "alloc cudaMalloc size=3145728 kind=DEVICE dev=0");  // after the reset
}

INSTANTIATE_TEST_SUITE_P(BothRuntimes, RuntimeRoutesTest, BothRuntimes(), RuntimeParamName);

}  // namespace
}  // namespace fragscope::agent_test
