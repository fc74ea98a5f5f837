// The call-frame-information stack walk against glibc's backtrace() (libgcc's unwinder) on a
// chain built -O2 -fomit-frame-pointer, with a frame that leaves a plausible fake frame record
// in rbp, a frame larger than 4 KiB, and the rule cache itself.
#include <dlfcn.h>
#include <link.h>
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "no_frame_pointer_chain.h"
#include "recording/stack_capture.h"
#include "recording/stack_table.h"
#include "recording/unwind_rules.h"

namespace fragscope::agent {
namespace {

#if defined(__x86_64__)

struct Walk {
  uint64_t pcs[StackTable::kMaxDepth] = {};
  int count = 0;
  uint64_t hash = 0;
  StackEnd end = StackEnd::kUnspecified;
};

[[gnu::noinline]] void WalkInto(void* context) {
  auto* w = static_cast<Walk*>(context);
  w->count = CaptureStack(w->pcs, StackTable::kMaxDepth, &w->hash, &w->end);
  asm volatile("" ::: "memory");
}

class UnwindRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetFindObject(reinterpret_cast<FindObjectFn>(&_dl_find_object));
    ASSERT_TRUE(CfiUnwindAvailable());
  }
  void TearDown() override { SetFindObject(nullptr); }

  // Runs the chain; *oracle receives backtrace() from its innermost level.
  Walk RunChainWalk(std::vector<uintptr_t>* oracle) {
    Walk walk;
    void* frames[256];
    testing::ChainProbe probe{&WalkInto, &walk, kFakeReturnAddress, frames, 256};
    EXPECT_NE(testing::RunChain(probe), 0);
    oracle->assign(reinterpret_cast<uintptr_t*>(frames),
                   reinterpret_cast<uintptr_t*>(frames) + probe.oracle_count);
    return walk;
  }

  static constexpr uintptr_t kFakeReturnAddress = 0x5ca1ab1e0;
};

TEST_F(UnwindRulesTest, WalkThroughCodeWithoutFramePointersMatchesLibgcc) {
  std::vector<uintptr_t> oracle;
  const Walk walk = RunChainWalk(&oracle);
  // pcs[0] returns into WalkInto, pcs[1] into the chain's innermost level after the walk; the
  // oracle starts inside backtrace() (a sanitizer's interceptor adds a frame) and then in the
  // innermost level after its call. From the next frame out both name the same calls.
  ASSERT_GE(walk.count, 6);
  ASSERT_GE(oracle.size(), 5u);
  ASSERT_LT(oracle.size(), 256u) << "backtrace() filled its buffer: no oracle for the end";
  std::vector<uintptr_t> ours(walk.pcs + 2, walk.pcs + walk.count);
  const auto from = std::find(oracle.begin(), oracle.end(), ours.front());
  ASSERT_NE(from, oracle.end()) << "the oracle never passes the chain's second level";
  ASSERT_LE(from - oracle.begin(), 3);
  std::vector<uintptr_t> theirs(from, oracle.end());
  // libgcc reports the outermost frame's return address as 0 on some glibc versions; a walk
  // stops at a zero return address without recording it.
  if (!theirs.empty() && theirs.back() == 0) theirs.pop_back();
  EXPECT_EQ(ours, theirs);
  EXPECT_EQ(walk.end, StackEnd::kOutermost);
  EXPECT_EQ(std::count(walk.pcs, walk.pcs + walk.count, kFakeReturnAddress), 0);
  EXPECT_EQ(walk.hash, HashStack(walk.pcs, walk.count));
}

TEST_F(UnwindRulesTest, DepthLimitIsACut) {
  std::vector<uintptr_t> oracle;
  const Walk full = RunChainWalk(&oracle);
  ASSERT_EQ(full.end, StackEnd::kOutermost);
  uint64_t pcs[StackTable::kMaxDepth];
  uint64_t hash = 0;
  StackEnd end = StackEnd::kUnspecified;
  const int n = CaptureStack(pcs, 2, &hash, &end);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(end, StackEnd::kDepthLimit);
  EXPECT_EQ(hash, HashStack(pcs, n));
}

TEST_F(UnwindRulesTest, CachedRulesEqualComputedOnes) {
  std::vector<uintptr_t> oracle;
  const Walk walk = RunChainWalk(&oracle);
  int sp_based = 0, frame_pointer = 0;
  for (int i = 0; i < walk.count; ++i) {
    const uintptr_t pc = walk.pcs[i] - 1;
    const UnwindRule computed = ComputeUnwindRule(pc);
    for (int round = 0; round < 2; ++round) {  // a miss that fills the cache, then a hit
      const UnwindRule found = FindUnwindRule(pc);
      EXPECT_EQ(found.kind, computed.kind) << std::hex << pc;
      EXPECT_EQ(found.cfa_offset, computed.cfa_offset) << std::hex << pc;
      EXPECT_EQ(found.fp_offset, computed.fp_offset) << std::hex << pc;
    }
    sp_based += computed.kind == UnwindRule::Kind::kSpBased;
    frame_pointer += computed.IsFramePointerRecord();
  }
  EXPECT_GE(sp_based, 4);       // the chain's four levels
  EXPECT_GE(frame_pointer, 1);  // WalkInto, built with frame pointers
  // A frame of 12 KiB is cached too: a rule computed again on every walk cost a walk ~230 ns
  // (a 10.6 KiB frame of libbenchmark did, when entries held frames up to 4 KiB only).
  bool large = false;
  for (int i = 0; i < walk.count; ++i) {
    const UnwindRule rule = FindUnwindRule(walk.pcs[i] - 1);
    if (rule.kind != UnwindRule::Kind::kSpBased || rule.cfa_offset < 12000) continue;
    large = true;
    uint32_t bits = 0;
    EXPECT_TRUE(CachedReturnRuleBits(walk.pcs[i], &bits)) << std::hex << walk.pcs[i];
    EXPECT_EQ(internal::UnpackRuleBits(bits).cfa_offset, rule.cfa_offset);
  }
  EXPECT_TRUE(large);
}

TEST_F(UnwindRulesTest, NoRuleOutsideCode) {
  int on_stack = 0;
  EXPECT_EQ(FindUnwindRule(reinterpret_cast<uintptr_t>(&on_stack)).kind, UnwindRule::Kind::kNoInfo);
  SetFindObject(nullptr);
  EXPECT_FALSE(CfiUnwindAvailable());
  EXPECT_EQ(ComputeUnwindRule(reinterpret_cast<uintptr_t>(&WalkInto) + 4).kind,
            UnwindRule::Kind::kNoInfo);
}

// Every FDE of every loaded object (libc, libstdc++, gtest, this binary), looked up at pcs all
// through their code: the interpreter never faults, and every rule it gives is one a walk can
// take (a CFA above the frame, the caller's frame pointer saved below it).
TEST_F(UnwindRulesTest, EveryLoadedObjectsRulesAreSane) {
  struct Code {
    uintptr_t begin, end;
  };
  std::vector<Code> code;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) != 0) {
            const uintptr_t b = info->dlpi_addr + ph.p_vaddr;
            static_cast<std::vector<Code>*>(data)->push_back({b, b + ph.p_memsz});
          }
        }
        return 0;
      },
      &code);
  ASSERT_GE(code.size(), 3u);
  int walkable = 0, lookups = 0;
  for (const Code& c : code) {
    const uintptr_t step = std::max<uintptr_t>(7, (c.end - c.begin) / 40000);
    for (uintptr_t pc = c.begin; pc < c.end; pc += step) {
      ++lookups;
      const UnwindRule rule = ComputeUnwindRule(pc);
      if (rule.kind == UnwindRule::Kind::kSpBased || rule.kind == UnwindRule::Kind::kFpBased) {
        ++walkable;
        ASSERT_GE(rule.cfa_offset, 16) << std::hex << pc;
        ASSERT_LE(rule.fp_offset, 0) << std::hex << pc;
        ASSERT_GE(rule.fp_offset, -rule.cfa_offset) << std::hex << pc;
      }
    }
  }
  EXPECT_GT(walkable, lookups / 2) << "most code has a rule a walk can take";
}

Walk g_in_handler;

void WalkInHandler(int) { WalkInto(&g_in_handler); }

// A signal handler's caller is the kernel's sigreturn trampoline, whose registers live in a
// ucontext: the walk says so rather than ending as if the stack were whole.
TEST_F(UnwindRulesTest, SignalFrameEndsAsUnsupported) {
  struct sigaction action = {}, old = {};
  action.sa_handler = &WalkInHandler;
  ASSERT_EQ(sigaction(SIGUSR2, &action, &old), 0);
  raise(SIGUSR2);
  sigaction(SIGUSR2, &old, nullptr);
  EXPECT_GE(g_in_handler.count, 2);
  EXPECT_EQ(g_in_handler.end, StackEnd::kUnsupported);
}

#endif  // __x86_64__

}  // namespace
}  // namespace fragscope::agent
