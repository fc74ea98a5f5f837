// What an injected agent hands to `fragscope attach` (viewer-cli/ptrace_injector.cc), which
// reads it from the process's memory: the in-place patches the agent prepared for libcuda's
// tracked functions (inject_attach.cc), for the attach to write while every thread is stopped
// and to undo at detach. Plain C layout, shared by both sides; bump kFragscopeInjectAbi when it
// changes.
#ifndef FRAGSCOPE_INTERPOSE_INJECT_ABI_H_
#define FRAGSCOPE_INTERPOSE_INJECT_ABI_H_

#include <cstdint>

inline constexpr uint64_t kFragscopeInjectMagic = 0x31304a4e49534653ull;  // "FSINJ01"
inline constexpr uint32_t kFragscopeInjectAbi = 1;
inline constexpr int kFragscopeInjectMaxPatches = 96;
inline constexpr char kFragscopeInjectEntry[] = "fragscope_inject_start";

struct FragscopeInjectPatch {
  uint64_t address;  // the function's first byte in libcuda
  uint32_t length;   // bytes to replace (whole instructions, >= 5)
  uint32_t reserved;
  uint8_t original[32];  // what is there now
  uint8_t patch[32];     // the jump to the agent's wrapper (inline_patch.h), int3-padded
  char name[64];         // exported symbol
};

struct FragscopeInjectTable {
  uint64_t magic;
  uint32_t abi;
  int32_t status;  // 0: patches ready; otherwise nothing to patch, `message` says why
  uint32_t count;
  uint32_t refused;    // tracked functions libcuda exports that could not be patched
  char message[4096];  // the failure, or "name: reason; ..." for the refused ones
  FragscopeInjectPatch patches[kFragscopeInjectMaxPatches];
};

#endif  // FRAGSCOPE_INTERPOSE_INJECT_ABI_H_
