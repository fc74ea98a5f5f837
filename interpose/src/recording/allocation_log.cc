#include "recording/allocation_log.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <new>

#if defined(__SANITIZE_THREAD__)
#define FRAGSCOPE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FRAGSCOPE_TSAN 1
#endif
#endif

namespace fragscope::agent {

using internal::kFree;
using internal::kNoLog;
using internal::kOrphaned;
using internal::kOwned;
using internal::Log;
using internal::t_folding;
using internal::t_log;

LiveEntry LoggedAllocation::ToLiveEntry() const {
  LiveEntry e = ZeroLiveEntry();
  e.cls = LiveClass::kAllocation;
  e.api = api();
  e.kind = kind();
  e.device = device();
  e.address = address;
  e.size = size;
  e.stream = stream;
  e.pool = pool;
  e.seq = 0;  // before any snapshot (see the header)
  return e;
}

namespace {

long Membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

}  // namespace

Log* AllocationLogs::LogAt(int i) const {
  return reinterpret_cast<Log*>(logs_ + static_cast<size_t>(i) * sizeof(Log));
}

template <typename Fn>
bool AllocationLogs::AnyLogInUse(Fn&& fn) const {
  if (logs_ == nullptr) return false;
  const int used = logs_used_hw_.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    Log* log = LogAt(i);
    if (log->state.load(std::memory_order_acquire) != kFree && fn(log)) return true;
  }
  return false;
}

AllocationLogs::~AllocationLogs() {
  if (key_ok_) pthread_key_delete(static_cast<pthread_key_t>(key_));
  if (logs_ != nullptr) munmap(logs_, kMaxLogs * sizeof(Log));
}

bool AllocationLogs::Init(bool open, bool allow_membarrier) {
  if (logs_ != nullptr) return true;
  void* mem = mmap(nullptr, kMaxLogs * sizeof(Log), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  logs_ = static_cast<char*>(mem);  // zero pages: every log free and empty
  pthread_key_t key;
  key_ok_ = pthread_key_create(&key, &AllocationLogs::ThreadExit) == 0;
  key_ = static_cast<unsigned>(key);
#ifndef FRAGSCOPE_TSAN
  // ThreadSanitizer does not model membarrier; its builds check the locked-exchange protocol.
  if (allow_membarrier) {
    const long supported = Membarrier(MEMBARRIER_CMD_QUERY);
    membarrier_ = supported > 0 && (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
                  Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }
#else
  (void)allow_membarrier;
#endif
  gate_.store(open ? 0u : uint32_t{kGateClosed}, std::memory_order_seq_cst);
  return true;
}

Log* AllocationLogs::ClaimLog() {
  if (logs_ == nullptr) return kNoLog;
  for (int i = 0; i < kMaxLogs; ++i) {
    Log* log = LogAt(i);
    uint32_t expected = kFree;
    if (log->state.load(std::memory_order_relaxed) != kFree ||
        !log->state.compare_exchange_strong(expected, kOwned, std::memory_order_acq_rel)) {
      continue;
    }
    int hw = logs_used_hw_.load(std::memory_order_relaxed);
    while (hw < i + 1 &&
           !logs_used_hw_.compare_exchange_weak(hw, i + 1, std::memory_order_acq_rel)) {
    }
    if (key_ok_) pthread_setspecific(static_cast<pthread_key_t>(key_), log);
    return log;
  }
  return kNoLog;  // every log taken: this thread uses the table
}

void AllocationLogs::ThreadExit(void* p) {
  // Later hooks on this exiting thread (other keys' destructors) use the table.
  t_log = kNoLog;
  static_cast<Log*>(p)->state.store(kOrphaned, std::memory_order_release);
}

bool AllocationLogs::TryCancelAnywhere(uint64_t address, LoggedAllocation* out) {
  Log* log = t_log;
  if (log == nullptr || log == kNoLog || !Enter(log)) return false;
  return CancelOlder(log, address, out, kCapacity);  // the newest was looked at: TryCancel
}

bool AllocationLogs::CancelOlder(Log* log, uint64_t address, LoggedAllocation* out,
                                 uint64_t window) {
  const uint64_t head = log->head.load(std::memory_order_relaxed);
  const uint64_t folded = log->folded.load(std::memory_order_relaxed);
  const uint64_t stop = head - folded > window ? head - window : folded;
  // The newest was looked at (TryCancel); an older one is marked, and folds skip it.
  for (uint64_t i = head == folded ? head : head - 1; i > stop;) {
    --i;
    LoggedAllocation& e = log->entries[i % kCapacity];
    if (e.LoadAddress() != address) continue;
    *out = LoggedAllocation::LoadFrom(e, address);
    e.StoreAddress(kCancelledAddress);
    log->in_op.store(0, std::memory_order_release);
    return true;
  }
  log->in_op.store(0, std::memory_order_release);
  return false;
}

bool AllocationLogs::TryCancelElsewhere(uint64_t address, LoggedAllocation* out) {
  bool taken = false;
  // Every log in use, this thread's own too: while a wake closes the logs, or a fold runs, the
  // owner may not enter it (TryCancelAnywhere fails) and must still find its allocation there.
  AnyLogInUse([&](Log* log) {
    // Read without holding the owner off: the window may be stale (its slots then hold other
    // addresses, or entries a fold took), but the entry of a live allocation stays in its slot,
    // unchanged, until it is cancelled or taken, and this thread only acts on a slot holding
    // `address`. The owner wrote that entry before the program could hand the address to
    // this thread.
    const uint64_t head = log->head.load(std::memory_order_acquire);
    const uint64_t folded = log->folded.load(std::memory_order_acquire);
    const uint64_t from = head - folded > kCapacity ? head - kCapacity : folded;
    for (uint64_t at = head; at > from;) {
      --at;
      LoggedAllocation& e = log->entries[at % kCapacity];
      if (e.LoadAddress() != address) continue;
      const LoggedAllocation copy = LoggedAllocation::LoadFrom(e, address);
      // Lost to a fold (or to a second release of the same address): the caller waits for the
      // fold and finds it in the table.
      taken = e.CancelIf(address);
      if (taken) *out = copy;
      return true;  // found: no other log holds it
    }
    return false;
  });
  return taken;
}

void AllocationLogs::WaitForFolds() {
  if (logs_ == nullptr || t_folding) return;
  // A signal handler over this thread's own log operation must not wait for a folder that
  // waits for that operation: one try only.
  Log* const own = t_log;
  if (own != nullptr && own != kNoLog && own->in_op.load(std::memory_order_relaxed) != 0) {
    if (TryLockFolds()) UnlockFolds();
    return;
  }
  LockFolds();
  UnlockFolds();
}

void AllocationLogs::LockFolds() {
  for (int attempt = 0; !TryLockFolds(); ++attempt) LiveTable::Backoff(attempt);
}

bool AllocationLogs::TryLockFolds() {
  int expected = 0;
  return fold_lock_.load(std::memory_order_relaxed) == 0 &&
         fold_lock_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
}

void AllocationLogs::UnlockFolds() { fold_lock_.store(0, std::memory_order_release); }

size_t AllocationLogs::FoldLocked(LiveTable& table) {
  size_t folded = 0;
  gate_.fetch_or(kGateFolding, std::memory_order_seq_cst);
  // Every owner's in_op store and entries are visible from here, and every operation that
  // starts from here sees the gate (the header). Its failure cannot happen once registered.
  if (membarrier_) Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
  Log* const own = t_log;
  AnyLogInUse([&](Log* log) {
    // This thread's own log while a signal handler runs over its operation: that operation
    // cannot finish before we return. Its entries wait for the next fold.
    if (log == own && log->in_op.load(std::memory_order_relaxed) != 0) return false;
    for (int attempt = 0; log->in_op.load(std::memory_order_seq_cst) != 0; ++attempt) {
      LiveTable::Backoff(attempt);
    }
    const uint64_t head = log->head.load(std::memory_order_relaxed);
    const uint64_t from = log->folded.load(std::memory_order_relaxed);
    for (uint64_t at = from; at < head; ++at) {
      LoggedAllocation& e = log->entries[at % kCapacity];
      const uint64_t address = e.LoadAddress();
      if (address == kCancelledAddress) continue;
      const LiveEntry entry = LoggedAllocation::LoadFrom(e, address).ToLiveEntry();
      // Taken with a compare-and-swap: a release on another thread may cancel it meanwhile
      // (TryCancelElsewhere); whichever comes first has it.
      if (!e.CancelIf(address)) continue;
      table.Insert(entry);  // a full table counts an overflow, as a direct insert does
      ++folded;
    }
    log->folded.store(head, std::memory_order_relaxed);
    // An exited thread's log, now empty, goes back for another thread to take.
    if (log->state.load(std::memory_order_acquire) == kOrphaned) {
      log->head.store(0, std::memory_order_relaxed);
      log->folded.store(0, std::memory_order_relaxed);
      log->state.store(kFree, std::memory_order_release);
    }
    return false;
  });
  gate_.fetch_and(~uint32_t{kGateFolding}, std::memory_order_seq_cst);
  return folded;
}

size_t AllocationLogs::FoldAll(LiveTable& table) {
  if (logs_ == nullptr || t_folding) return 0;
  LockFolds();
  t_folding = true;
  const size_t folded = FoldLocked(table);
  t_folding = false;
  UnlockFolds();
  return folded;
}

void AllocationLogs::Close(LiveTable& table) {
  if (logs_ == nullptr) return;
  gate_.fetch_or(kGateClosed, std::memory_order_seq_cst);
  FoldAll(table);
}

void AllocationLogs::Open() {
  if (logs_ == nullptr) return;
  gate_.fetch_and(~uint32_t{kGateClosed}, std::memory_order_seq_cst);
}

bool AllocationLogs::HasUnfolded() const {
  return AnyLogInUse([](Log* log) {
    // An exited thread's log is folded to be given back, even empty.
    return log->state.load(std::memory_order_relaxed) == kOrphaned ||
           log->head.load(std::memory_order_acquire) != log->folded.load(std::memory_order_relaxed);
  });
}

size_t AllocationLogs::CountUnfolded() const {
  size_t n = 0;
  AnyLogInUse([&n](Log* log) {
    const uint64_t head = log->head.load(std::memory_order_acquire);
    for (uint64_t at = log->folded.load(std::memory_order_relaxed); at < head; ++at) {
      n += log->entries[at % kCapacity].LoadAddress() != kCancelledAddress ? 1 : 0;
    }
    return false;
  });
  return n;
}

int AllocationLogs::LogsInUse() const {
  int n = 0;
  AnyLogInUse([&n](Log*) {
    ++n;
    return false;
  });
  return n;
}

void AllocationLogs::ResetAfterFork(bool open) {
  if (logs_ == nullptr) return;
  // Fresh pages: the parent's threads, logs and any fold in progress are not this process's.
  void* mem = mmap(logs_, kMaxLogs * sizeof(Log), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (mem == MAP_FAILED) {
    for (int i = 0; i < kMaxLogs; ++i) new (LogAt(i)) Log();
  }
  t_log = nullptr;
  t_folding = false;
  if (key_ok_) pthread_setspecific(static_cast<pthread_key_t>(key_), nullptr);
  // Linux keeps the registration across fork (checked on 6.18), but nothing documents it: ask
  // again, and if refused, owners use the locked exchange (safe to switch: no other thread yet).
  if (membarrier_ && Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) {
    membarrier_ = false;
  }
  logs_used_hw_.store(0, std::memory_order_relaxed);
  fold_lock_.store(0, std::memory_order_relaxed);
  gate_.store(open ? 0u : uint32_t{kGateClosed}, std::memory_order_seq_cst);
}

}  // namespace fragscope::agent
