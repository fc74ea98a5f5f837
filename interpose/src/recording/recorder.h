// What a hook does around the real call: the per-thread nesting depth and re-entrancy guard,
// errno preservation, sequence numbers, live-table bookkeeping and pushing one record.
//
// Nesting: a runtime call may reach the driver through our own wrapped pointer (cudaMalloc ->
// cuMemAlloc_v2). Only the outermost hook on a thread records; inner hooks report their result
// to it, so the event is named after the outermost API and carries the driver's result.
// Signals: the program's handlers run through a dispatcher (recorder.cc) that sets the
// interrupted thread state aside, so a handler's CUDA calls are outermost events of their own.
//
// Hot path: no locks, no heap, no system calls (clock_gettime is vDSO); the first event of a
// thread reads its id and stack bounds once. Thread safety: everything is per thread or atomic.
#ifndef FRAGSCOPE_INTERPOSE_RECORDER_H_
#define FRAGSCOPE_INTERPOSE_RECORDER_H_

#include <errno.h>

#include <cstdint>

#include "agent.h"
#include "hooks/driver_api.h"
#include "recording/allocation_log.h"
#include "recording/api.h"
#include "recording/event_clock.h"
#include "recording/event_infos.h"
#include "recording/event_record.h"
#include "recording/live_table.h"

namespace fragscope::agent {

struct ThreadState {
  int depth;             // hooks active on this thread
  int guard;             // > 0: agent code is running; hooks pass straight through
  bool inner_seen;       // an inner tracked driver call returned during the outer hook
  int32_t inner_result;  // its result
  uint32_t tid;          // cached gettid(), 0 until read
  // > 0 while a program's signal handler runs on this thread over agent code it interrupted
  // (recorder.cc). Its CUDA calls are events of their own (the handler starts at depth 0),
  // and meanwhile the agent makes no driver calls of its own: the interrupted agent code may be
  // inside one, and the driver need not be reentrant.
  int signal_over_hook;
  int32_t last_device;  // 1 + the device CurrentDevice() last read here (0: none yet)
  // This thread's errno, once read: glibc's errno is a call to __errno_location, and a
  // recording hook reads or writes it three times (1-2 % of a call in perf).
  int* errno_location;
};

// initial-exec: no __tls_get_addr (which may allocate) on the hot path. Small, so it fits the
// static TLS surplus even when the agent is loaded late. Defined in recorder.cc.
extern thread_local constinit ThreadState g_thread_state __attribute__((tls_model("initial-exec")));
inline ThreadState& CurrentThread() { return g_thread_state; }
uint32_t CurrentTid();

// False while a signal handler runs over agent code on this thread (see ThreadState): the
// agent then calls no driver function of its own (device: the last one read on this thread;
// no MemInfo samples, no capture or pool queries).
inline bool AgentMayCallDriver() { return g_thread_state.signal_over_hook == 0; }

// True for a call that nothing needs: a driver call inside an outer hook on this thread while
// no stream is wanted (dormant, or no output). The outer hook keeps the live table and no
// result has to be reported to it, so the wrapper calls the real function straight away: one
// TLS read and one relaxed load instead of a second full hook layer.
inline bool PassThroughInner() {
  return g_thread_state.depth > 0 && !Agent().shipping.load(std::memory_order_relaxed);
}

// The inner layer of a runtime call: a driver wrapper reached while an outer hook runs on this
// thread (cudaMalloc -> our cuMemAlloc_v2). It records nothing and only hands the driver's
// result to the outer hook (HookCall::Reported), and not even that while no stream is wanted
// (dormant: the outer hook keeps the live table and ships no event). Hot wrappers test it first
// and keep their recording body in a separate function, so this path costs one TLS read, one
// relaxed load, the real pointer's load and the call (a tail call when dormant), with no errno
// work and no frame of its own. A signal handler over it starts at depth 0 (Dispatch).
inline bool InnerLayer() { return g_thread_state.depth > 0; }
// CallInner's shipping path: out of line, so that the wrapper's dormant path is only tail calls
// and keeps no frame (inline, its call and the stores after it gave every wrapper one).
template <typename Real, typename... Args>
[[gnu::noinline]] auto CallInnerShipping(Real real, Args... args) {
  auto r = real(args...);
  ThreadState& t = g_thread_state;
  t.inner_seen = true;
  t.inner_result = static_cast<int32_t>(r);
  return r;
}
template <typename Real, typename... Args>
[[gnu::always_inline]] inline auto CallInner(Real real, Args... args) {
  if (!Agent().shipping.load(std::memory_order_relaxed)) return real(args...);
  return CallInnerShipping(real, args...);
}

// Makes hooks on this thread pass through while agent code runs (e.g. on the drain thread).
class AgentCodeScope {
 public:
  AgentCodeScope() { ++CurrentThread().guard; }
  ~AgentCodeScope() { --CurrentThread().guard; }
  AgentCodeScope(const AgentCodeScope&) = delete;
  AgentCodeScope& operator=(const AgentCodeScope&) = delete;
};

// What an outermost call that returned `own` reports: the failing inner driver call's result
// when it failed after one (see ThreadState::inner_result), else `own`.
inline int32_t ReportedResult(const ThreadState& t, int32_t own) {
  if (own != 0 && t.inner_seen && t.inner_result != 0) return t.inner_result;
  return own;
}

// One per hook invocation, on the stack.
//
// errno: only a call that records saves and restores it (the agent's own work after the real
// call, e.g. cuCtxGetDevice, may set it). A call that records nothing (an inner driver call of a
// runtime hook, agent code, agent off) runs no agent code that can touch errno: the slow paths
// it may reach (first initialization, resolving a real pointer) keep errno themselves. So such a
// layer costs one TLS read, the depth bookkeeping and the call.
class HookCall {
 public:
  // `keep_errno`: the hook does agent work whether it records or not (the lookup routes wrap
  // answers, which may call dlsym).
  explicit HookCall(bool keep_errno = false) : thread_(CurrentThread()) {
    outermost_ = thread_.depth == 0;
    if (outermost_) {
      thread_.inner_seen = false;
      thread_.inner_result = 0;
    }
    ++thread_.depth;
    record_ = outermost_ && thread_.guard == 0 && AgentRecording();
    keep_errno_ = record_ || keep_errno;
    if (keep_errno_) {
      if (thread_.errno_location == nullptr) thread_.errno_location = &errno;
      saved_errno_ = *thread_.errno_location;
    }
  }
  ~HookCall() {
    --thread_.depth;
    if (keep_errno_) *thread_.errno_location = saved_errno_;
  }
  HookCall(const HookCall&) = delete;
  HookCall& operator=(const HookCall&) = delete;

  // Whether this call records an event (outermost, agent active).
  bool record() const { return record_; }

  // Call right after the real function returns: keeps the errno it left (restored when the
  // hook returns) and passes a driver result to an enclosing runtime hook. `report` false for
  // results the outer call should not see (a failure-only function that succeeded).
  void Returned(int result, bool report = true) {
    if (keep_errno_) saved_errno_ = *thread_.errno_location;
    if (!outermost_ && report) {
      thread_.inner_seen = true;
      thread_.inner_result = result;
    }
  }

  // The result an event reports: the failing driver call's when this (runtime) call failed
  // after one, else `own`.
  int32_t Reported(int32_t own) const { return ReportedResult(thread_, own); }

 private:
  ThreadState& thread_;
  int saved_errno_ = 0;
  bool outermost_;
  bool record_;
  bool keep_errno_;
};

inline uint64_t NowNs() { return EventClockNs(); }  // CLOCK_MONOTONIC (event_clock.h)
uint64_t NextSeq();                                 // the next global sequence number (starts at 1)
int32_t CurrentDevice();  // cuCtxGetDevice, -1 without a context (see AgentMayCallDriver)
// Reads a device's description (name, UUID, memory) once, for the DeviceInfo frames.
void DescribeDevice(int32_t device);
// The pool a stream-ordered allocation without an explicit pool comes from: the current
// device's current pool, or kPoolDeferred while dormant (two driver calls the wake makes
// instead, for the allocations still live then).
inline uint64_t CurrentPoolUnlessDormant() {
  if (!Agent().shipping.load(std::memory_order_relaxed)) return kPoolDeferred;
  return DeviceCurrentPool(CurrentDevice());
}
// A stream-ordered acquire (kind kPool) as the driver has it now: a graph's allocation (kGraph,
// in capture) when its stream is capturing (`per_thread_default`: a _ptsz ABI, whose null stream
// is the thread's), and from the current pool when the call named none (`pool_given` false).
inline void ResolveStreamOrdered(AllocInfo& info, bool per_thread_default, bool pool_given) {
  if (StreamCapturing(reinterpret_cast<CUstream>(info.stream), per_thread_default)) {
    info.kind = MemoryKind::kGraph;
    info.in_capture = true;
  }
  if (!pool_given) info.pool = CurrentPoolUnlessDormant();
}
// Replaces a live allocation's deferred fields (kDeviceDeferred, kPoolDeferred) with what the
// driver says of the allocation (-1 / 0 where it cannot say).
void ResolveDeferred(LiveEntry& e);

// An allocation that succeeded: inserts into the live table, stamps seq, pushes AllocEvent.
void RecordAlloc(const AllocInfo& info);

// Any failed acquire (FailedAlloc), with device free/total sampled now. Gives the drain thread
// up to ~50 ms to ship it before the failure returns to the program.
void RecordFailure(const FailureInfo& info);

// A tracked acquire's outcome: `result` 0 records `info` (nothing when info.address is 0, as
// for size 0), any other result a FailedAlloc with it and info's size, stream, pool and kind.
inline void RecordAcquire(const AllocInfo& info, int32_t result) {
  if (result == 0) {
    if (info.address != 0) RecordAlloc(info);
    return;
  }
  RecordFailure(FailureOf(info, result));
}

// Makes this process the owner of the table of program signal handlers that the interposed
// sigaction/signal keep (fork children take it over; vfork children, which share the memory,
// do not touch it). Called once, from the agent's constructor.
void OwnSignalHandlerTable();
// False in a child that shares its parent's memory (vfork, posix_spawn) until it execs: it may
// read the agent's state, never change it (nor ship, nor end the parent's stream).
bool OwnsHandlerTable();

// After a successful tracked call: a rate-limited MemInfo sample of `device` (driver calls).
// `now_ns`: the event's time, if the caller has it (0: read the clock).
void MaybeSampleMemInfo(int32_t device, uint64_t now_ns = 0);

// --- The dormant fast path ---
//
// A dormant agent must cost next to nothing (the target: within 2 % of no agent), and a dormant
// hook's whole job on the usual call is one entry in this thread's allocation log (an
// allocation) or one taken out of it (the release of one made since the last fold). The hooks of
// the hottest runtime calls (cudaMalloc, cudaFree, cudaFreeAsync) do that inline, without a
// HookCall: such a call runs no agent code that can touch errno, so it keeps no errno copy, and
// it skips the record that RecordAlloc builds from AllocInfo. Anything less usual (a failure, a
// log that refuses, a wake in between, a thread without a log yet) leaves through the noinline
// functions below, which keep errno themselves and do what the general path does.

// True for an outermost call, outside agent code, of an agent that keeps the live table and
// ships nothing: loads only. The fast path still needs this thread's allocation log
// (AllocationLogs::ThreadHasUsableLog); an active agent pays two loads here. `recording` is
// stored (release) last in the agent's initialization, so its acquire here stands for
// AgentRecording's wait on g_agent_init.
inline bool DormantFastPathOpen() {
  const AgentState& a = Agent();
  if (!a.recording.load(std::memory_order_acquire)) return false;
  if (a.shipping.load(std::memory_order_relaxed)) return false;
  const ThreadState& t = g_thread_state;
  return t.depth == 0 && t.guard == 0;
}

// The hook's frame for a fast-path call: the depth that makes inner driver calls pass through
// (InnerLayer), and no inner result seen yet (HookCall does the same for an outermost call).
class DormantCall {
 public:
  DormantCall() : thread_(g_thread_state) {
    thread_.depth = 1;
    thread_.inner_seen = false;
  }
  ~DormantCall() { thread_.depth = 0; }
  DormantCall(const DormantCall&) = delete;
  DormantCall& operator=(const DormantCall&) = delete;
  // HookCall::Reported for this call.
  int32_t Reported(int32_t own) const { return ReportedResult(thread_, own); }

 private:
  ThreadState& thread_;
};

// Logs a dormant allocation made by the calling thread (RecordAlloc's dormant path and the fast
// path; `device` kDeviceDeferred leaves it to the wake). False when the log refused it: the
// caller then uses the table (the fast path through FinishDormantAcquire).
inline bool LogDormantAlloc(Api api, uint64_t address, uint64_t size, MemoryKind kind,
                            uint64_t stream = 0, uint64_t pool = 0,
                            int32_t device = kDeviceDeferred) {
  return Agent().logs.TryAppendWith([=](LoggedAllocation& slot) {
    LoggedAllocation::Make(address, size, stream, pool, api, kind, device).StoreTo(slot);
  });
}

// The rest of a fast-path acquire that did not end in the log: RecordAcquire, keeping errno.
[[gnu::noinline]] void FinishDormantAcquire(const AllocInfo& info, int32_t result);

// A fast-path release took `logged` out of this thread's log and the real call then failed with
// `result`: the allocation is still there, so it goes back (PendingRelease's path for the same
// case). Keeps errno.
[[gnu::noinline]] void RestoreDormantRelease(const LoggedAllocation& logged, int32_t result);

// A release: Begin before the real call (erases the live entry, takes seq), End after it
// (restores the entry if the call failed, pushes the event).
class PendingRelease {
 public:
  PendingRelease(LiveClass cls, uint64_t key);
  // The release of an allocation the agent knows (cudaFree, cudaFreeAsync, cuMemFree, IPC
  // close): the same, and when the agent ships, its FreeEvent goes now, before the real call
  // (result 0). A cudaFree waits for the device, for seconds on a busy GPU, and a thread can be
  // preempted inside any call; a FreeEvent pushed after the call left its seq missing from the
  // stream all that time, while other threads pushed tens of thousands of events that the
  // collector could order only within a bounded window (collector SeqOrderer). If the call
  // fails, EndFree puts the allocation back with an AllocEvent of its own (failed_release_result).
  // An allocation the agent does not know (freed before an attach saw it, or a bad pointer)
  // ships after the call, with its result, as before.
  // `log_searched`: the caller already looked in this thread's allocation log (TryCancel) and
  // missed.
  PendingRelease(uint64_t key, Api api, uint64_t stream, bool log_searched = false);
  bool known() const { return known_; }
  uint64_t seq() const { return seq_; }
  // FreeEvent for allocations. Inline for the dormant release that succeeded, which has
  // nothing left to do (seq_cst: see Submit; the seq was taken in the constructor).
  void EndFree(Api api, int32_t result, uint64_t stream) {
    if (result == 0) {
      if (cancelled_) return;
      if (shipped_) return MaybeSampleMemInfo(entry_.device, shipped_time_ns_);
      if (!Agent().shipping.load(std::memory_order_seq_cst)) return;
    }
    EndFreeSlow(api, result, stream);
  }
  // Puts the entry back (the real call failed).
  void Restore();

 private:
  // Both constructors (the second unless the thread's allocation log had the entry): erases
  // the entry and takes the seq; `free_api` (an allocation's release) ships the FreeEvent now
  // when the agent ships. Out of line: the log's path keeps a small frame.
  [[gnu::noinline]] void Begin(const Api* free_api, uint64_t stream);
  // The allocation was taken out of an allocation log (logged_ holds it): known, no seq.
  void TookFromLog() {
    known_ = true;
    cancelled_ = true;
    seq_ = 0;
  }
  void EndFreeSlow(Api api, int32_t result, uint64_t stream);
  // Pushes the FreeEvent (result `result`) for this release's seq.
  struct Shipped {
    int32_t device;
    uint64_t time_ns;
  };
  Shipped ShipFree(Api api, int32_t result, uint64_t stream);
  [[gnu::noinline]] void ShipFreeEarly(Api api, uint64_t stream);
  // The release shipped early failed: the entry goes back with a seq of its own, shipped as an
  // AllocEvent that says so.
  void ShipRestored(int32_t result);

  LiveClass cls_;
  uint64_t key_;
  bool known_;
  bool shipped_ = false;     // the FreeEvent went before the real call
  bool cancelled_ = false;   // taken out of this thread's allocation log (dormant), no seq
  LoggedAllocation logged_;  // what it held, if cancelled_ (entry_ is not filled then)
  uint64_t shipped_time_ns_ = 0;
  LiveEntry entry_;
  uint64_t seq_;
};

// Fills time, tid and (when stacks are on) the interned stack, then pushes. `record.seq` must
// be set. Also records DeviceInfo the first time a device is seen.
void Submit(EventRecord& record);
// A record with type/api set, the current stack (when stacks are on) and everything else zero.
EventRecord NewRecord(RecordType type, Api api);
// The same for a release (free, unmap, address-range free, handle or block release): without a
// stack when FRAGSCOPE_FREE_STACKS=0.
EventRecord NewReleaseRecord(RecordType type, Api api);
// The same without a stack, for what is reported after the fact (the caller's stack is not
// the event's).
EventRecord NewRecordWithoutStack(RecordType type, Api api);

// A Mark labelled `label` (cut at EventRecord::kLabelCapacity bytes; null: none), without a
// stack; `blocks_synced` sets Mark.blocks_synced. A hook checks HookCall::record() first; the
// drain thread calls it directly at a wake.
void RecordMark(const char* label, bool blocks_synced);

// A Mark "rank R of N" (or "rank R") that carries the process's rank (Mark.rank/world_size).
void RecordRankMark(int32_t rank, int32_t world_size);

// Samples `device`'s free/total now, with its primary context made current for the call
// (primary_context.h): the drain thread at a wake, which has no context of its own, so that an
// attach during which the program allocates nothing still knows what is outside its memory.
// Streaming agents and described devices only.
void SampleMemInfoNow(int32_t device);

// MemInfo for `pool` (reserved/used), not rate-limited (trims are rare).
void SamplePool(int32_t device, uint64_t pool);

// Inserts a live entry whose seq is stamped right after (see live_table.h for why), returning
// the seq. `entry.seq` is ignored. `*index` (optional) is where the entry went, or SIZE_MAX when
// the table refused it.
uint64_t InsertLive(const LiveEntry& entry, size_t* index = nullptr);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_RECORDER_H_
