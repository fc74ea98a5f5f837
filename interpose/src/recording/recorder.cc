#include "recording/recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "hooks/driver_api.h"
#include "hooks/hook_exports.h"
#include "hooks/primary_context.h"
#include "recording/stack_capture.h"
#include "shipping/drain.h"

namespace fragscope::agent {
namespace {

// The stack of the current event, interned.
[[gnu::always_inline]] inline void StampStack(EventRecord& r) {
  AgentState& a = Agent();
  // Shipping first: while dormant the stack table is not mapped (and depth may still change).
  if (!a.shipping.load(std::memory_order_acquire)) return;
  const int depth = a.config.stack_depth;
  if (depth <= 0) return;
  uint64_t pcs[StackTable::kMaxDepth];
  uint64_t hash = 0;
  StackEnd end = StackEnd::kUnspecified;
  int n = CaptureStack(pcs, depth, &hash, &end);
  r.stack_id = a.stacks.Intern(pcs, n, hash, &r.stack_slot, end);
}

[[gnu::noinline]] void ReadDeviceInfo(int32_t device) {
  if (!AgentMayCallDriver()) return;
  DeviceSlot& slot = Agent().devices[device];
  int state = slot.state.load(std::memory_order_acquire);
  if (state != 0 || !slot.state.compare_exchange_strong(state, 1)) return;
  const DriverCalls& d = Driver();
  slot.ordinal = device;
  CUdevice dev = device;  // CUdevice is the ordinal
  CUuuid uuid;
  slot.has_uuid = d.device_get_uuid != nullptr && d.device_get_uuid(&uuid, dev) == CUDA_SUCCESS;
  if (slot.has_uuid) memcpy(slot.uuid, uuid.bytes, sizeof(slot.uuid));
  size_t total = 0;
  slot.total_bytes =
      d.device_total_mem != nullptr && d.device_total_mem(&total, dev) == CUDA_SUCCESS ? total : 0;
  slot.name[0] = '\0';
  if (d.device_get_name != nullptr &&
      d.device_get_name(slot.name, sizeof(slot.name) - 1, dev) != CUDA_SUCCESS) {
    slot.name[0] = '\0';
  }
  slot.name[sizeof(slot.name) - 1] = '\0';
  slot.state.store(2, std::memory_order_release);
}

// Every event calls this; after a device's first event it is two compares and one load.
inline void EnsureDeviceInfo(int32_t device) {
  if (device < 0 || device >= kMaxDevices) return;
  if (Agent().devices[device].state.load(std::memory_order_acquire) != 0) return;
  ReadDeviceInfo(device);
}

// Free/total of `device`: cuMemGetInfo answers for the current context's device, so only when
// that is `device` (a free on another device's memory must not be sampled as this one).
bool ReadMemInfo(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  const DriverCalls& d = Driver();
  size_t f = 0, t = 0;
  if (!AgentMayCallDriver() || d.mem_get_info == nullptr || device < 0 ||
      CurrentDevice() != device || d.mem_get_info(&f, &t) != CUDA_SUCCESS) {
    return false;
  }
  *free_bytes = f;
  *total_bytes = t;
  return true;
}

}  // namespace

thread_local constinit ThreadState g_thread_state __attribute__((tls_model("initial-exec"))) = {};

uint32_t CurrentTid() {
  if (g_thread_state.tid == 0) g_thread_state.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return g_thread_state.tid;
}

// seq_cst: the live table's snapshot argument orders seq against its scan flag (live_table.h).
uint64_t NextSeq() { return Agent().seq.fetch_add(1, std::memory_order_seq_cst) + 1; }

int32_t CurrentDevice() {
  ThreadState& t = g_thread_state;
  // In a handler over agent code: the context is per thread, so the device last read on this
  // thread is the one a call in the handler allocates on (unless the handler switches it).
  if (!AgentMayCallDriver()) return t.last_device - 1;
  const DriverCalls& d = Driver();
  CUdevice dev = -1;
  if (d.ctx_get_device == nullptr || d.ctx_get_device(&dev) != CUDA_SUCCESS) dev = -1;
  t.last_device = dev + 1;
  return dev;
}

void DescribeDevice(int32_t device) { EnsureDeviceInfo(device); }

void ResolveDeferred(LiveEntry& e) {
  if (e.device == kDeviceDeferred) e.device = DeviceOfAllocation(e.address);
  if (e.pool == kPoolDeferred) e.pool = PoolOfAllocation(e.address);
}

namespace {

[[gnu::always_inline]] inline EventRecord ZeroRecord(RecordType type, Api api) {
  // A copy of a zero record, not memset: GCC turns the 120-byte memset into `rep stos`, whose
  // start-up cost was a quarter of RecordAlloc's own time in perf; a copy is eight vector moves.
  // (The empty asm hides the zeros from the optimizer, which would turn the copy back into
  // the memset.)
  static constexpr EventRecord kZero{};
  const EventRecord* zero = &kZero;
  asm("" : "+r"(zero));
  EventRecord r = *zero;
  r.type = type;
  r.api = api;
  r.device = -1;
  return r;
}

}  // namespace

EventRecord NewRecord(RecordType type, Api api) {
  EventRecord r = ZeroRecord(type, api);
  StampStack(r);
  return r;
}

EventRecord NewRecordWithoutStack(RecordType type, Api api) { return ZeroRecord(type, api); }

EventRecord NewReleaseRecord(RecordType type, Api api) {
  EventRecord r = ZeroRecord(type, api);
  if (Agent().config.release_stacks) StampStack(r);
  return r;
}

void Submit(EventRecord& r) {
  // Loaded after r.seq was taken (seq_cst, like the wake's store and its snapshot scan): an
  // event that misses the woken stream is inside its first snapshot (drain.cc, Wake).
  if (!Agent().shipping.load(std::memory_order_seq_cst)) {
    // Dormant: the live table is all we keep. A device the record names is described now (an
    // allocation's device is left to the wake, which describes what it reads); the thread that
    // serves the control socket starts with the first event, like the drain thread.
    EnsureDeviceInfo(r.device);
    EnsureBackgroundThread();
    return;
  }
  if (r.time_ns == 0) r.time_ns = NowNs();  // RecordAlloc reads it earlier
  r.tid = CurrentTid();
  EnsureDeviceInfo(r.device);
  PushRecord(r);
}

uint64_t InsertLive(const LiveEntry& entry, size_t* index) {
  AgentState& a = Agent();
  size_t at = 0;
  const bool inserted = a.live.InsertPending(entry, &at);
  const uint64_t seq = NextSeq();
  if (inserted) a.live.SetSeq(at, seq);
  if (index != nullptr) *index = inserted ? at : SIZE_MAX;
  return seq;
}

namespace {

// The live entry of an allocation, with the device and pool the caller settled on.
[[gnu::always_inline]] inline LiveEntry AllocationEntry(const AllocInfo& info, int32_t device,
                                                        uint64_t pool) {
  LiveEntry e = ZeroLiveEntry();
  e.cls = LiveClass::kAllocation;
  e.api = info.api;
  e.kind = info.kind;
  e.device = device;
  e.address = info.address;
  e.size = info.size;
  e.stream = info.stream;
  e.pool = pool;
  return e;
}

// RecordAlloc for an allocation a dormant hook entered just as a wake began. Out of line, like
// the shipping path below: the dormant path's frame then holds no record or stack buffer.
[[gnu::noinline]] void ShipWokenAlloc(const AllocInfo& info, LiveEntry& e, size_t index,
                                      uint64_t seq) {
  AgentState& a = Agent();
  // Woken in between: this event's seq may be above the wake's snapshot, so ship it, and
  // the wake's pass over deferred fields may have gone by this entry already.
  if (HasDeferredFields(e)) {
    ResolveDeferred(e);
    if (index != SIZE_MAX) a.live.SetResolved(index, e.device, e.pool);
  }
  EventRecord r = NewRecord(RecordType::kAlloc, info.api);
  FillAllocRecord(r, info, e.device, e.pool);
  r.seq = seq;
  Submit(r);
}

[[gnu::noinline]] void RecordAllocShipping(const AllocInfo& info) {
  AgentState& a = Agent();
  // Shipping: the slot's line loads while the stack is walked and the record built (dormant,
  // the insert comes at once and a prefetch would only hash the key twice).
  a.live.Prefetch(LiveClass::kAllocation, info.address);
  EventRecord r = NewRecord(RecordType::kAlloc, info.api);
  // The clock is read here rather than in Submit: the live-table slot prefetched above is on
  // its way meanwhile (a time read a little before the seq is as good as one after it: threads
  // interleave between the two anyway).
  r.time_ns = NowNs();
  const int32_t device = info.device >= 0 ? info.device : CurrentDevice();
  // Deferred by a hook that saw the agent dormant just before a wake (CurrentPoolUnlessDormant).
  const uint64_t pool = info.pool == kPoolDeferred ? DeviceCurrentPool(device) : info.pool;
  FillAllocRecord(r, info, device, pool);
  LiveEntry e = AllocationEntry(info, device, pool);
  e.stack_id = r.stack_id;
  r.seq = InsertLive(e);
  Submit(r);
  MaybeSampleMemInfo(r.device, r.time_ns);
}

// A dormant allocation the thread's log refused (a wake began, or the log is full): the live
// table, with a seq (the seq_cst load decides for a woken stream). Out of line, so that the
// log's path keeps a small frame.
[[gnu::noinline]] void RecordDormantAllocInTable(const AllocInfo& info, int32_t device) {
  LiveEntry e = AllocationEntry(info, device, info.pool);
  size_t index = 0;
  const uint64_t seq = InsertLive(e, &index);
  if (!Agent().shipping.load(std::memory_order_seq_cst)) {
    EnsureDeviceInfo(e.device);
    EnsureBackgroundThread();
    return;
  }
  ShipWokenAlloc(info, e, index, seq);
}

}  // namespace

void RecordAlloc(const AllocInfo& info) {
  AgentState& a = Agent();
  if (a.shipping.load(std::memory_order_relaxed)) {
    RecordAllocShipping(info);
    return;
  }
  // Dormant: the live entry alone (this load only skips building a record that would be
  // thrown away; the log's gate or the table's seq decides for a woken stream). The device (and a
  // stream-ordered allocation's pool, kPoolDeferred from the hook) is left to the wake,
  // which reads it from the allocation.
  const int32_t device = info.device >= 0 ? info.device : kDeviceDeferred;
  // This thread's log first (allocation_log.h): a few plain stores. It refuses once a wake
  // began.
  // The background thread folds the logs: started with the first append of each thread (its
  // own check is cheap, but not free on every call).
  const bool first_append = AllocationLogs::ThreadHasNoLog();
  if (!LogDormantAlloc(info.api, info.address, info.size, info.kind, info.stream, info.pool,
                       device)) {
    return RecordDormantAllocInTable(info, device);
  }
  EnsureDeviceInfo(device);
  if (__builtin_expect(first_append, 0)) EnsureBackgroundThread();
}

void RecordMark(const char* label, bool blocks_synced) {
  EventRecord r = NewRecordWithoutStack(RecordType::kMark, Api::k_fragscope_mark);
  const size_t n = label != nullptr ? strnlen(label, EventRecord::kLabelCapacity) : 0;
  if (n > 0) memcpy(r.label, label, n);
  r.label_size = static_cast<uint8_t>(n);
  if (blocks_synced) r.flags |= kFlagBlocksSynced;
  r.seq = NextSeq();
  if (blocks_synced) {
    // Before the push: a snapshot whose scan starts after this mark's seq names it.
    uint64_t last = Agent().last_blocks_synced_seq.load(std::memory_order_relaxed);
    while (last < r.seq && !Agent().last_blocks_synced_seq.compare_exchange_weak(
                               last, r.seq, std::memory_order_release)) {
    }
  }
  Submit(r);
}

namespace {
// Decimal digits of `v` at p (room for 10); returns the end. (No snprintf: annotate.h promises
// no allocation, and hooks may run in any state of the C library.)
char* PutDecimal(char* p, uint32_t v) {
  char digits[10];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}
}  // namespace

void RecordRankMark(int32_t rank, int32_t world_size) {
  EventRecord r = NewRecordWithoutStack(RecordType::kMark, Api::k_fragscope_mark);
  // "rank 2147483647 of 2147483647": 29 bytes, within kRankLabelCapacity.
  char* p = r.label;
  memcpy(p, "rank ", 5);
  p = PutDecimal(p + 5, static_cast<uint32_t>(rank));
  if (world_size >= 0) {
    memcpy(p, " of ", 4);
    p = PutDecimal(p + 4, static_cast<uint32_t>(world_size));
  }
  r.label_size = static_cast<uint8_t>(p - r.label);
  r.rank_mark.rank = rank;
  r.rank_mark.world_size = world_size;
  r.flags |= kFlagRank;
  r.seq = NextSeq();
  Submit(r);
}

void RecordFailure(const FailureInfo& info) {
  EventRecord r = info.site != 0 ? NewRecordWithoutStack(RecordType::kFailed, info.api)
                                 : NewRecord(RecordType::kFailed, info.api);
  if (info.site != 0) r.stack_id = info.site;
  const int32_t device = info.device >= 0 ? info.device : CurrentDevice();
  FillFailureRecord(r, info, device,
                    info.pool == kPoolDeferred ? DeviceCurrentPool(device) : info.pool);
  // A failed stream-ordered allocation is judged against its pool as the driver has it now,
  // sampled first: what the pool holds beyond its live blocks (reserve, frees the stream has
  // passed, which the agent cannot see) would otherwise pass for memory outside the process.
  if (r.kind == MemoryKind::kPool && r.pool != 0) SamplePool(r.device, r.pool);
  uint64_t free_bytes = 0, total_bytes = 0;
  if (Agent().shipping.load(std::memory_order_relaxed) &&
      ReadMemInfo(r.device, &free_bytes, &total_bytes)) {
    SetFailureMemInfo(r, free_bytes, total_bytes);
  }
  r.seq = NextSeq();
  Submit(r);
  if (Agent().shipping.load(std::memory_order_relaxed)) FlushSoon();
}

void PendingRelease::Begin(const Api* free_api, uint64_t stream) {
  AgentState& a = Agent();
  LiveTable& live = a.live;
  size_t index = 0;
  known_ = live.Erase(cls_, key_, &entry_, &index);
  if (!known_ && cls_ == LiveClass::kAllocation) {
    // Logs hold allocations only. Still in this thread's log, further back than TryCancel looks
    // (released first in, first out), or in another thread's: cancelled there.
    if (a.logs.TryCancelAnywhere(key_, &logged_) || a.logs.TryCancelElsewhere(key_, &logged_)) {
      TookFromLog();
      return;
    }
    // Or a fold was putting it in the table while this release looked: once that fold ends,
    // the table has it.
    if (a.logs.ever_used()) {
      a.logs.WaitForFolds();
      known_ = live.Erase(cls_, key_, &entry_, &index);
    }
  }
  if (!known_) {
    memset(&entry_, 0, sizeof(entry_));
    entry_.device = -1;
  }
  seq_ = NextSeq();
  if (!known_) return;
  // Loaded after the seq (seq_cst, as in Submit): a wake that sets `shipping` later reads a
  // snapshot seq at or above ours, and such a snapshot does not hold the entry; a wake that set
  // it before ships this event.
  const bool shipping = Agent().shipping.load(std::memory_order_seq_cst);
  // Allocated while dormant, released once a wake began: the event ships, and if its seq is
  // above the wake's snapshot, the snapshot lists the entry (removed after it) with the device
  // the tombstone holds. The memory is still allocated (the real call comes next), so the
  // driver can say.
  if (shipping && HasDeferredFields(entry_)) {
    ResolveDeferred(entry_);
    live.SetErasedResolved(index, entry_.device, entry_.pool);
  }
  live.SetRemovedSeq(index, seq_);
  if (free_api != nullptr && shipping) ShipFreeEarly(*free_api, stream);
}

PendingRelease::PendingRelease(LiveClass cls, uint64_t key) : cls_(cls), key_(key) {
  Begin(nullptr, 0);
}

PendingRelease::PendingRelease(uint64_t key, Api api, uint64_t stream, bool log_searched)
    : cls_(LiveClass::kAllocation), key_(key) {
  // Allocated on this thread since the last fold (dormant): it never reaches the table, and no
  // seq is taken (a wake folds and snapshots only after this thread left its log).
  if (!log_searched && Agent().logs.TryCancel(key, &logged_)) {
    TookFromLog();
    return;
  }
  Begin(&api, stream);
}

void PendingRelease::Restore() {
  if (!known_) return;
  // Still allocated (the release failed): a woken stream's entry gets its fields now.
  if (HasDeferredFields(entry_) && Agent().shipping.load(std::memory_order_seq_cst)) {
    ResolveDeferred(entry_);
  }
  Agent().live.Insert(entry_);
}

void PendingRelease::ShipFreeEarly(Api api, uint64_t stream) {
  shipped_time_ns_ = ShipFree(api, 0, stream).time_ns;
  shipped_ = true;
}

PendingRelease::Shipped PendingRelease::ShipFree(Api api, int32_t result, uint64_t stream) {
  EventRecord r = NewReleaseRecord(RecordType::kFree, api);
  r.seq = seq_;
  r.result = result;
  int32_t device = known_ ? entry_.device : CurrentDevice();
  // Still deferred: the seq is at or below the wake's snapshot (see the constructor), which the
  // drain skips; never ship the placeholders.
  if (device == kDeviceDeferred) device = -1;
  FillFreeRecord(r, FreeInfo{key_, entry_.size, device, stream,
                             entry_.pool == kPoolDeferred ? 0 : entry_.pool});
  Submit(r);
  return Shipped{r.device, r.time_ns};
}

namespace {
// An allocation whose release failed goes back with a seq of its own, shipped as an AllocEvent
// that says so. Shipped early means the agent shipped when the seq was taken, so the release
// resolved any deferred field; a wake cannot undo that.
void ShipRestoredEntry(const LiveEntry& e, uint64_t address, int32_t result) {
  EventRecord r = NewRecordWithoutStack(RecordType::kAlloc, e.api);
  FillAllocRecord(r, AllocInfo{e.api, address, e.size, e.kind, e.device, e.stream, e.pool},
                  e.device == kDeviceDeferred ? -1 : e.device,
                  e.pool == kPoolDeferred ? 0 : e.pool);
  r.stack_id = e.stack_id;  // the allocation's own site: it is the same allocation
  SetFailedReleaseResult(r, result);
  r.seq = InsertLive(e, nullptr);
  Submit(r);
}

// A release took `logged` out of this thread's allocation log and then failed: the allocation
// is still there. Back into the log, or, when a wake began meanwhile, into the table with a seq
// of its own, shipped if the stream started (its snapshot did not list it).
void RestoreLogged(const LoggedAllocation& logged, int32_t result) {
  if (Agent().logs.TryAppend(logged)) return;
  LiveEntry e = logged.ToLiveEntry();
  if (HasDeferredFields(e) && Agent().shipping.load(std::memory_order_seq_cst)) {
    ResolveDeferred(e);
  }
  ShipRestoredEntry(e, logged.address, result);
}

// errno across agent work on a fast-path hook's slow exit (what HookCall does for its call).
class ErrnoKeeper {
 public:
  ErrnoKeeper() : saved_(errno) {}
  ~ErrnoKeeper() { errno = saved_; }
  ErrnoKeeper(const ErrnoKeeper&) = delete;
  ErrnoKeeper& operator=(const ErrnoKeeper&) = delete;

 private:
  int saved_;
};
}  // namespace

void FinishDormantAcquire(const AllocInfo& info, int32_t result) {
  ErrnoKeeper keep_errno;
  RecordAcquire(info, result);
}

void RestoreDormantRelease(const LoggedAllocation& logged, int32_t result) {
  ErrnoKeeper keep_errno;
  RestoreLogged(logged, result);
}

void PendingRelease::ShipRestored(int32_t result) { ShipRestoredEntry(entry_, key_, result); }

void PendingRelease::EndFreeSlow(Api api, int32_t result, uint64_t stream) {
  if (shipped_) {  // and failed (EndFree)
    ShipRestored(result);
    return;
  }
  if (cancelled_) {  // and failed: the allocation is still there
    RestoreLogged(logged_, result);
    return;
  }
  if (result != 0) Restore();
  // Dormant: nothing to ship (seq_cst: see Submit; the seq was taken in the constructor).
  if (!Agent().shipping.load(std::memory_order_seq_cst)) return;
  const Shipped shipped = ShipFree(api, result, stream);
  if (result == 0) MaybeSampleMemInfo(shipped.device, shipped.time_ns);
}

void MaybeSampleMemInfo(int32_t device, uint64_t now_ns) {
  if (device < 0 || device >= kMaxDevices) return;
  AgentState& a = Agent();
  if (!a.shipping.load(std::memory_order_relaxed)) return;  // dormant: samples go nowhere
  DeviceSlot& slot = a.devices[device];
  uint64_t now = now_ns != 0 ? now_ns : NowNs();
  uint64_t last = slot.last_sample_ns.load(std::memory_order_relaxed);
  if (last != 0 && now - last < a.config.meminfo_interval_ns) return;
  if (!slot.last_sample_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  EventRecord r;
  memset(&r, 0, sizeof(r));
  r.type = RecordType::kMemInfo;
  r.device = device;
  uint64_t free_bytes = 0, total_bytes = 0;
  if (!ReadMemInfo(device, &free_bytes, &total_bytes)) return;
  SetMemInfoDevice(r, free_bytes, total_bytes);
  r.seq = a.seq.load(std::memory_order_acquire);
  Submit(r);
}

void SampleMemInfoNow(int32_t device) {
  if (device < 0 || device >= kMaxDevices || !AgentMayCallDriver()) return;
  AgentState& a = Agent();
  if (!a.shipping.load(std::memory_order_acquire)) return;
  if (a.devices[device].state.load(std::memory_order_acquire) != 2) return;
  const DriverCalls& d = Driver();
  if (d.mem_get_info == nullptr) return;
  PrimaryContextScope context(device);
  size_t free_bytes = 0, total_bytes = 0;
  if (!context.ok() || d.mem_get_info(&free_bytes, &total_bytes) != CUDA_SUCCESS) return;
  EventRecord r;
  memset(&r, 0, sizeof(r));
  r.type = RecordType::kMemInfo;
  r.device = device;
  SetMemInfoDevice(r, free_bytes, total_bytes);
  r.seq = a.seq.load(std::memory_order_acquire);
  a.devices[device].last_sample_ns.store(NowNs(), std::memory_order_relaxed);
  Submit(r);
}

void SamplePool(int32_t device, uint64_t pool) {
  if (!AgentMayCallDriver()) return;
  const DriverCalls& d = Driver();
  if (pool == 0 || d.mem_pool_get_attribute == nullptr) return;
  if (!Agent().shipping.load(std::memory_order_relaxed)) return;
  EventRecord r;
  memset(&r, 0, sizeof(r));
  r.type = RecordType::kMemInfo;
  r.device = device;
  r.pool = pool;
  auto handle = reinterpret_cast<CUmemoryPool>(pool);
  cuuint64_t reserved = 0, used = 0;
  if (d.mem_pool_get_attribute(handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
          CUDA_SUCCESS ||
      d.mem_pool_get_attribute(handle, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS) {
    return;
  }
  SetMemInfoPool(r, reserved, used);
  uint64_t free_bytes = 0, total_bytes = 0;
  if (ReadMemInfo(device, &free_bytes, &total_bytes)) SetMemInfoDevice(r, free_bytes, total_bytes);
  r.seq = Agent().seq.load(std::memory_order_acquire);
  Submit(r);
}

// --- The program's signal handlers ---
//
// They run through the agent's dispatcher (sigaction and signal are interposed), so a handler
// that interrupts a hook on its thread does not pass for a call nested in that hook.
//
// Why: only the outermost hook on a thread records (recorder.h, HookCall). A handler that runs
// while its thread is inside a hook sees ThreadState::depth > 0, so its CUDA calls were taken
// for the runtime -> driver nesting and were neither recorded nor counted as dropped, and their
// driver result could overwrite the interrupted call's ThreadState::inner_result.
//
// Rule: the dispatcher sets the interrupted thread state aside while the program's handler
// runs (depth 0, no inner result, no agent-code guard), so every CUDA call in the handler is an
// event of its own, recorded like any other; it puts the state back when the handler returns.
// While a handler runs over agent code (ThreadState::signal_over_hook), the agent makes no
// driver calls of its own (AgentMayCallDriver) and the live table never waits for the slot the
// interrupted code holds (live_table.h), so recording stays async-signal-safe: atomics, the
// lock-free ring and tables, no locks, no allocation.
//
// Handlers installed by raw system calls, or before the agent was loaded, are not seen: their
// calls over a hook stay uncounted, as before.

namespace {

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
using SignalFn = sighandler_t (*)(int, sighandler_t);

constinit std::atomic<SigactionFn> g_real_sigaction{nullptr};
constinit std::atomic<SignalFn> g_real_signal{nullptr};

// The process whose table g_handlers is. A child made by vfork() or posix_spawn() (Python's
// subprocess module uses vfork) shares its parent's memory until it execs, and resets its signal
// dispositions there: written into g_handlers, its SIG_DFLs erased the parent's handlers from
// the table while the parent's kernel still called our dispatcher, which then took the default
// action (a Ctrl-C killed a Python program instead of raising KeyboardInterrupt, and
// faulthandler never ran). Such a child changes only its own kernel dispositions. A fork()
// child has memory of its own and takes the table over (ChildOwnsSignalHandlers).
constinit std::atomic<pid_t> g_handlers_pid{0};

void ChildOwnsSignalHandlers() { g_handlers_pid.store(getpid(), std::memory_order_relaxed); }

}  // namespace

bool OwnsHandlerTable() {
  const pid_t owner = g_handlers_pid.load(std::memory_order_relaxed);
  return owner == 0 || owner == getpid();
}

namespace {

// The handler the program installed for each signal, while the kernel holds our dispatcher.
struct ProgramHandler {
  std::atomic<uintptr_t> fn;  // sa_handler or sa_sigaction; 0 while none is wrapped
  std::atomic<int> flags;     // its sa_flags (SA_SIGINFO says which of the two)
};
constinit ProgramHandler g_handlers[_NSIG] = {};

// First use is the program's first sigaction call, not a signal handler.
SigactionFn RealSigaction() { return NextDefinition(g_real_sigaction, "sigaction"); }

SignalFn RealSignal() { return NextDefinition(g_real_signal, "signal"); }

void Dispatch(int sig, siginfo_t* info, void* context) {
  ThreadState& t = CurrentThread();
  const ThreadState saved = t;
  const bool over_agent = t.depth > 0 || t.guard > 0;
  if (over_agent) {
    t.depth = 0;
    t.guard = 0;
    t.inner_seen = false;
    t.inner_result = 0;
    ++t.signal_over_hook;
  }
  ProgramHandler& h = g_handlers[sig];
  const uintptr_t fn = h.fn.load(std::memory_order_acquire);
  const int flags = h.flags.load(std::memory_order_relaxed);
  // The kernel has just reset the disposition; a query must say so.
  if ((flags & SA_RESETHAND) != 0) h.fn.store(0, std::memory_order_release);
  if (fn == reinterpret_cast<uintptr_t>(SIG_IGN)) {
    // Changed to "ignore" while this signal was being delivered.
  } else if (fn == 0 || fn == reinterpret_cast<uintptr_t>(SIG_DFL)) {
    // Changed to the default meanwhile: take the default action once this handler returns.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    RealSigaction()(sig, &dfl, nullptr);
    raise(sig);
  } else if ((flags & SA_SIGINFO) != 0) {
    reinterpret_cast<void (*)(int, siginfo_t*, void*)>(fn)(sig, info, context);
  } else {
    reinterpret_cast<void (*)(int)>(fn)(sig);
  }
  if (over_agent) {
    t.depth = saved.depth;
    t.guard = saved.guard;
    t.inner_seen = saved.inner_seen;
    t.inner_result = saved.inner_result;
    t.signal_over_hook = saved.signal_over_hook;
  }
}

void DispatchPlain(int sig) { Dispatch(sig, nullptr, nullptr); }

bool Ours(uintptr_t fn) {
  return fn == reinterpret_cast<uintptr_t>(&Dispatch) ||
         fn == reinterpret_cast<uintptr_t>(&DispatchPlain);
}

// A handler the agent puts its dispatcher in front of: a function (not SIG_DFL/SIG_IGN) for a
// signal that can be caught, while the agent records.
bool Wrap(int sig, uintptr_t fn) {
  return sig > 0 && sig < _NSIG && sig != SIGKILL && sig != SIGSTOP &&
         fn != reinterpret_cast<uintptr_t>(SIG_DFL) && fn != reinterpret_cast<uintptr_t>(SIG_IGN) &&
         fn != reinterpret_cast<uintptr_t>(SIG_ERR) && AgentRecording();
}

uintptr_t HandlerOf(const struct sigaction& sa) {
  return (sa.sa_flags & SA_SIGINFO) != 0 ? reinterpret_cast<uintptr_t>(sa.sa_sigaction)
                                         : reinterpret_cast<uintptr_t>(sa.sa_handler);
}

// What the kernel said was installed, as the program installed it.
void Unwrap(struct sigaction* old, uintptr_t program_fn, int program_flags) {
  if (old == nullptr || !Ours(HandlerOf(*old))) return;
  if ((program_flags & SA_SIGINFO) != 0) {
    old->sa_sigaction = reinterpret_cast<void (*)(int, siginfo_t*, void*)>(program_fn);
  } else {
    old->sa_handler = reinterpret_cast<sighandler_t>(program_fn);
    old->sa_flags &= ~SA_SIGINFO;
  }
}

}  // namespace

void OwnSignalHandlerTable() {
  ChildOwnsSignalHandlers();
  pthread_atfork(nullptr, nullptr, ChildOwnsSignalHandlers);
}

extern "C" FRAGSCOPE_HIDDEN int fs_sigaction(int sig, const struct sigaction* act,
                                             struct sigaction* old);
FRAGSCOPE_EXPORT_AS("fs_sigaction", "sigaction");
extern "C" int fs_sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  SigactionFn real = RealSigaction();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  const bool valid = sig > 0 && sig < _NSIG;
  const uintptr_t prev_fn = valid ? g_handlers[sig].fn.load(std::memory_order_acquire) : 0;
  const int prev_flags = valid ? g_handlers[sig].flags.load(std::memory_order_relaxed) : 0;
  const bool owner = OwnsHandlerTable();  // else only the kernel's disposition changes
  if (act == nullptr || !owner || !Wrap(sig, HandlerOf(*act))) {
    int r = real(sig, act, old);
    if (r == 0) Unwrap(old, prev_fn, prev_flags);
    if (r == 0 && act != nullptr && valid && owner) {
      g_handlers[sig].fn.store(0, std::memory_order_release);
    }
    return r;
  }
  // The handler first, then the dispatcher that reads it.
  g_handlers[sig].flags.store(act->sa_flags, std::memory_order_relaxed);
  g_handlers[sig].fn.store(HandlerOf(*act), std::memory_order_release);
  struct sigaction ours = *act;
  ours.sa_sigaction = &Dispatch;
  ours.sa_flags |= SA_SIGINFO;
  int r = real(sig, &ours, old);
  if (r != 0) {
    g_handlers[sig].flags.store(prev_flags, std::memory_order_relaxed);
    g_handlers[sig].fn.store(prev_fn, std::memory_order_release);
    return r;
  }
  Unwrap(old, prev_fn, prev_flags);
  return 0;
}

// glibc's signal() installs through its internal sigaction, which the interposed one does not
// see; wrapped here the same way, keeping glibc's own flags (BSD semantics, siginterrupt).
extern "C" FRAGSCOPE_HIDDEN sighandler_t fs_signal(int sig, sighandler_t handler);
FRAGSCOPE_EXPORT_AS("fs_signal", "signal");
extern "C" sighandler_t fs_signal(int sig, sighandler_t handler) {
  SignalFn real = RealSignal();
  if (real == nullptr) {
    errno = ENOSYS;
    return SIG_ERR;
  }
  const bool valid = sig > 0 && sig < _NSIG;
  const uintptr_t prev_fn = valid ? g_handlers[sig].fn.load(std::memory_order_acquire) : 0;
  const int prev_flags = valid ? g_handlers[sig].flags.load(std::memory_order_relaxed) : 0;
  const bool owner = OwnsHandlerTable();  // see fs_sigaction
  const bool wrap = owner && Wrap(sig, reinterpret_cast<uintptr_t>(handler));
  if (wrap) {
    g_handlers[sig].flags.store(0, std::memory_order_relaxed);
    g_handlers[sig].fn.store(reinterpret_cast<uintptr_t>(handler), std::memory_order_release);
  }
  sighandler_t r = real(sig, wrap ? &DispatchPlain : handler);
  if (r == SIG_ERR) {
    if (wrap) {
      g_handlers[sig].flags.store(prev_flags, std::memory_order_relaxed);
      g_handlers[sig].fn.store(prev_fn, std::memory_order_release);
    }
    return r;
  }
  if (!wrap && valid && owner) g_handlers[sig].fn.store(0, std::memory_order_release);
  return Ours(reinterpret_cast<uintptr_t>(r)) ? reinterpret_cast<sighandler_t>(prev_fn) : r;
}

// glibc's other ways to install a handler go through its internal sigaction, which the
// interposed one does not see: written here on top of fs_sigaction with the flags glibc gives
// them, so their handlers run behind the dispatcher too.
namespace {
sighandler_t InstallWithFlags(int sig, sighandler_t handler, int flags) {
  struct sigaction act {};
  act.sa_handler = handler;
  act.sa_flags = flags;
  sigemptyset(&act.sa_mask);
  struct sigaction old {};
  if (fs_sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}
}  // namespace

// System V semantics: reset to the default on delivery, the signal not blocked in the handler.
extern "C" FRAGSCOPE_HIDDEN sighandler_t fs_sysv_signal(int sig, sighandler_t handler);
FRAGSCOPE_EXPORT_AS("fs_sysv_signal", "sysv_signal");
FRAGSCOPE_EXPORT_AS("fs_sysv_signal", "__sysv_signal");
extern "C" sighandler_t fs_sysv_signal(int sig, sighandler_t handler) {
  if (sig <= 0 || sig >= _NSIG || handler == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  return InstallWithFlags(sig, handler, SA_RESETHAND | SA_NODEFER);
}

// bsd_signal and ssignal are signal() under other names.
extern "C" FRAGSCOPE_HIDDEN sighandler_t fs_bsd_signal(int sig, sighandler_t handler);
FRAGSCOPE_EXPORT_AS("fs_bsd_signal", "bsd_signal");
FRAGSCOPE_EXPORT_AS("fs_bsd_signal", "ssignal");
extern "C" sighandler_t fs_bsd_signal(int sig, sighandler_t handler) {
  return fs_signal(sig, handler);
}

// X/Open sigset: SIG_HOLD blocks the signal; any other disposition is installed and unblocks
// it. Returns SIG_HOLD if the signal was blocked before, else the previous disposition.
extern "C" FRAGSCOPE_HIDDEN sighandler_t fs_sigset(int sig, sighandler_t disposition);
FRAGSCOPE_EXPORT_AS("fs_sigset", "sigset");
extern "C" sighandler_t fs_sigset(int sig, sighandler_t disposition) {
  if (sig <= 0 || sig >= _NSIG || disposition == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  sigset_t one, before;
  sigemptyset(&one);
  sigaddset(&one, sig);
  if (disposition == SIG_HOLD) {
    struct sigaction old {};
    if (fs_sigaction(sig, nullptr, &old) != 0) return SIG_ERR;
    if (pthread_sigmask(SIG_BLOCK, &one, &before) != 0) return SIG_ERR;
    return sigismember(&before, sig) ? SIG_HOLD : old.sa_handler;
  }
  const sighandler_t old = InstallWithFlags(sig, disposition, 0);
  if (old == SIG_ERR) return SIG_ERR;
  if (pthread_sigmask(SIG_UNBLOCK, &one, &before) != 0) return SIG_ERR;
  return sigismember(&before, sig) ? SIG_HOLD : old;
}

}  // namespace fragscope::agent
