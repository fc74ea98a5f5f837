// The in-place patcher (interpose/src/attach/inline_patch.h) on functions of this test: patch, call
// through the jump, call the original through the trampoline, restore the bytes; and the
// prologues it must refuse. The functions are written in assembly so their first bytes are
// exactly the cases under test (rip-relative operands, relative call/jcc, loops back into the
// prologue, jrcxz, a function shorter than the jump).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "attach/inline_patch.h"

#if defined(__x86_64__)
extern "C" {
int fs_test_riprel(int x);      // 2 * fs_test_value + x, through rip-relative mov and lea
int fs_test_branches(int x);    // x == 0 ? -1 : fs_test_helper() + 2 (relative jcc and call)
int fs_test_loop_back(int x);   // sum 1..x, its loop jumps back to byte 2
int fs_test_jrcxz(int x);       // jrcxz first
int fs_test_early_call(int x);  // calls through a register first: returns inside the jump
int fs_test_tiny(int x);        // 4 bytes
int fs_test_tail(int x);        // add + tail call (8 bytes): x + 1 + 100
extern int fs_test_value;
}

asm(R"(
  .data
  .globl fs_test_value
fs_test_value:
  .long 7
  .text

  .globl fs_test_riprel
  .type fs_test_riprel, @function
fs_test_riprel:
  push %rbx
  mov fs_test_value(%rip), %eax
  lea fs_test_value(%rip), %rbx
  add %edi, %eax
  add (%rbx), %eax
  pop %rbx
  ret
  .size fs_test_riprel, .-fs_test_riprel

  .type fs_test_helper, @function
fs_test_helper:
  mov $100, %eax
  ret
  .size fs_test_helper, .-fs_test_helper

  .globl fs_test_branches
  .type fs_test_branches, @function
fs_test_branches:
  test %edi, %edi
  jz 1f
  call fs_test_helper
  add $1, %eax
  add $1, %eax
  ret
1:
  mov $-1, %eax
  ret
  .size fs_test_branches, .-fs_test_branches

  .globl fs_test_loop_back
  .type fs_test_loop_back, @function
fs_test_loop_back:
  xor %eax, %eax
2:
  add %edi, %eax
  sub $1, %edi
  jnz 2b
  nopl 0(%rax,%rax,1)
  nopl 0(%rax,%rax,1)
  ret
  .size fs_test_loop_back, .-fs_test_loop_back

  .globl fs_test_jrcxz
  .type fs_test_jrcxz, @function
fs_test_jrcxz:
  jrcxz 3f
  mov %edi, %eax
  nopl 0(%rax,%rax,1)
  nopl 0(%rax,%rax,1)
3:
  ret
  .size fs_test_jrcxz, .-fs_test_jrcxz

  .globl fs_test_add_helper
  .type fs_test_add_helper, @function
fs_test_add_helper:
  lea 100(%rdi), %eax
  ret
  .size fs_test_add_helper, .-fs_test_add_helper

  .globl fs_test_tail
  .type fs_test_tail, @function
fs_test_tail:
  add $1, %edi
  jmp fs_test_add_helper
  .size fs_test_tail, .-fs_test_tail

  .globl fs_test_early_call
  .type fs_test_early_call, @function
fs_test_early_call:
  call *%rdi
  add $1, %eax
  nopl 0(%rax,%rax,1)
  nopl 0(%rax,%rax,1)
  ret
  .size fs_test_early_call, .-fs_test_early_call

  .globl fs_test_tiny
  .type fs_test_tiny, @function
fs_test_tiny:
  lea (%rdi,%rdi), %eax
  ret
  .size fs_test_tiny, .-fs_test_tiny
)");

namespace fragscope::agent {
namespace {

using Fn = int (*)(int);

// What the hooks do: call "the real function" (the trampoline) and change the answer.
Fn g_real = nullptr;
int Replacement(int x) { return g_real(x) + 1000; }

// Calls through a volatile pointer, so the compiler cannot fold the call.
int Call(Fn f, int x) {
  Fn volatile p = f;
  return p(x);
}

size_t SizeOf(void* fn) {
  // The assembly above has .size; the test states them rather than reading its own ELF.
  if (fn == reinterpret_cast<void*>(&fs_test_riprel)) return 20;
  return 0;
}

class InlinePatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char why[512] = {};
    if (!patcher_.Init(why, sizeof(why))) GTEST_SKIP() << why;
  }
  InlinePatcher patcher_;
};

void PatchCallRestore(InlinePatcher& patcher, Fn fn, size_t size, int arg, int expected) {
  SCOPED_TRACE(testing::Message() << "function at " << reinterpret_cast<void*>(fn));
  ASSERT_EQ(Call(fn, arg), expected);
  uint8_t before[kMaxPatchBytes];
  std::memcpy(before, reinterpret_cast<void*>(fn), sizeof(before));
  InlinePatch p;
  char why[512] = {};
  ASSERT_TRUE(patcher.Prepare(reinterpret_cast<void*>(fn), size,
                              reinterpret_cast<void*>(&Replacement), &p, why, sizeof(why)))
      << why;
  ASSERT_TRUE(patcher.Seal());
  EXPECT_GE(p.length, kShortJumpBytes);
  EXPECT_EQ(std::memcmp(p.original, before, p.length), 0);
  // Prepare alone changes nothing.
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(fn), before, sizeof(before)), 0);
  g_real = reinterpret_cast<Fn>(p.trampoline);
  EXPECT_EQ(Call(g_real, arg), expected) << "the trampoline is the original function";
  ASSERT_TRUE(InlinePatcher::Apply(p, why, sizeof(why))) << why;
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(fn), p.patch, p.length), 0);
  EXPECT_EQ(Call(fn, arg), expected + 1000) << "a call of the function lands in the hook";
  EXPECT_EQ(Call(g_real, arg), expected);
  // Applying twice is refused (the bytes are no longer the original ones).
  EXPECT_FALSE(InlinePatcher::Apply(p, why, sizeof(why)));
  ASSERT_TRUE(InlinePatcher::Restore(p, why, sizeof(why))) << why;
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(fn), before, sizeof(before)), 0)
      << "restore puts every original byte back";
  EXPECT_EQ(Call(fn, arg), expected);
  // The trampoline stays usable after the restore (a thread may still be inside it).
  EXPECT_EQ(Call(g_real, arg), expected);
  EXPECT_FALSE(InlinePatcher::Restore(p, why, sizeof(why)));
}

TEST_F(InlinePatchTest, RipRelativeMovAndLeaAreRelocated) {
  PatchCallRestore(patcher_, &fs_test_riprel, SizeOf(reinterpret_cast<void*>(&fs_test_riprel)), 5,
                   19);
  // The relocated operands still name the same variable.
  fs_test_value = 10;
  PatchCallRestore(patcher_, &fs_test_riprel, 0, 1, 21);
  fs_test_value = 7;
}

TEST_F(InlinePatchTest, RelativeJccAndCallAreRelocated) {
  PatchCallRestore(patcher_, &fs_test_branches, 0, 3, 102);
  PatchCallRestore(patcher_, &fs_test_branches, 0, 0, -1);
}

// Shorter than the 14-byte jump, like most exported driver functions (a register move and a
// tail call): a 5-byte jump to a relay.
TEST_F(InlinePatchTest, ShortFunctionsGetARelativeJumpToARelay) {
  PatchCallRestore(patcher_, &fs_test_tail, 8, 5, 106);
  PatchCallRestore(patcher_, &fs_test_tail, 0, 1, 102);
}

TEST_F(InlinePatchTest, RefusesWhatItCannotRelocate) {
  struct Case {
    Fn fn;
    size_t size;
    const char* reason;
  } cases[] = {
      {&fs_test_loop_back, 20, "inside the overwritten bytes"},
      {&fs_test_jrcxz, 0, "cannot be relocated"},
      {&fs_test_early_call, 16, "would return to +2, inside the overwritten bytes"},
      {&fs_test_tiny, 4, "shorter than"},
      {&fs_test_tiny, 0, "may end after"},
  };
  for (const Case& c : cases) {
    uint8_t before[8];
    std::memcpy(before, reinterpret_cast<void*>(c.fn), sizeof(before));
    InlinePatch p;
    char why[512] = {};
    EXPECT_FALSE(patcher_.Prepare(reinterpret_cast<void*>(c.fn), c.size,
                                  reinterpret_cast<void*>(&Replacement), &p, why, sizeof(why)));
    EXPECT_NE(std::string(why).find(c.reason), std::string::npos) << why;
    EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(c.fn), before, sizeof(before)), 0);
  }
  EXPECT_EQ(Call(&fs_test_loop_back, 4), 10);
}

TEST_F(InlinePatchTest, TrampolineIsWithinRipReach) {
  InlinePatch p;
  char why[512] = {};
  ASSERT_TRUE(patcher_.Prepare(reinterpret_cast<void*>(&fs_test_riprel), 0,
                               reinterpret_cast<void*>(&Replacement), &p, why, sizeof(why)))
      << why;
  const int64_t distance = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p.trampoline)) -
                           static_cast<int64_t>(p.target);
  EXPECT_LT(distance < 0 ? -distance : distance, int64_t{1} << 31);
}

}  // namespace
}  // namespace fragscope::agent
#endif  // __x86_64__
