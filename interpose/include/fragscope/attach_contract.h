// The contract between the agent (libfragscope.so) and `fragscope attach`, which are built
// together but run in different processes: the control socket through which the command wakes,
// syncs and puts to sleep an agent, and the tables an injected agent hands to the command
// through its own memory. Both sides include this header and nothing of each other's.
//
// Guarantees: plain constants and C-layout structs only (no allocation, no library: the agent
// links only libc); the struct layouts change only together with their ABI numbers below, so a
// command never reads a table of another layout as its own.
#ifndef FRAGSCOPE_ATTACH_CONTRACT_H_
#define FRAGSCOPE_ATTACH_CONTRACT_H_

#include <cstddef>
#include <cstdint>

// ---------------------------------------------------------------------------------------------
// The control socket: `<control dir>/agent-<pid>.sock`, where the control dir is
// `$XDG_RUNTIME_DIR/fragscope` (the agent's environment) or else `/tmp/fragscope-<uid>`. Only
// peers of the agent's own uid are served.
//
// Protocol: a client connects, sends one command line (ending in '\n'), reads one answer line,
// and the connection is closed. Commands:
//   wake <absolute path of a collector socket>   start streaming to it
//   sleep                                         end the stream, dormant again
//   status                                        one line of counters
//   sync-torch <wait ms> <why>                    bring PyTorch's blocks up to date in the stream
// Answers start with `ok` or `error` and a space, followed by details.
namespace fragscope::control_socket {

inline constexpr char kDirUnderRuntimeDir[] = "fragscope";       // $XDG_RUNTIME_DIR/fragscope
inline constexpr char kFallbackDirPrefix[] = "/tmp/fragscope-";  // then the uid in decimal
inline constexpr char kSocketPrefix[] = "agent-";                // then the pid in decimal
inline constexpr char kSocketSuffix[] = ".sock";

inline constexpr char kWake[] = "wake";
inline constexpr char kSleep[] = "sleep";
inline constexpr char kStatus[] = "status";
inline constexpr char kSyncTorch[] = "sync-torch";
// sync-torch's arguments: a wait of 1 to this many ms (digits, no leading zero) and a word of
// 1 to kSyncTorchMaxWhy lowercase letters that labels the sync.
inline constexpr uint32_t kSyncTorchMaxWaitMs = 600000;
inline constexpr size_t kSyncTorchMaxWhy = 16;

inline constexpr char kOk[] = "ok";
inline constexpr char kError[] = "error";
// sync-torch's answers: synced, then the number of block events forwarded; or nothing to sync
// (no Python or no torch in the process), then why.
inline constexpr char kSynced[] = "ok synced events=";
inline constexpr char kSyncNone[] = "ok none";

}  // namespace fragscope::control_socket

// ---------------------------------------------------------------------------------------------
// Attach by injection. `fragscope attach` loads the agent into a process started without it and
// calls kFragscopeInjectEntry, which prepares in-place patches of libcuda's tracked functions
// and describes them in a FragscopeInjectTable that the command reads from the process's
// memory; the command writes the patches while every thread is stopped and undoes them at
// detach. Bump kFragscopeInjectAbi when the table's layout changes.

inline constexpr uint64_t kFragscopeInjectMagic = 0x31304a4e49534653ull;  // "FSINJ01"
inline constexpr uint32_t kFragscopeInjectAbi = 1;
inline constexpr int kFragscopeInjectMaxPatches = 96;
inline constexpr char kFragscopeInjectEntry[] = "fragscope_inject_start";

struct FragscopeInjectPatch {
  uint64_t address;  // the function's first byte in libcuda
  uint32_t length;   // bytes to replace (whole instructions, >= 5)
  uint32_t reserved;
  uint8_t original[32];  // what is there now
  uint8_t patch[32];     // the jump to the agent's wrapper, int3-padded
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
// first snapshot. `fragscope attach` calls kFragscopeTorchImportEntry
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

#endif  // FRAGSCOPE_ATTACH_CONTRACT_H_
