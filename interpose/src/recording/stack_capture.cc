#include "recording/stack_capture.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "recording/stack_hash.h"
#include "recording/unwind_rules.h"

extern "C" void* __libc_stack_end;  // glibc: top of the main thread's stack

namespace fragscope::agent {
namespace {

constinit std::atomic<uintptr_t> g_skip_begin{0};
constinit std::atomic<uintptr_t> g_skip_end{0};

// 0: unknown, 1: known (t_stack_high valid), 2: unavailable (stacks off on this thread).
thread_local constinit int t_bounds_state __attribute__((tls_model("initial-exec"))) = 0;
thread_local constinit uintptr_t t_stack_high __attribute__((tls_model("initial-exec"))) = 0;

[[gnu::noinline]] bool LoadBoundsSlow() {
  if (static_cast<pid_t>(syscall(SYS_gettid)) == getpid()) {
    // The main thread: pthread_getattr_np would parse /proc/self/maps; the loader knows the top.
    t_stack_high = reinterpret_cast<uintptr_t>(__libc_stack_end);
    t_bounds_state = t_stack_high != 0 ? 1 : 2;
    return t_bounds_state == 1;
  }
  pthread_attr_t attr;
  t_bounds_state = 2;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr != nullptr) {
      t_stack_high = reinterpret_cast<uintptr_t>(addr) + size;
      t_bounds_state = 1;
    }
    pthread_attr_destroy(&attr);
  }
  return t_bounds_state == 1;
}

// After a thread's first capture: one thread-local load (a call was 0.8 % of the depth
// workload's samples).
inline bool LoadBounds() {
  if (__builtin_expect(t_bounds_state != 0, 1)) return t_bounds_state == 1;
  return LoadBoundsSlow();
}

// A frame record is {saved fp, return address} on x86-64 and aarch64 alike. A record address
// must be aligned and at most `last_record` (the highest whole record below the stack's top).
[[gnu::always_inline]] inline bool ValidRecord(uintptr_t p, uintptr_t last_record) {
  return (p & (sizeof(uintptr_t) - 1)) == 0 && p <= last_record;
}

// One frame of the caller's walk: appends the return address at *fp to pcs[*count], feeds it to
// *lane and moves *fp up the chain. False when the walk ends here (an invalid record, a zero
// return address, or a saved fp that does not move up the stack).
[[gnu::always_inline]] inline bool WalkFrame(uintptr_t* fp, uintptr_t last_record, uint64_t* pcs,
                                             int* count, uint64_t* lane) {
  const uintptr_t at = *fp;
  if (!ValidRecord(at, last_record)) return false;
  const uintptr_t* record = reinterpret_cast<const uintptr_t*>(at);
  const uintptr_t next = record[0];
  const uintptr_t pc = record[1];
  if (pc == 0) return false;
  pcs[(*count)++] = pc;
  *lane = stack_hash::Step(*lane, pc);
  if (next <= at) return false;
  *fp = next;
  return true;
}

// The walk over call-frame information: each frame's rule (unwind_rules.h, a cache load after
// its first use) says where its caller's frame starts. A frame built with frame pointers has
// the frame-pointer rule and takes the same step as the frame-pointer walk; a frame without
// them is stepped from the stack pointer. `pc`, `sp` and `fp` are the return address into the
// current frame, its stack pointer and its frame-pointer register as the callee left them.
[[gnu::always_inline]] inline int WalkWithRules(uintptr_t pc, uintptr_t sp, uintptr_t fp,
                                                uintptr_t high, uint64_t* pcs, int max_frames,
                                                uint64_t* hash, StackEnd* end) {
  using namespace stack_hash;
  uint64_t lanes[4] = {kSeed[0], kSeed[1], kSeed[2], kSeed[3]};
  int count = 0;
  for (;;) {
    if (pc == 0) {
      *end = StackEnd::kOutermost;
      break;
    }
    if (count == max_frames) {
      *end = StackEnd::kDepthLimit;
      break;
    }
    pcs[count] = pc;
    lanes[count & 3] = Step(lanes[count & 3], pc);
    ++count;
    // Cached rules are the common case: the frame-pointer rule compared as packed bits (the
    // step goes on speculatively while the lookup's load completes), a stack-pointer rule's
    // offset taken with one shift.
    UnwindRule rule;
    uint32_t bits = 0;
    uintptr_t cfa;
    if (__builtin_expect(CachedReturnRuleBits(pc, &bits), 1)) {
      if (__builtin_expect(bits == internal::kFramePointerRuleBits, 1)) {
        cfa = fp + 16;
        rule.fp_offset = -16;
        goto step;
      }
      if ((bits & 7) == static_cast<uint32_t>(UnwindRule::Kind::kSpBased)) {
        cfa = sp + ((bits >> 8) << 3);
        rule.fp_offset = -static_cast<int32_t>((bits >> 3) & 31) * 8;
        goto step;
      }
      rule = internal::UnpackRuleBits(bits);
    } else {
      rule = internal::FindReturnRuleSlow(pc);
    }
    if (rule.kind == UnwindRule::Kind::kSpBased) {
      cfa = sp + static_cast<uintptr_t>(rule.cfa_offset);
    } else if (rule.kind == UnwindRule::Kind::kFpBased) {
      cfa = fp + static_cast<uintptr_t>(rule.cfa_offset);
    } else {
      *end = rule.kind == UnwindRule::Kind::kOutermost ? StackEnd::kOutermost
             : rule.kind == UnwindRule::Kind::kNoInfo  ? StackEnd::kNoUnwindInfo
                                                       : StackEnd::kUnsupported;
      break;
    }
  step:
    // The return address (at CFA - 8) and the saved frame pointer must lie in this thread's
    // stack above the current frame; the caller's frame starts above it.
    const uintptr_t fp_at = cfa + static_cast<intptr_t>(rule.fp_offset);
    if ((cfa & 7) != 0 || cfa > high || cfa < sp + 8 || cfa - 8 < sp ||
        (rule.fp_offset != 0 && fp_at < sp)) {
      *end = StackEnd::kUnreadable;
      break;
    }
    pc = reinterpret_cast<const uintptr_t*>(cfa)[-1];
    if (rule.fp_offset != 0) fp = *reinterpret_cast<const uintptr_t*>(fp_at);
    sp = cfa;
  }
  if (count > 0) *hash = Finish(lanes[0], lanes[1], lanes[2], lanes[3], count);
  return count;
}

// The frame-pointer walk alone, where no call-frame information can be read (aarch64, glibc
// before 2.35): each record is {saved fp, return address}.
int WalkFramePointers(uintptr_t fp, uintptr_t last_record, uint64_t* pcs, int max_frames,
                      uint64_t* hash, StackEnd* end) {
  // As tight as it gets: about 18 instructions a frame with its hash step into lane count % 4
  // (four independent multiply chains). The frame limit is checked once per four frames while
  // four more fit, then per frame. WalkFrame takes its state by pointer to locals, which
  // inlining turns back into registers.
  using namespace stack_hash;
  uint64_t lane0 = kSeed[0], lane1 = kSeed[1], lane2 = kSeed[2], lane3 = kSeed[3];
  int count = 0;
  bool more = true;
  while (count + 4 <= max_frames) {
    if (!WalkFrame(&fp, last_record, pcs, &count, &lane0) ||
        !WalkFrame(&fp, last_record, pcs, &count, &lane1) ||
        !WalkFrame(&fp, last_record, pcs, &count, &lane2) ||
        !WalkFrame(&fp, last_record, pcs, &count, &lane3)) {
      more = false;
      break;
    }
  }
  // At most three frames are left below the limit; count % 4 is 0 here unless the walk ended.
  if (more && count < max_frames && WalkFrame(&fp, last_record, pcs, &count, &lane0) &&
      count < max_frames && WalkFrame(&fp, last_record, pcs, &count, &lane1) &&
      count < max_frames) {
    more = WalkFrame(&fp, last_record, pcs, &count, &lane2);
  }
  if (more && count == max_frames) {
    *end = StackEnd::kDepthLimit;
  } else {
    // A zero return address ends a chain on purpose (_start clears the frame pointer);
    // anything else is a frame we cannot step past without call-frame information.
    const bool outermost =
        ValidRecord(fp, last_record) && reinterpret_cast<const uintptr_t*>(fp)[1] == 0;
    *end = outermost || (count > 0 && pcs[count - 1] == 0) ? StackEnd::kOutermost
                                                           : StackEnd::kUnsupported;
  }
  if (count > 0) *hash = Finish(lane0, lane1, lane2, lane3, count);
  return count;
}

}  // namespace

void SetSkippedRange(uintptr_t begin, uintptr_t end) {
  g_skip_begin.store(begin, std::memory_order_relaxed);
  g_skip_end.store(end, std::memory_order_relaxed);
}

// noinline: its own frame is the first one walked, and always skipped.
__attribute__((noinline)) int CaptureStack(uint64_t* pcs, int max_frames, uint64_t* hash,
                                           StackEnd* end) {
  *hash = 0;
  *end = StackEnd::kUnspecified;
  if (max_frames <= 0 || !LoadBounds()) return 0;
  const uintptr_t skip_begin = g_skip_begin.load(std::memory_order_relaxed);
  const uintptr_t skip_end = g_skip_end.load(std::memory_order_relaxed);
  const uintptr_t high = t_stack_high;
  uintptr_t fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  // Each step must move up the stack, stay aligned and below its top (ValidRecord).
  const uintptr_t last_record = high - 2 * sizeof(uintptr_t);  // the highest valid record
  // The agent's own frames (a handful, built with frame pointers) first. The record of the
  // outermost one holds the caller's return address and frame pointer, and ends where the
  // caller's stack pointer was: the exact state the walk starts from.
  for (int steps = 0; steps < 16; ++steps) {
    if (!ValidRecord(fp, last_record)) {
      *end = StackEnd::kUnreadable;
      return 0;
    }
    const uintptr_t* record = reinterpret_cast<const uintptr_t*>(fp);
    if (record[1] < skip_begin || record[1] >= skip_end) break;
    if (record[0] <= fp) {
      *end = StackEnd::kUnreadable;
      return 0;
    }
    fp = record[0];
  }
  if (CfiUnwindAvailable()) {
    const uintptr_t* record = reinterpret_cast<const uintptr_t*>(fp);
    return WalkWithRules(record[1], fp + 2 * sizeof(uintptr_t), record[0], high, pcs, max_frames,
                         hash, end);
  }
  return WalkFramePointers(fp, last_record, pcs, max_frames, hash, end);
}

}  // namespace fragscope::agent
