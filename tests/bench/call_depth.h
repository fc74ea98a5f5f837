// Runs a callable `depth` frames below the caller, so that a stack walk (the agent's, or
// heaptrack's) has a known number of frames to cover. Shared by the hook benchmark and the
// heaptrack comparison workload so both measure the same call depth.
#ifndef FRAGSCOPE_TESTS_BENCH_CALL_DEPTH_H_
#define FRAGSCOPE_TESTS_BENCH_CALL_DEPTH_H_

namespace fragscope::bench {

// noinline and an empty asm after the recursive call: the compiler may neither inline the
// recursion nor turn it into a loop or a tail call, so every level is a real frame, with or
// without frame pointers (the workload is built both ways).
template <typename Fn>
__attribute__((noinline)) void AtDepth(int depth, Fn& fn) {
  if (depth <= 0) {
    fn();
  } else {
    AtDepth(depth - 1, fn);
  }
  asm volatile("" ::: "memory");
}

}  // namespace fragscope::bench

#endif  // FRAGSCOPE_TESTS_BENCH_CALL_DEPTH_H_
