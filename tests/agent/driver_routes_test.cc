// The agent preloaded into programs that use the driver API directly: by dlsym on a libcuda
// handle and through cuGetProcAddress. Each test asserts the exact event sequence.
#include <gtest/gtest.h>

#include <set>

#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

class DriverRoutesTest : public ::testing::Test {
 protected:
  // Runs agent_driver_app SCENARIO traced; returns the trace and fills run_.
  Trace RunScenario(const std::string& scenario, std::map<std::string, std::string> env = {}) {
    env["FRAGSCOPE_OUTPUT"] = dir_.File("trace.fst");
    run_ = RunProgram(AppPath("agent_driver_app"), {scenario}, RunOptions{true, env});
    EXPECT_EQ(run_.exit_code, 0) << run_.err;
    Trace trace = ReadTrace(dir_.File("trace.fst"));
    EXPECT_TRUE(trace.opened) << trace.error;
    EXPECT_TRUE(trace.clean) << trace.error;
    return trace;
  }

  // Addresses the program printed, in order ("<what> <address> <size> <result>" lines).
  std::vector<uint64_t> PrintedAddresses(size_t words = 4) const {
    std::vector<uint64_t> addresses;
    for (const auto& line : Lines(run_.out)) {
      if (line.size() == words && line[1].rfind("0x", 0) == 0) {
        addresses.push_back(ParseAddress(line[1]));
      }
    }
    return addresses;
  }

  TempDir dir_;
  RunResult run_;
};

// Hello, End, causal seq order and stacks: true of every trace.
void ExpectWellFormed(const Trace& trace, size_t expected_events) {
  ASSERT_NE(trace.hello(), nullptr);
  EXPECT_EQ(trace.frames.front().has_hello(), true);
  EXPECT_EQ(trace.hello()->backend(), v1::Hello::BACKEND_PRELOAD);
  EXPECT_EQ(trace.hello()->stack_depth(), 32u);
  ASSERT_NE(trace.end(), nullptr);
  EXPECT_TRUE(trace.frames.back().has_end());
  EXPECT_EQ(trace.end()->events_recorded(), expected_events);
  EXPECT_EQ(trace.end()->total_dropped(), 0u);
  std::map<uint64_t, std::vector<uint64_t>> stacks = trace.Stacks();
  uint64_t previous = 0;
  for (const v1::Frame* f : trace.Events()) {
    EXPECT_GT(SeqOf(*f), previous) << Describe(*f);  // single thread: stream order is seq order
    previous = SeqOf(*f);
    if (f->has_mark()) continue;
    uint64_t stack = StackOf(*f);
    ASSERT_NE(stack, 0u) << Describe(*f);
    ASSERT_TRUE(stacks.count(stack)) << "stack sent before use: " << Describe(*f);
    EXPECT_FALSE(stacks[stack].empty());
  }
  // Every stack is sent once.
  size_t stack_entries = 0;
  for (const v1::Frame& f : trace.frames) {
    if (f.has_stacks()) stack_entries += static_cast<size_t>(f.stacks().stacks_size());
  }
  EXPECT_EQ(stack_entries, stacks.size());
}

TEST_F(DriverRoutesTest, DlsymOnLibcudaBothAbis) {
  Trace trace = RunScenario("dlsym");
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cuMemAlloc_v2 size=1048576 kind=DEVICE dev=0",
                                       "alloc cuMemAlloc size=4096 kind=DEVICE dev=0",
                                       "free cuMemFree size=4096 dev=0",
                                       "free cuMemFree_v2 size=1048576 dev=0",
                                       "free cuMemFree_v2 size=0 dev=0 result=1",
                                   }));
  ExpectWellFormed(trace, 5);
  std::vector<uint64_t> printed = PrintedAddresses();
  std::vector<const v1::Frame*> events = trace.Events();
  ASSERT_EQ(printed.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(AddressOf(*events[i]), printed[i]) << i;
  // The legacy ABI's 32-bit address is below 4 GiB.
  EXPECT_LT(AddressOf(*events[1]), 1ull << 32);
  // The device was described, with its UUID and total, before its first event.
  ASSERT_TRUE(trace.frames.size() > 2);
  bool device_before_event = false;
  for (const v1::Frame& f : trace.frames) {
    if (f.has_device()) {
      device_before_event = true;
      EXPECT_EQ(f.device().ordinal(), 0);
      EXPECT_EQ(f.device().uuid().size(), 16u);
      EXPECT_GT(f.device().total_bytes(), 0u);
    }
    if (f.has_alloc()) break;
  }
  EXPECT_TRUE(device_before_event);
}

TEST_F(DriverRoutesTest, GetProcAddressHandsOutTheRequestedAbi) {
  Trace trace = RunScenario("getprocaddress");
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cuMemAlloc_v2 size=3145728 kind=DEVICE dev=0",
                                       "alloc cuMemAlloc size=8192 kind=DEVICE dev=0",
                                       "alloc cuMemAllocAsync size=65536 kind=POOL dev=0",
                                       "alloc cuMemAllocAsync_ptsz size=1024 kind=POOL dev=0",
                                       "free cuMemFreeAsync size=65536 dev=0",
                                       "free cuMemFreeAsync size=1024 dev=0",
                                       "free cuMemFree size=8192 dev=0",
                                       "free cuMemFree_v2 size=3145728 dev=0",
                                   }));
  ExpectWellFormed(trace, 8);
  std::vector<const v1::Frame*> events = trace.Events();
  // Stream-ordered allocations name the device's current pool; frees carry it too.
  EXPECT_NE(events[2]->alloc().pool(), 0u);
  EXPECT_EQ(events[4]->free().pool(), events[2]->alloc().pool());
}

TEST_F(DriverRoutesTest, VirtualMemoryManagement) {
  Trace trace = RunScenario("vmm");
  const uint64_t page = 2 << 20;
  auto s = [](uint64_t v) { return std::to_string(v); };
  EXPECT_EQ(DescribeEvents(trace),
            (std::vector<std::string>{
                "map cuMemAddressReserve OP_RESERVE size=" + s(8 * page) + " dev=-1",
                "handle cuMemCreate OP_CREATE size=" + s(page) + " dev=0",
                "handle cuMemCreate OP_CREATE size=" + s(2 * page) + " dev=0",
                "map cuMemMap OP_MAP size=" + s(page) + " dev=0",
                "map cuMemMap OP_MAP size=" + s(2 * page) + " dev=0",
                "handle cuMemRetainAllocationHandle OP_RETAIN size=" + s(2 * page) + " dev=0",
                "handle cuMemRelease OP_RELEASE size=" + s(2 * page) + " dev=0",
                "handle cuMemRelease OP_RELEASE size=" + s(page) + " dev=0",
                "map cuMemUnmap OP_UNMAP size=" + s(page) + " dev=0",
                "map cuMemUnmap OP_UNMAP size=" + s(2 * page) + " dev=0",
                "handle cuMemRelease OP_RELEASE size=" + s(2 * page) + " dev=0",
                "map cuMemAddressFree OP_FREE_RANGE size=" + s(8 * page) + " dev=-1",
            }));
  ExpectWellFormed(trace, 12);
  std::vector<const v1::Frame*> e = trace.Events();
  const uint64_t va = e[0]->map().address();
  const uint64_t h1 = e[1]->handle().handle();
  const uint64_t h2 = e[2]->handle().handle();
  EXPECT_NE(h1, h2);
  EXPECT_EQ(e[3]->map().address(), va);
  EXPECT_EQ(e[3]->map().handle(), h1);
  EXPECT_EQ(e[4]->map().address(), va + page);
  EXPECT_EQ(e[4]->map().handle(), h2);
  EXPECT_EQ(e[5]->handle().handle(), h2);
  EXPECT_EQ(e[5]->handle().address(), va + page);
  EXPECT_EQ(e[8]->map().handle(), h1);
  EXPECT_EQ(e[9]->map().handle(), h2);
}

// FRAGSCOPE_FREE_STACKS=0: releases (frees, unmaps, address-range frees, handle releases) carry
// no stack; everything else keeps its stack, and the events themselves are the same.
TEST_F(DriverRoutesTest, WithoutFreeStacksOnlyReleasesLoseTheirStack) {
  for (const std::string scenario : {"vmm", "getprocaddress"}) {
    SCOPED_TRACE(scenario);
    Trace stacked = RunScenario(scenario);
    ASSERT_NE(stacked.hello(), nullptr);
    EXPECT_FALSE(stacked.hello()->release_stacks_off());
    const std::vector<std::string> with_stacks = DescribeEvents(stacked);
    Trace trace = RunScenario(scenario, {{"FRAGSCOPE_FREE_STACKS", "0"}});
    ASSERT_NE(trace.hello(), nullptr);
    EXPECT_TRUE(trace.hello()->release_stacks_off());  // readers can tell "not recorded"
    EXPECT_EQ(DescribeEvents(trace), with_stacks);
    EXPECT_EQ(run_.err.find("FRAGSCOPE_FREE_STACKS"), std::string::npos) << run_.err;
    std::map<uint64_t, std::vector<uint64_t>> stacks = trace.Stacks();
    size_t releases = 0;
    for (const v1::Frame* f : trace.Events()) {
      const bool release = f->has_free() ||
                           (f->has_map() && (f->map().op() == v1::MapEvent::OP_UNMAP ||
                                             f->map().op() == v1::MapEvent::OP_FREE_RANGE)) ||
                           (f->has_handle() && f->handle().op() == v1::HandleEvent::OP_RELEASE);
      if (release) {
        ++releases;
        EXPECT_EQ(StackOf(*f), 0u) << Describe(*f);
      } else {
        EXPECT_NE(StackOf(*f), 0u) << Describe(*f);
        EXPECT_TRUE(stacks.count(StackOf(*f))) << Describe(*f);
      }
    }
    EXPECT_GE(releases, 4u);
  }
}

TEST_F(DriverRoutesTest, ManagedPitchedAndPoolAllocations) {
  Trace trace = RunScenario("managed_pitch_pool");
  uint64_t row_pitch = 0, pool = 0;
  for (const auto& line : Lines(run_.out)) {
    if (line[0] == "row_pitch") row_pitch = std::stoull(line[1]);
    if (line[0] == "pool") pool = ParseAddress(line[1]);
  }
  ASSERT_GE(row_pitch, 1000u);
  auto s = [](uint64_t v) { return std::to_string(v); };
  EXPECT_EQ(DescribeEvents(trace), (std::vector<std::string>{
                                       "alloc cuMemAllocManaged size=12345 kind=MANAGED dev=0",
                                       "alloc cuMemAllocPitch_v2 size=" + s(row_pitch * 64) +
                                           " kind=PITCHED dev=0 pitch=" + s(row_pitch),
                                       "alloc cuMemAllocFromPoolAsync size=777 kind=POOL dev=0",
                                       "free cuMemFreeAsync size=777 dev=0",
                                       "free cuMemFree_v2 size=12345 dev=0",
                                       "free cuMemFree_v2 size=" + s(row_pitch * 64) + " dev=0",
                                   }));
  ExpectWellFormed(trace, 6);
  EXPECT_EQ(trace.Events()[2]->alloc().pool(), pool);
  // The trim is followed by a sample of the pool's reserved and used bytes.
  bool pool_sample = false;
  for (const v1::Frame& f : trace.frames) {
    if (f.has_mem_info() && f.mem_info().pool() == pool) {
      pool_sample = true;
      EXPECT_EQ(f.mem_info().pool_used_bytes(), 0u);
      EXPECT_GT(f.mem_info().total_bytes(), 0u);
    }
  }
  EXPECT_TRUE(pool_sample);
}

TEST_F(DriverRoutesTest, FailedAllocationCarriesMemInfoAndKeepsErrno) {
  Trace trace = RunScenario("fail", {{"FAKECUDA_CAPACITY", "1G"}});
  ASSERT_EQ(DescribeEvents(trace),
            (std::vector<std::string>{"failed cuMemAlloc_v2 size=1099511627776 result=2 dev=0"}));
  const v1::FailedAlloc& f = trace.Events()[0]->failed();
  EXPECT_TRUE(f.has_mem_info());
  EXPECT_EQ(f.device_total_bytes(), 1ull << 30);
  EXPECT_LT(f.device_free_bytes(), f.device_total_bytes());
  EXPECT_GT(f.device_free_bytes(), 0u);
  EXPECT_EQ(f.kind(), v1::MEMORY_KIND_DEVICE);
  EXPECT_FALSE(f.from_sub_allocator());
  // errno as the program set it, and the driver's result, with the agent as without it.
  RunResult plain = RunProgram(AppPath("agent_driver_app"), {"fail"},
                               RunOptions{false, {{"FAKECUDA_CAPACITY", "1G"}}});
  EXPECT_EQ(run_.out, plain.out);
  EXPECT_NE(run_.out.find("errno 1234"), std::string::npos);
}

// A failure is in the trace before the failing call returns: the program may die right after.
TEST_F(DriverRoutesTest, FailureIsShippedBeforeTheCallReturns) {
  TempDir dir;
  RunResult run = RunProgram(
      AppPath("agent_driver_app"), {"fail_then_exit"},
      RunOptions{true, {{"FRAGSCOPE_OUTPUT", dir.File("t.fst")}, {"FAKECUDA_CAPACITY", "1G"}}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.opened) << trace.error;
  EXPECT_EQ(trace.end(), nullptr);  // the exit system call: the stream is cut, not ended
  EXPECT_EQ(DescribeEvents(trace),
            (std::vector<std::string>{"failed cuMemAlloc_v2 size=1099511627776 result=2 dev=0"}));
}

// A program that itself calls dlsym(RTLD_NEXT, ...) gets the same answers with the agent: the
// pass-through is a true tail call, so glibc still sees the program as the caller.
TEST_F(DriverRoutesTest, ProgramsOwnRtldNextLookupsAreUnchanged) {
  TempDir dir;
  RunOptions traced{true, {{"FRAGSCOPE_OUTPUT", dir.File("t.fst")}}};
  RunResult with_agent = RunProgram(AppPath("agent_driver_app"), {"rtld_next"}, traced);
  RunResult without = RunProgram(AppPath("agent_driver_app"), {"rtld_next"}, RunOptions{false, {}});
  ASSERT_EQ(with_agent.exit_code, 0) << with_agent.err;
  ASSERT_EQ(without.exit_code, 0);
  EXPECT_EQ(with_agent.out, without.out);
  EXPECT_NE(with_agent.out.find("next_malloc found"), std::string::npos);
  EXPECT_NE(with_agent.out.find("libc.so"), std::string::npos);
  // No CUDA used: no trace file is created at all.
  EXPECT_TRUE(dir.List().empty());
}

}  // namespace
}  // namespace fragscope::agent_test
