// Helpers shared by the attach-by-injection tests: whether this machine lets a test inject
// (Yama's ptrace_scope, a trial PTRACE_SEIZE, Capstone). The control-socket client is
// attach_client.h.
#ifndef FRAGSCOPE_TESTS_ATTACH_ATTACH_TEST_UTIL_H_
#define FRAGSCOPE_TESTS_ATTACH_ATTACH_TEST_UTIL_H_

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "attach_client.h"
#include "traced_process.h"

namespace fragscope::agent_test {

// Why this machine cannot run these tests, or "".
inline std::string WhyNotPossible() {
  std::ifstream scope_file("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (scope_file >> scope) {
    // `fragscope attach` runs as a sibling of the program here, not as its parent.
    if (scope == 3 || (scope >= 1 && geteuid() != 0)) {
      return "kernel.yama.ptrace_scope=" + std::to_string(scope) +
             " does not let fragscope attach ptrace a process that is not its child";
    }
  }
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  std::string why;
  if (ptrace(PTRACE_SEIZE, child, nullptr, nullptr) != 0) {
    why = std::string("a trial PTRACE_SEIZE of a child failed: ") + strerror(errno) +
          " (a container without SYS_PTRACE, or a seccomp profile)";
  } else {
    ptrace(PTRACE_DETACH, child, nullptr, nullptr);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (!why.empty()) return why;
  void* capstone = dlopen("libcapstone.so.4", RTLD_NOW | RTLD_LOCAL);
  if (capstone == nullptr) capstone = dlopen("libcapstone.so.5", RTLD_NOW | RTLD_LOCAL);
  if (capstone == nullptr) return "Capstone (libcapstone) is not installed";
  return "";
}

#define SKIP_IF_IMPOSSIBLE()                                                   \
  do {                                                                         \
    if (std::string why = WhyNotPossible(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

inline bool WaitForStreaming(const std::string& socket_path) {
  return WaitForStatus(socket_path, "ok streaming");
}

}  // namespace fragscope::agent_test

#endif  // FRAGSCOPE_TESTS_ATTACH_ATTACH_TEST_UTIL_H_
