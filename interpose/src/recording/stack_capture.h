// Call-stack capture by walking the frame-pointer chain: about a nanosecond per frame, no
// allocation, no locks, async-signal-safe. Every frame pointer is checked against the calling
// thread's stack bounds before it is read, so code built without frame pointers ends the walk
// early instead of faulting. Frames inside the agent itself are skipped.
//
// Limitation: a module compiled with -fomit-frame-pointer (the default for many distribution
// libraries) ends the walk at its first frame. The hooks that matter are entered directly from
// the application (runtime API) so its frames above the hook are usually intact.
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
