// Call-stack capture: no allocation, no locks, async-signal-safe. Frames inside the agent itself
// (built with frame pointers) are skipped; from the caller's frame on, each step follows the
// frame's call-frame information (unwind_rules.h: a cached rule, one load per frame after its
// first walk): frame-pointer frames by their frame record, frames of code built without frame
// pointers (-O2 -fomit-frame-pointer, most distribution libraries) from the stack pointer.
// Every address read is checked against the thread's stack bounds first. Where call-frame
// information cannot be read (glibc before 2.35, aarch64) the walk follows frame pointers
// alone, and a frame without one ends it.
//
// Each walk says how it ended (StackEnd): the thread's first frame, the depth limit, a pc with
// no unwind information, an unreadable frame, or an unsupported one (a signal frame).
//
// Thread safety: all functions are thread-safe; bounds are cached per thread.
#ifndef FRAGSCOPE_INTERPOSE_STACK_CAPTURE_H_
#define FRAGSCOPE_INTERPOSE_STACK_CAPTURE_H_

#include <cstdint>

#include "recording/api.h"

namespace fragscope::agent {

// Address range [begin, end) whose return addresses are dropped from the start of a stack.
void SetSkippedRange(uintptr_t begin, uintptr_t end);

// Writes up to `max_frames` return addresses (innermost first, the caller of the agent first)
// into `pcs`; returns how many. The first call on a thread reads its stack bounds
// (pthread_getattr_np, which allocates once); later calls make no system or library calls.
// Sets *hash to HashStack(pcs, count) (stack_table.h; 0 for no frames), computed during the
// walk: the hash's multiplies then overlap the walk's chain of dependent loads (32 frames: the
// walk plus a separate hash cost ~72 ns per event in perf of the depth workload).
// Sets *end to how the walk ended (kOutermost: the thread's first frame was reached).
int CaptureStack(uint64_t* pcs, int max_frames, uint64_t* hash, StackEnd* end);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_STACK_CAPTURE_H_
