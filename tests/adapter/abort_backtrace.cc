// Preloaded into the programs of the real-PyTorch tests: when one aborts (SIGABRT, e.g.
// "terminate called without an active exception"), prints the aborting thread's native stack to
// stderr before the abort goes on, so a failure seen once in a loaded CTest run says where it
// came from. Python's faulthandler covers Python frames only, and it is off by the time the
// interpreter has finalized.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

namespace {

void OnAbort(int signal_number) {
  static const char kHead[] = "abort_backtrace: native stack of the aborting thread:\n";
  (void)!write(STDERR_FILENO, kHead, sizeof(kHead) - 1);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

__attribute__((constructor)) void InstallAbortHandler() {
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now: the first call allocates, not safe in a handler
  struct sigaction action = {};
  action.sa_handler = OnAbort;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGABRT, &action, nullptr);
}

}  // namespace
