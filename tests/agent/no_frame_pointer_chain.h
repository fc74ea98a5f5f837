// A call chain built without frame pointers (no_frame_pointer_chain.cc), for stack-walk tests.
#ifndef FRAGSCOPE_TESTS_AGENT_NO_FRAME_POINTER_CHAIN_H_
#define FRAGSCOPE_TESTS_AGENT_NO_FRAME_POINTER_CHAIN_H_

#include <cstdint>

namespace fragscope::agent::testing {

struct ChainProbe {
  void (*walk)(void* context);  // called four levels down the chain
  void* context;
  uintptr_t fake_return_address;  // planted where a frame-pointer walk would look
  void** oracle;                  // backtrace() from the same frame, right after walk
  int oracle_capacity;
  mutable int oracle_count = 0;
};

// Runs Outer -> WithLargeFrame -> HoldsAFakeFrameRecord -> Innermost, which calls probe.walk
// and then backtrace(). Returns a value derived from every level.
int RunChain(const ChainProbe& probe);

}  // namespace fragscope::agent::testing

#endif  // FRAGSCOPE_TESTS_AGENT_NO_FRAME_POINTER_CHAIN_H_
