// The agent's process-wide state and its life cycle: lazy initialization (safe before main and
// from any thread), fork handling and the exit sequence. Hooks reach everything through Agent().
//
// Fork rule: the child clears the inherited live table (CUDA contexts do not survive fork, so
// the parent's device memory is not the child's). It stays silent unless FRAGSCOPE_FOLLOW_FORK=1;
// then it starts a new stream (Hello with stream_index + 1) to "<output>.<pid>" or a new socket
// connection. exec: the environment is inherited, so an exec'd program is traced by its own
// preload, as a new process.
#ifndef FRAGSCOPE_INTERPOSE_AGENT_H_
#define FRAGSCOPE_INTERPOSE_AGENT_H_

#include <atomic>
#include <cstdint>

#include "config.h"
#include "recording/allocation_log.h"
#include "recording/event_record.h"
#include "recording/live_table.h"
#include "recording/ring_buffer.h"
#include "recording/source_stack_table.h"
#include "recording/stack_table.h"

namespace fragscope::agent {

inline constexpr int kMaxDevices = 64;

// What the agent learned about one device (filled by the first hook that sees it).
struct DeviceSlot {
  std::atomic<int> state;  // 0 unknown, 1 being read, 2 ready
  int32_t ordinal;
  bool has_uuid;
  uint8_t uuid[16];
  uint64_t total_bytes;
  char name[128];
  uint8_t sent;                          // drain thread: DeviceInfo written on this stream
  std::atomic<uint64_t> last_sample_ns;  // rate limit of MemInfo samples
};

struct AgentState {
  Config config;
  MpscRing<EventRecord> ring;
  StackTable stacks;
  SourceStackTable source_stacks;  // adapters' text stacks (annotate.h source sites)
  LiveTable live;
  // Dormant allocations not yet in `live` (folded by the background thread and at a wake).
  AllocationLogs logs;
  std::atomic<uint64_t> seq{0};  // last sequence number handed out
  // The seq of the last blocks_synced Mark (RecordMark), dormant or not: 0 while a
  // sub-allocator's blocks, if any, are followed one by one (Snapshot.last_blocks_synced_seq).
  std::atomic<uint64_t> last_blocks_synced_seq{0};
  std::atomic<uint64_t> ring_drops{0};  // events refused by a full ring, this stream
  std::atomic<bool> recording{false};   // hooks keep the live table (configured, initialized)
  // Hooks also stamp stacks and push events (a stream is wanted). False while dormant
  // (FRAGSCOPE_DORMANT=1 until `fragscope attach` wakes the agent, and again after it detaches).
  // Hooks load it after taking their seq, so an event is either pushed or inside the woken
  // stream's first snapshot (drain.cc, Wake).
  std::atomic<bool> shipping{false};
  std::atomic<bool> late{false};  // past our atexit handler: hooks drain inline
  // The rank the program itself set (annotate.h fragscope_set_rank), PackRank'ed; 0 while it
  // set none and the launcher's (config.rank) stands. Every Hello after it carries it.
  std::atomic<uint64_t> program_rank{0};
  // Loaded into a running process by `fragscope attach` (inject_attach.cc): hooks are reached
  // through in-place patches of libcuda, and memory from before the attach is not known.
  bool injected = false;
  uint32_t stream_index = 0;
  uint64_t monotonic_at_start_ns = 0;
  uint64_t realtime_at_start_ns = 0;
  DeviceSlot devices[kMaxDevices] = {};
};

// Constant-initialized and never destroyed: hooks may run before our constructor and after
// every destructor.
union AgentStorage {
  constexpr AgentStorage() : state() {}
  ~AgentStorage() {}
  AgentState state;
};
// Defined in agent.cc. Hidden and reached inline: every hook reads them, and an out-of-line
// accessor (or a GOT load) is a measurable part of a dormant hook's cost.
extern __attribute__((visibility("hidden"))) constinit AgentStorage g_agent_storage;
extern __attribute__((visibility("hidden"))) constinit std::atomic<int> g_agent_init;  // 2: done

// The one instance; never destroyed (hooks may run during and after exit).
inline AgentState& Agent() { return g_agent_storage.state; }

// Which rank of a distributed job the process is, and the job's size (-1: unknown).
struct ProcessRank {
  int32_t rank = -1;
  int32_t world_size = -1;
  bool operator==(const ProcessRank&) const = default;
};
inline uint64_t PackRank(ProcessRank r) {
  return uint64_t{1} << 63 | uint64_t{static_cast<uint32_t>(r.rank)} << 32 |
         static_cast<uint32_t>(r.world_size);
}
// The program's rank if it set one, else its launcher's.
inline ProcessRank CurrentRank() {
  const uint64_t packed = Agent().program_rank.load(std::memory_order_relaxed);
  if (packed == 0) return {Agent().config.rank, Agent().config.world_size};
  return {static_cast<int32_t>(static_cast<uint32_t>(packed >> 32) & 0x7fffffffu),
          static_cast<int32_t>(static_cast<uint32_t>(packed))};
}

bool AgentRecordingSlow();

// Initializes on first use (reads the configuration, maps the ring and tables). Returns whether
// hooks should record. After the first call: two loads, inline.
inline bool AgentRecording() {
  if (__builtin_expect(g_agent_init.load(std::memory_order_acquire) == 2, 1)) {
    return g_agent_storage.state.recording.load(std::memory_order_relaxed);
  }
  return AgentRecordingSlow();
}

// An agent dlopen()ed into a running process (not preloaded) starts here instead of from its
// environment: dormant, like FRAGSCOPE_DORMANT=1, with an empty live table and its control
// socket open, waiting for `wake`. False if it was preloaded or the table cannot be mapped.
bool AgentStartInjected();

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_AGENT_H_
