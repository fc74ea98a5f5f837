// Settings read once from the environment when the agent initializes (see interpose/README.md).
#ifndef FRAGSCOPE_INTERPOSE_CONFIG_H_
#define FRAGSCOPE_INTERPOSE_CONFIG_H_

#include <cstddef>
#include <cstdint>

namespace fragscope::agent {

struct Config {
  static constexpr size_t kPathCapacity = 4096;
  char output_path[kPathCapacity] = {};  // FRAGSCOPE_OUTPUT ('%p' becomes the pid)
  char socket_path[kPathCapacity] = {};  // FRAGSCOPE_SOCKET (wins over OUTPUT)
  int stack_depth = 32;                  // FRAGSCOPE_STACK_DEPTH, 0 = no stacks
  // FRAGSCOPE_FREE_STACKS=0: releases (frees, unmaps, handle and block releases) carry no stack,
  // as in heaptrack and heapprofd (PyTorch's context="alloc"); allocation sites are kept.
  bool release_stacks = true;
  size_t ring_bytes = size_t{8} << 20;  // FRAGSCOPE_RING_MB
  bool follow_fork = false;             // FRAGSCOPE_FOLLOW_FORK=1 (or true, yes, on)
  bool dormant = false;  // FRAGSCOPE_DORMANT=1 (or true, yes, on): live table only until woken
  // FRAGSCOPE_DORMANT_LOGS=0: dormant allocations go straight into the live table instead of
  // per-thread logs (allocation_log.h); for comparisons and as a way out.
  bool dormant_logs = true;
  // FRAGSCOPE_SNAPSHOT_EVERY (trace files; 0 = never). Unset: DefaultSnapshotEvery(live_slots).
  uint64_t snapshot_every = 0;
  size_t live_slots = size_t{1} << 18;        // FRAGSCOPE_LIVE_SLOTS
  size_t stack_slots = size_t{1} << 14;       // FRAGSCOPE_STACK_SLOTS
  uint64_t meminfo_interval_ns = 10'000'000;  // FRAGSCOPE_MEMINFO_MS: device free/total samples
  char control_dir[kPathCapacity] = {};       // $XDG_RUNTIME_DIR/fragscope or /tmp/fragscope-$UID
  // The launcher's rank and job size (Hello.rank), -1 when no launcher variable is set.
  int32_t rank = -1;
  int32_t world_size = -1;
  // Which image of this process the program is: 0 for the first, k after the k-th exec in place
  // that followed a stream (FRAGSCOPE_EXEC_IMAGE="PID:K", which the agent puts in the exec'd
  // image's environment; ignored unless PID is this process). Names the image's file and Hello.
  uint32_t exec_image = 0;

  // True when events have somewhere to go.
  bool has_output() const { return output_path[0] != '\0' || socket_path[0] != '\0'; }
};

// Events between PERIODIC snapshots when FRAGSCOPE_SNAPSHOT_EVERY is unset: 100000, or four
// times the live table's slots when that is more. A snapshot scans every slot (2^18 by default),
// and each scan also pulls the lines the program's threads write into the drain thread's cache,
// which cost the hook 20-25 ns per call at one scan per 100000 events; this bounds the scan to
// a quarter of a slot per event.
uint64_t DefaultSnapshotEvery(size_t live_slots);

// Reads the FRAGSCOPE_* variables (getenv only; no allocation). Invalid values keep defaults
// and print one warning line on stderr.
void LoadConfig(Config* config);

// Writes `pattern` into out with every "%p" replaced by `pid`; false if it does not fit.
bool ExpandPath(const char* pattern, int pid, char* out, size_t capacity);

// The environment variable that carries the image count across an exec.
inline constexpr char kExecImageVariable[] = "FRAGSCOPE_EXEC_IMAGE";

// The trace file of image `image` (> 0) of process `pid`, from the first image's `path`: the
// other images of the process must not write over it. "x.fst" becomes "x.PID.exec-K.fst" (the
// pid already in the name through "%p" in `pattern`: "x.exec-K.fst"); a name without ".fst" gets
// the same suffix at its end. False if it does not fit.
bool ExecImagePath(const char* pattern, const char* path, int pid, uint32_t image, char* out,
                   size_t capacity);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_CONFIG_H_
