// Functions built with -O2 -fomit-frame-pointer (tests/agent/CMakeLists.txt), the way most
// release builds are, for the call-frame-information walk of unwind_rules_test.cc. Each level
// calls the next and does work after the call, so none of the calls is a tail call.
#include "no_frame_pointer_chain.h"

#include <execinfo.h>

namespace fragscope::agent::testing {
namespace {

// Calls `walk` and, right after, glibc's backtrace(), which unwinds with libgcc's
// call-frame-information unwinder: the oracle the test compares with.
[[gnu::noinline]] int Innermost(const ChainProbe& probe, int seed) {
  probe.walk(probe.context);
  probe.oracle_count = backtrace(probe.oracle, probe.oracle_capacity);
  asm volatile("" ::: "memory");
  return seed + 1;
}

[[gnu::noinline]] int HoldsAFakeFrameRecord(const ChainProbe& probe, int seed) {
  // A frame-pointer walk would read this {saved fp, return address} record, since rbp points at
  // it during the call below; the frame's call-frame information says rbp was saved instead.
  uintptr_t fake_record[2] = {0, probe.fake_return_address};
  asm volatile("mov %0, %%rbp" : : "r"(fake_record) : "rbp", "memory");
  const int r = Innermost(probe, seed * 3);
  asm volatile("" : : "r"(fake_record) : "memory");
  return r + seed;
}

[[gnu::noinline]] int WithLargeFrame(const ChainProbe& probe, int seed) {
  // A CFA offset beyond the small ones: the buffer's address escapes, so all of it is on the
  // stack whatever the compiler knows about `seed`.
  volatile char buffer[12000];  // a frame larger than 4 KiB (the rule cache held no more)
  asm volatile("" : : "r"(buffer) : "memory");
  buffer[seed & 1023] = static_cast<char>(seed);
  const int r = HoldsAFakeFrameRecord(probe, seed + buffer[seed & 1023]);
  return r * 2 + buffer[7];
}

[[gnu::noinline]] int Outer(const ChainProbe& probe, int seed) {
  const int r = WithLargeFrame(probe, seed ^ 5);
  return r - seed;
}

}  // namespace

int RunChain(const ChainProbe& probe) { return Outer(probe, 2) + 1; }

}  // namespace fragscope::agent::testing
