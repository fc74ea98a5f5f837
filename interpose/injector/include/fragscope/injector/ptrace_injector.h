// Attach by injection (library fragscope_injector, used by `fragscope attach`): loads
// libfragscope.so into a running process that was started without it, and installs / removes
// the agent's in-place patches of libcuda (x86-64 Linux only). It speaks to the agent only
// through the attach contract (fragscope/attach_contract.h).
//
// Load: one thread that waits in a system call (so it holds no allocator or loader lock in
// user code) is stopped with PTRACE_SEIZE + PTRACE_INTERRUPT and made to call
// dlopen(agent, RTLD_NOW) and then fragscope_inject_start() (fragscope/attach_contract.h):
// its registers are saved, the call is set up on its stack below the red zone with return address
// 0, and the SIGSEGV at address 0 ends the call; then its registers are restored, so an
// interrupted system call restarts. dlopen is found in the process's libc from the ELF file on
// disk plus the load address in /proc/PID/maps. The other threads keep running meanwhile.
// Patch: every thread is stopped; a thread whose instruction pointer lies inside the bytes to
// overwrite (not at their first byte) is single-stepped out; the bytes are written with
// PTRACE_POKEDATA; every thread is let go.
// Unpatch (detach): the same, writing the original bytes back, only where our patch still is.
// The agent library stays loaded (dlclose would be unsafe: threads may be inside a wrapper or
// a trampoline, and the drain thread runs); a later attach reuses it.
#ifndef FRAGSCOPE_INJECTOR_PTRACE_INJECTOR_H_
#define FRAGSCOPE_INJECTOR_PTRACE_INJECTOR_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fragscope/attach_contract.h"

namespace fragscope::injector {

struct InjectedPatch {
  std::string name;  // libcuda's exported symbol
  uint64_t address = 0;
  std::vector<uint8_t> original;
  std::vector<uint8_t> patch;
};

struct InjectedAgent {
  std::vector<InjectedPatch> patches;
  uint32_t refused = 0;     // tracked functions that could not be patched
  std::string refused_why;  // "name: reason; ..."
  std::string library;      // the agent's path, as the process loaded it
};

// "" when this process may ptrace `pid` as far as the kernel's settings say; otherwise what
// stands in the way and how to change it (kernel.yama.ptrace_scope).
std::string PtraceRestriction(pid_t pid);

// Loads `agent_path` (absolute) into `pid` and writes the patches it prepared. On error nothing
// is patched (the library may stay loaded, dormant).
absl::Status InjectAgent(pid_t pid, const std::string& agent_path, InjectedAgent* out);

// After InjectAgent: makes the agent import PyTorch's caching-allocator state (a CPython process
// with torch and CUDA initialized; interpose/src/python/python_state.h) into its live table before
// the stream starts. A borrowed thread waits in the agent at most `wait_ms` for the GIL (taken by a
// thread of the agent's own). `adapter_dir` (the PyTorch adapter's folder, "" for none) gives
// it the snapshot diff its OOM observer uses. *out says what was imported, or why nothing was;
// an error status only when the call itself could not be made.
absl::Status ImportTorchState(pid_t pid, const std::string& agent_path, uint32_t wait_ms,
                              const std::string& adapter_dir, FragscopeTorchImport* out);

// Puts the original bytes back (detach).
absl::Status RemovePatches(pid_t pid, const InjectedAgent& agent);

// The run-time address of `symbol` (.dynsym, else .symtab) in the object mapped in `pid` whose
// file name starts with `file_prefix` ("libc.so", "libcuda.so") or whose path is exactly
// `file_prefix` when it begins with '/'. nullopt if not mapped or not found.
std::optional<uint64_t> FindSymbolInProcess(pid_t pid, const std::string& file_prefix,
                                            const std::string& symbol);

// Reads the process's memory through /proc/PID/mem.
bool ReadProcessMemory(pid_t pid, uint64_t address, void* out, size_t size);

}  // namespace fragscope::injector

#endif  // FRAGSCOPE_INJECTOR_PTRACE_INJECTOR_H_
