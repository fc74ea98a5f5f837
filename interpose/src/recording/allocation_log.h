// Per-thread logs of the allocations a dormant agent sees, folded into the live table later.
//
// Why: a dormant agent keeps only the live table, yet its insert and erase (a compare-and-swap
// on a shared slot, a global seq, ~240 instructions each) made a cudaMalloc/cudaFree pair ~30 %
// slower on the null fake driver, where the target asks for 2 % (tests/bench/RESULTS.md). Here
// an allocation costs its owner thread a few plain stores into its own log, and a release of an
// allocation still in that log cancels it in place; what remains is folded into the live table
// by the background thread (every poll, ~100 ms) and by a wake before its snapshot, so the
// table plus the logs always hold exactly what is live. A release that finds its allocation
// neither in its own log nor in the table cancels it in the log of the thread that made it
// (TryCancelElsewhere), or, if a fold took it first, finds it in the table once that fold ends.
// Entries' addresses are the one field two threads may change at once: a release elsewhere and
// a fold each take an entry with a compare-and-swap on it.
//
// Folding runs while every owner is held off: the folder closes the gate (`gate_`), makes each
// owner's pending stores visible and waits for owners inside an operation to leave it. An owner
// marks itself inside (`in_op`) before it reads the gate, so either it sees the gate closed and
// uses the table instead, or the folder sees it inside and waits. That store-then-load pair
// needs a full fence on one side: the folder issues it for every thread at once with
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), so owners pay only a compiler barrier. Without
// membarrier (old kernels, seccomp, ThreadSanitizer builds) owners use a locked exchange.
//
// Logged entries carry no seq: they were made live before any wake's snapshot, which folds
// them first (LiveTable seq 0). Nothing else (handles, VMM, blocks) is logged.
//
// Thread safety: TryAppend/TryCancel/TryCancelAnywhere on the calling thread's own log, from any
// thread; TryCancelElsewhere, WaitForFolds, FoldAll, Close, Open, HasUnfolded and CountUnfolded
// from any thread; ResetAfterFork only in a fork
// child. No heap: one mmap at Init; threads take logs from it and give them back at exit.
#ifndef FRAGSCOPE_INTERPOSE_ALLOCATION_LOG_H_
#define FRAGSCOPE_INTERPOSE_ALLOCATION_LOG_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "recording/api.h"
#include "recording/live_table.h"

namespace fragscope::agent {

// One logged allocation (what LiveEntry needs of it): five 64-bit words.
//
// In a log, an entry is written and read word by word with relaxed atomic operations (StoreTo,
// LoadFrom): a release on another thread may read an entry its owner is writing into a reused
// slot (it then finds another address and ignores the rest), and a release elsewhere and a fold
// each take an entry with a compare-and-swap on its address (CancelIf). On x86 and arm64 these
// are plain loads and stores.
struct LoggedAllocation {
  // The address of an entry a release cancelled or a fold took.
  static constexpr uint64_t kCancelledAddress = ~uint64_t{0};

  uint64_t address;  // kCancelledAddress once cancelled by a release or taken by a fold
  uint64_t size;     // bytes
  uint64_t stream;
  uint64_t pool;  // or kPoolDeferred
  uint64_t meta;  // api | kind << 16 | uint32(device) << 32 (device: or kDeviceDeferred)

  static LoggedAllocation Make(uint64_t address, uint64_t size, uint64_t stream, uint64_t pool,
                               Api api, MemoryKind kind, int32_t device) {
    return LoggedAllocation{address, size, stream, pool,
                            static_cast<uint64_t>(static_cast<uint16_t>(api)) |
                                static_cast<uint64_t>(static_cast<uint8_t>(kind)) << 16 |
                                static_cast<uint64_t>(static_cast<uint32_t>(device)) << 32};
  }
  Api api() const { return static_cast<Api>(meta & 0xffff); }
  MemoryKind kind() const { return static_cast<MemoryKind>((meta >> 16) & 0xff); }
  int32_t device() const { return static_cast<int32_t>(static_cast<uint32_t>(meta >> 32)); }
  LiveEntry ToLiveEntry() const;

  // Writes this entry into log slot `slot`, its address last.
  void StoreTo(LoggedAllocation& slot) const {
    __atomic_store_n(&slot.size, size, __ATOMIC_RELAXED);
    __atomic_store_n(&slot.stream, stream, __ATOMIC_RELAXED);
    __atomic_store_n(&slot.pool, pool, __ATOMIC_RELAXED);
    __atomic_store_n(&slot.meta, meta, __ATOMIC_RELAXED);
    __atomic_store_n(&slot.address, address, __ATOMIC_RELAXED);
  }
  // Reads log slot `slot`, with `address` as its address (the slot's may be changing).
  static LoggedAllocation LoadFrom(const LoggedAllocation& slot, uint64_t address) {
    return LoggedAllocation{address, __atomic_load_n(&slot.size, __ATOMIC_RELAXED),
                            __atomic_load_n(&slot.stream, __ATOMIC_RELAXED),
                            __atomic_load_n(&slot.pool, __ATOMIC_RELAXED),
                            __atomic_load_n(&slot.meta, __ATOMIC_RELAXED)};
  }
  uint64_t LoadAddress() const { return __atomic_load_n(&address, __ATOMIC_ACQUIRE); }
  void StoreAddress(uint64_t a) { __atomic_store_n(&address, a, __ATOMIC_RELAXED); }
  // Takes the entry if it still holds `expected` (it becomes kCancelledAddress).
  bool CancelIf(uint64_t expected) {
    return __atomic_compare_exchange_n(&address, &expected, kCancelledAddress, false,
                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
};

inline constexpr uint64_t kAllocationLogCapacity = 1024;  // entries per thread between folds

namespace internal {
enum : uint32_t { kFree = 0, kOwned = 1, kOrphaned = 2 };
// One thread's log. The owner writes in_op, head and entries; the folder writes folded (and
// takes entries) only while the owner is held off; other threads' releases read head, folded
// and entries at any time and take an entry with a compare-and-swap on its address.
struct alignas(64) Log {
  std::atomic<uint32_t> in_op;   // owner: 1 while it reads or changes its entries
  std::atomic<uint32_t> state;   // kFree / kOwned / kOrphaned
  std::atomic<uint64_t> head;    // owner: entries [folded, head) are unfolded
  std::atomic<uint64_t> folded;  // folder, while the owner is held off
  LoggedAllocation entries[kAllocationLogCapacity];
};
inline Log* const kNoLog = reinterpret_cast<Log*>(alignof(Log));
// This thread's log; nullptr until its first append, kNoLog when it has none (all taken, or
// the thread is exiting). initial-exec: no allocation in a hook.
inline thread_local constinit Log* t_log __attribute__((tls_model("initial-exec"))) = nullptr;
// Set while this thread folds: a signal handler's release on it must neither fold nor wait for
// the fold (its own).
inline thread_local constinit bool t_folding __attribute__((tls_model("initial-exec"))) = false;
}  // namespace internal

class AllocationLogs {
 public:
  static constexpr uint64_t kCapacity = kAllocationLogCapacity;
  static constexpr int kMaxLogs = 256;  // threads with a log at once; others use the table
  // A release looks back this far in its own log before it goes to the table.
  static constexpr int kCancelWindow = 16;
  static constexpr uint64_t kCancelledAddress = LoggedAllocation::kCancelledAddress;

  AllocationLogs() = default;
  // Only when no thread uses the logs any more (tests; the agent's is never destroyed).
  ~AllocationLogs();
  AllocationLogs(const AllocationLogs&) = delete;
  AllocationLogs& operator=(const AllocationLogs&) = delete;

  // Maps the logs. `open`: appends are accepted from now (a dormant agent); else Open() first.
  // `allow_membarrier` false forces the locked-exchange protocol (tests of both).
  bool Init(bool open, bool allow_membarrier = true);
  // Whether any thread ever took a log (never, in an agent that was never dormant).
  bool ever_used() const { return logs_used_hw_.load(std::memory_order_acquire) > 0; }
  bool uses_membarrier() const { return membarrier_; }

  // Owner side (hot): logs `entry` on this thread's log. False when the caller must use the
  // table instead: gate closed, log full, no log, or a signal handler over this thread's own
  // operation on its log.
  inline bool TryAppend(const LoggedAllocation& entry) {
    return TryAppendWith([&entry](LoggedAllocation& slot) { entry.StoreTo(slot); });
  }
  // The same with `fill(LoggedAllocation&)` writing the entry in place (the hook's fields go
  // straight into the log, read only once the log takes them).
  template <typename Fill>
  inline bool TryAppendWith(Fill&& fill);
  // Whether this thread has yet to take a log (its first append will).
  static bool ThreadHasNoLog() { return internal::t_log == nullptr; }
  // Whether this thread holds a log (it took one, and none was refused it).
  static bool ThreadHasUsableLog() {
    internal::Log* log = internal::t_log;
    return log != nullptr && log != internal::kNoLog;
  }
  // Owner side (hot): if `address` is among the last kCancelWindow unfolded entries of this
  // thread's log, removes it, copies it to *out and returns true.
  inline bool TryCancel(uint64_t address, LoggedAllocation* out);
  // The same over every unfolded entry of this thread's log: for a release that missed the
  // table too (allocations freed first in, first out, more than kCancelWindow apart).
  bool TryCancelAnywhere(uint64_t address, LoggedAllocation* out);
  // For a release that found its allocation neither in the table nor (TryCancelAnywhere) in its
  // own log: cancels it in whichever log holds it, another thread's or, while the logs are
  // closed or folded, its own (a compare-and-swap on the entry; no owner is held off). False
  // when no log has it: then it is in the table, or a fold in progress is putting it there
  // (WaitForFolds), or the agent never saw it.
  bool TryCancelElsewhere(uint64_t address, LoggedAllocation* out);
  // Returns once no fold is in progress (one that started before the call has ended).
  void WaitForFolds();

  // Folds every log into `table` and returns how many entries went in. Waits for owners inside
  // an operation (a few instructions each), except this thread's own when a signal handler
  // runs over it.
  size_t FoldAll(LiveTable& table);

  // A wake: no appends from now on, and everything logged goes into `table`.
  void Close(LiveTable& table);
  // Back to dormant: appends accepted again.
  void Open();

  // Whether any log holds entries not folded yet (a cheap look at each log's counters).
  bool HasUnfolded() const;
  // Unfolded, uncancelled entries (exact when no owner runs); for status and tests.
  size_t CountUnfolded() const;
  // Logs taken by threads (tests).
  int LogsInUse() const;

  // Fork child: only the calling thread exists; every log is empty and free, the gate as
  // `open` says.
  void ResetAfterFork(bool open);

 private:
  enum : uint32_t { kGateFolding = 1, kGateClosed = 2 };
  internal::Log* ClaimLog();
  internal::Log* LogAt(int i) const;
  // The owner's entry into an operation on `log`: false (and nothing held) when it must not
  // touch its log now.
  inline bool Enter(internal::Log* log);
  // TryCancel past the newest entry, up to `window` entries back; leaves the operation.
  bool CancelOlder(internal::Log* log, uint64_t address, LoggedAllocation* out,
                   uint64_t window);
  size_t FoldLocked(LiveTable& table);  // returns how many entries went into `table`
  void LockFolds();
  bool TryLockFolds();
  void UnlockFolds();
  static void ThreadExit(void* log);
  // Calls fn(Log*) for every log a thread holds or held, until fn returns true; returns whether
  // one did.
  template <typename Fn>
  bool AnyLogInUse(Fn&& fn) const;

  char* logs_ = nullptr;  // kMaxLogs Logs
  bool membarrier_ = false;
  unsigned key_ = 0;  // pthread_key_t: ThreadExit
  bool key_ok_ = false;
  std::atomic<uint32_t> gate_{kGateClosed};
  std::atomic<int> logs_used_hw_{0};  // logs ever taken: scans stop here
  std::atomic<int> fold_lock_{0};
};

[[gnu::always_inline]] inline bool AllocationLogs::Enter(internal::Log* log) {
  // A signal handler over this thread's own operation: its log is mid-change.
  if (log->in_op.load(std::memory_order_relaxed) != 0) return false;
  if (membarrier_) {
    log->in_op.store(1, std::memory_order_relaxed);
    // The folder's membarrier stands in for a fence here (see the top of this file).
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (__builtin_expect(gate_.load(std::memory_order_acquire) == 0, 1)) return true;
  } else {
    log->in_op.exchange(1, std::memory_order_seq_cst);
    if (gate_.load(std::memory_order_seq_cst) == 0) return true;
  }
  log->in_op.store(0, std::memory_order_release);
  return false;
}

template <typename Fill>
[[gnu::always_inline]] inline bool AllocationLogs::TryAppendWith(Fill&& fill) {
  using internal::Log;
  Log* log = internal::t_log;
  if (__builtin_expect(log == nullptr, 0)) {
    if (gate_.load(std::memory_order_relaxed) != 0) return false;
    log = internal::t_log = ClaimLog();
  }
  if (log == internal::kNoLog || !Enter(log)) return false;
  const uint64_t head = log->head.load(std::memory_order_relaxed);
  const bool room = head - log->folded.load(std::memory_order_relaxed) < kCapacity;
  if (__builtin_expect(room, 1)) {
    fill(log->entries[head % kCapacity]);
    // Release: another thread's release that sees this head sees the entry (TryCancelElsewhere).
    log->head.store(head + 1, std::memory_order_release);
  }
  log->in_op.store(0, std::memory_order_release);
  return room;  // full until the next fold: the table takes it
}

[[gnu::always_inline]] inline bool AllocationLogs::TryCancel(uint64_t address,
                                                             LoggedAllocation* out) {
  using internal::Log;
  Log* log = internal::t_log;
  if (log == nullptr || log == internal::kNoLog || !Enter(log)) return false;
  const uint64_t head = log->head.load(std::memory_order_relaxed);
  // The newest entry, what a short-lived allocation's release finds: dropped.
  if (head != log->folded.load(std::memory_order_relaxed)) {
    LoggedAllocation& top = log->entries[(head - 1) % kCapacity];
    if (top.LoadAddress() == address) {
      *out = LoggedAllocation::LoadFrom(top, address);
      // Marked too: a slot past the head must never show a live address to another thread's
      // release, which reads the head and the slots without holding the owner off.
      top.StoreAddress(kCancelledAddress);
      log->head.store(head - 1, std::memory_order_release);
      log->in_op.store(0, std::memory_order_release);
      return true;
    }
  }
  return CancelOlder(log, address, out, kCancelWindow);  // leaves the operation
}

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_ALLOCATION_LOG_H_
