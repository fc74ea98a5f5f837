// The agent's side of attach by injection (`fragscope attach PID` on a process started without
// the agent; interpose/injector/ is the other side).
//
// The attach command dlopen()s libfragscope.so into the stopped process and calls
// fragscope_inject_start() (fragscope/attach_contract.h) on one of its threads. That starts the
// agent dormant (AgentStartInjected) and prepares an in-place patch for every tracked driver
// function the loaded libcuda exports (inline_patch.h): the trampoline becomes the wrapper's real
// function, the jump bytes are returned for the attach command to write while all threads are
// stopped. Called again on a later attach, it only clears the live table (the patches were removed
// at the previous detach, so what it holds is stale) and returns the same patches.
#ifndef FRAGSCOPE_INTERPOSE_INJECT_ATTACH_H_
#define FRAGSCOPE_INTERPOSE_INJECT_ATTACH_H_

namespace fragscope::agent {

// True when this library was loaded after the process started (dlopen), not preloaded: it comes
// after libc in the link map. Computed once.
bool LoadedIntoRunningProcess();

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_INJECT_ATTACH_H_
