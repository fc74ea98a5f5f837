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

// PyTorch's caching-allocator state, imported into the injected agent's live table before its
// first snapshot (python_state.h). `fragscope attach` calls kFragscopeTorchImportEntry
// (uint32_t wait_ms, const char* adapter_dir) after patching libcuda and reads this answer.
// Its own magic and ABI: an agent without the entry (an older build) is told apart by the
// missing symbol.
inline constexpr uint64_t kFragscopeTorchMagic = 0x3130484352544653ull;  // "FSTRCH01"
// 3: expandable segments entered, the OOM observer; the entry takes the adapter folder too.
inline constexpr uint32_t kFragscopeTorchAbi = 3;
inline constexpr char kFragscopeTorchImportEntry[] = "fragscope_inject_import_torch";
inline constexpr int kFragscopeTorchMaxDevices = 16;

enum FragscopeTorchStatus : int32_t {
  kFragscopeTorchImported = 0,  // torch's segments and blocks are in the live table
  kFragscopeTorchNoPython = 1,  // no initialized CPython in the process
  kFragscopeTorchNoTorch = 2,   // Python without torch, or torch without CUDA initialized
  kFragscopeTorchTimedOut = 3,  // the GIL was not had within the wait: nothing imported
  kFragscopeTorchFailed = 4,    // torch's state could not be read or entered: `message`
};

struct FragscopeTorchDevice {
  int32_t device;
  uint32_t segments;  // cudaMalloc segments entered as live allocations
  uint32_t blocks;    // active blocks entered as live sub-allocator blocks
  // Expandable segments' mapped runs whose pages the driver could not list: left `untracked`.
  uint32_t skipped_segments;
  uint64_t reserved_bytes;   // of the entered segments and runs
  uint64_t allocated_bytes;  // of the entered blocks (pending frees included)
  uint64_t skipped_bytes;    // mapped bytes of the skipped runs
  // Expandable segments' mapped runs entered page by page (a handle and its mapping each).
  uint32_t expandable_runs;
  uint32_t pages;
};

struct FragscopeTorchImport {
  uint64_t magic;
  uint32_t abi;
  int32_t status;          // FragscopeTorchStatus
  uint32_t waited_ms;      // how long the GIL took (or the whole wait, when timed out)
  uint32_t device_count;   // entries of `devices` used (more devices: `message` says)
  uint32_t table_full;     // entries the live table refused (FRAGSCOPE_LIVE_SLOTS too small)
  uint32_t oom_observer;   // 1: PyTorch's OOM observer brings the blocks up to date at an OOM
  uint32_t synced_events;  // a sync (control socket `sync-torch`): block events forwarded
  uint32_t reserved;
  FragscopeTorchDevice devices[kFragscopeTorchMaxDevices];
  char message[1024];  // why not imported, or notes (e.g. skipped segments)
};

#endif  // FRAGSCOPE_INTERPOSE_INJECT_ABI_H_
