// exec and _exit, interposed so that a process's stream ends where its image does.
//
// An exec in place replaces the image with everything the agent had not written yet: the ring's
// records, the write buffer, the drain thread. So the wrappers ship everything and write End
// (End.exec) first, and tell the next image which one it is (FRAGSCOPE_EXEC_IMAGE=PID:K in its
// environment), so that its file does not replace this one's (config.h ExecImagePath) and its
// Hello says it. A failed exec takes the End back (drain.h).
//
// _exit (and _Exit) skip atexit handlers and destructors, where the agent writes End: a forked
// worker leaving with os._exit (multiprocessing) left its last events in the ring. The wrapper
// ends the stream first, with the exit status.
//
// Neither runs in a child that shares its parent's memory (vfork, posix_spawn: Python's
// subprocess): the stream and its lock are the parent's. Nor over a hook the calling thread is
// inside (a signal handler that execs or exits): the drain lock may be the interrupted code's.
#include <errno.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "agent.h"
#include "config.h"
#include "hooks/driver_api.h"
#include "hooks/hook_exports.h"
#include "recording/recorder.h"
#include "shipping/drain.h"

namespace fragscope::agent {
namespace {

using ExecveFn = int (*)(const char*, char* const[], char* const[]);
using ExecvpeFn = int (*)(const char*, char* const[], char* const[]);
using FexecveFn = int (*)(int, char* const[], char* const[]);
using ExitFn = void (*)(int);

constinit std::atomic<ExecveFn> g_execve{nullptr};
constinit std::atomic<ExecvpeFn> g_execvpe{nullptr};
constinit std::atomic<FexecveFn> g_fexecve{nullptr};
constinit std::atomic<ExitFn> g_exit{nullptr};
constinit std::atomic<ExitFn> g_Exit{nullptr};

// Whether this thread may end the stream now (see the file comment).
bool MayEndStream() {
  if (g_agent_init.load(std::memory_order_acquire) != 2) return false;
  if (!Agent().recording.load(std::memory_order_acquire) || !OwnsHandlerTable()) return false;
  const ThreadState& t = CurrentThread();
  return t.depth == 0 && t.guard == 0 && t.signal_over_hook == 0;
}

// An array of `count` pointers from mmap (async-signal-safe, unlike malloc: exec may be called
// from a handler or after fork in a threaded program). Freed by the caller with munmap.
char** MapPointers(size_t count, size_t* bytes) {
  *bytes = (count * sizeof(char*) + 4095) & ~size_t{4095};
  void* mem = mmap(nullptr, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return mem == MAP_FAILED ? nullptr : static_cast<char**>(mem);
}

// The exec of one image, around `exec(env)`: ends the stream, passes the image count on in
// the environment, and takes the End back if the exec returns (it failed).
template <typename Exec>
int ExecImage(char* const envp[], Exec exec) {
  if (!MayEndStream()) return exec(envp);
  AgentCodeScope agent_code;  // CUDA calls of our own (none expected) are not events
  const bool had_stream = DrainBeforeExec();
  const uint32_t next = Agent().config.exec_image + (had_stream ? 1 : 0);
  char** env = nullptr;
  size_t env_bytes = 0;
  char entry[64];
  if (next > 0) {
    size_t n = 0;
    while (envp != nullptr && envp[n] != nullptr) ++n;
    env = MapPointers(n + 2, &env_bytes);
    if (env != nullptr) {
      snprintf(entry, sizeof(entry), "%s=%d:%u", kExecImageVariable, static_cast<int>(getpid()),
               next);
      const size_t name_len = strlen(kExecImageVariable);
      size_t o = 0;
      for (size_t i = 0; i < n; ++i) {
        const bool ours =
            strncmp(envp[i], kExecImageVariable, name_len) == 0 && envp[i][name_len] == '=';
        if (!ours) env[o++] = envp[i];
      }
      env[o++] = entry;
      env[o] = nullptr;
    }
  }
  const int r = exec(env != nullptr ? env : envp);
  const int saved_errno = errno;
  if (env != nullptr) munmap(env, env_bytes);
  DrainAfterFailedExec();
  errno = saved_errno;
  return r;
}

// _exit and _Exit: End with the status, then leave.
[[noreturn]] void ExitImage(std::atomic<ExitFn>& cache, const char* name, int status) {
  if (MayEndStream()) {
    AgentCodeScope agent_code;
    DrainWriteEnd(status);
  }
  ExitFn real = NextDefinition(cache, name);
  if (real != nullptr) real(status);
  for (;;) syscall(SYS_exit_group, status);  // no libc _exit found: leave all the same
}

// The arguments of execl/execlp/execle as an array (mmap, as above). nullptr if out of memory.
char** CollectArgs(const char* arg0, va_list ap, char* const** envp_out, size_t* bytes) {
  va_list count_ap;
  va_copy(count_ap, ap);
  size_t n = 1;
  while (va_arg(count_ap, char*) != nullptr) ++n;
  va_end(count_ap);
  char** argv = MapPointers(n + 1, bytes);
  if (argv == nullptr) return nullptr;
  argv[0] = const_cast<char*>(arg0);
  for (size_t i = 1; i < n; ++i) argv[i] = va_arg(ap, char*);
  argv[n] = nullptr;
  (void)va_arg(ap, char*);  // the terminating null
  if (envp_out != nullptr) *envp_out = va_arg(ap, char* const*);
  return argv;
}

// execl, execlp, execle: their argument list as an array, then `exec(argv, envp)`, envp being
// the list's own (after its null) with `with_env`, else environ.
template <typename Exec>
int ExecArgList(const char* arg0, va_list ap, bool with_env, Exec exec) {
  size_t bytes = 0;
  char* const* envp = environ;
  char** argv = CollectArgs(arg0, ap, with_env ? &envp : nullptr, &bytes);
  if (argv == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  const int r = exec(argv, envp);
  const int saved_errno = errno;
  munmap(argv, bytes);
  errno = saved_errno;
  return r;
}

int CallExecve(const char* path, char* const argv[], char* const envp[]) {
  ExecveFn real = NextDefinition(g_execve, "execve");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return ExecImage(envp, [&](char* const* env) { return real(path, argv, env); });
}

int CallExecvpe(const char* file, char* const argv[], char* const envp[]) {
  ExecvpeFn real = NextDefinition(g_execvpe, "execvpe");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return ExecImage(envp, [&](char* const* env) { return real(file, argv, env); });
}

}  // namespace
}  // namespace fragscope::agent

using fragscope::agent::CallExecve;
using fragscope::agent::CallExecvpe;
using fragscope::agent::ExecArgList;

extern "C" FRAGSCOPE_HIDDEN int fs_execve(const char* path, char* const argv[], char* const envp[]);
FRAGSCOPE_EXPORT_AS("fs_execve", "execve");
extern "C" int fs_execve(const char* path, char* const argv[], char* const envp[]) {
  return CallExecve(path, argv, envp);
}

extern "C" FRAGSCOPE_HIDDEN int fs_execv(const char* path, char* const argv[]);
FRAGSCOPE_EXPORT_AS("fs_execv", "execv");
extern "C" int fs_execv(const char* path, char* const argv[]) {
  return CallExecve(path, argv, environ);
}

extern "C" FRAGSCOPE_HIDDEN int fs_execvpe(const char* file, char* const argv[],
                                           char* const envp[]);
FRAGSCOPE_EXPORT_AS("fs_execvpe", "execvpe");
extern "C" int fs_execvpe(const char* file, char* const argv[], char* const envp[]) {
  return CallExecvpe(file, argv, envp);
}

extern "C" FRAGSCOPE_HIDDEN int fs_execvp(const char* file, char* const argv[]);
FRAGSCOPE_EXPORT_AS("fs_execvp", "execvp");
extern "C" int fs_execvp(const char* file, char* const argv[]) {
  return CallExecvpe(file, argv, environ);
}

extern "C" FRAGSCOPE_HIDDEN int fs_fexecve(int fd, char* const argv[], char* const envp[]);
FRAGSCOPE_EXPORT_AS("fs_fexecve", "fexecve");
extern "C" int fs_fexecve(int fd, char* const argv[], char* const envp[]) {
  using fragscope::agent::g_fexecve;
  auto real = fragscope::agent::NextDefinition(g_fexecve, "fexecve");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return fragscope::agent::ExecImage(envp, [&](char* const* env) { return real(fd, argv, env); });
}

// The variadic forms, as glibc builds them: an argument array, then the v form.
extern "C" FRAGSCOPE_HIDDEN int fs_execl(const char* path, const char* arg, ...);
FRAGSCOPE_EXPORT_AS("fs_execl", "execl");
extern "C" int fs_execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  const int r = ExecArgList(arg, ap, /*with_env=*/false, [&](char* const* argv, char* const* env) {
    return CallExecve(path, argv, env);
  });
  va_end(ap);
  return r;
}

extern "C" FRAGSCOPE_HIDDEN int fs_execlp(const char* file, const char* arg, ...);
FRAGSCOPE_EXPORT_AS("fs_execlp", "execlp");
extern "C" int fs_execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  const int r = ExecArgList(arg, ap, /*with_env=*/false, [&](char* const* argv, char* const* env) {
    return CallExecvpe(file, argv, env);
  });
  va_end(ap);
  return r;
}

extern "C" FRAGSCOPE_HIDDEN int fs_execle(const char* path, const char* arg, ...);
FRAGSCOPE_EXPORT_AS("fs_execle", "execle");
extern "C" int fs_execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  const int r = ExecArgList(arg, ap, /*with_env=*/true, [&](char* const* argv, char* const* env) {
    return CallExecve(path, argv, env);
  });
  va_end(ap);
  return r;
}

extern "C" FRAGSCOPE_HIDDEN void fs__exit(int status);
FRAGSCOPE_EXPORT_AS("fs__exit", "_exit");
extern "C" void fs__exit(int status) {
  fragscope::agent::ExitImage(fragscope::agent::g_exit, "_exit", status);
}

extern "C" FRAGSCOPE_HIDDEN void fs__Exit(int status);
FRAGSCOPE_EXPORT_AS("fs__Exit", "_Exit");
extern "C" void fs__Exit(int status) {
  fragscope::agent::ExitImage(fragscope::agent::g_Exit, "_Exit", status);
}
