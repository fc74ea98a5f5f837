// Debug checks of the agent's own invariants (a caller's precondition, a state a lock-free
// structure must be in). On in test and sanitizer builds, where a broken invariant should stop
// the test at its cause; compiled out of release builds, where the agent must never take the
// program down with it. CMake's FRAGSCOPE_DEBUG_CHECKS decides (ON for every build type but
// Release).
//
// A failed check writes "fragscope: internal check failed: COND (FILE:LINE)" with AgentLog and
// aborts. Off, the condition is still compiled (so it cannot rot) but never evaluated.
#ifndef FRAGSCOPE_INTERPOSE_AGENT_CHECK_H_
#define FRAGSCOPE_INTERPOSE_AGENT_CHECK_H_

namespace fragscope::agent {

[[noreturn]] void AgentCheckFailed(const char* condition, const char* file, int line);

}  // namespace fragscope::agent

#if defined(FRAGSCOPE_DEBUG_CHECKS) && FRAGSCOPE_DEBUG_CHECKS
#define FRAGSCOPE_DCHECK(condition)                                         \
  do {                                                                      \
    if (__builtin_expect(!(condition), 0)) {                                \
      ::fragscope::agent::AgentCheckFailed(#condition, __FILE__, __LINE__); \
    }                                                                       \
  } while (false)
#else
#define FRAGSCOPE_DCHECK(condition) \
  do {                              \
    (void)sizeof(!(condition));     \
  } while (false)
#endif

#endif  // FRAGSCOPE_INTERPOSE_AGENT_CHECK_H_
