#include "recording/live_table.h"

#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include <cstring>
#include <new>

namespace fragscope::agent {

LiveTable::~LiveTable() {
  if (slots_mem_ != nullptr) munmap(slots_mem_, slots_ * sizeof(Slot));
  if (cold_ != nullptr) munmap(cold_, slots_ * sizeof(Cold));
}

bool LiveTable::Init(size_t slots) {
  size_t n = 64;
  while (n < slots) n *= 2;
  void* mem = mmap(nullptr, n * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  void* cold = mmap(nullptr, n * sizeof(Cold), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (cold == MAP_FAILED) {
    munmap(mem, n * sizeof(Slot));
    return false;
  }
  // Windows of keys land at random runs: huge pages spare a TLB miss per new run where THP is
  // allowed.
  madvise(mem, n * sizeof(Slot), MADV_HUGEPAGE);
  slots_mem_ = static_cast<Slot*>(mem);  // zero pages: every state is kEmpty
  cold_ = static_cast<Cold*>(cold);
  slots_ = n;
  insert_probes_ = n < kMaxInsertProbes ? n : kMaxInsertProbes;
  return true;
}

bool LiveTable::HoldsKey(const Slot& slot, LiveClass cls, uint64_t key) {
  // Atomic reads: a writer may be claiming the slot meanwhile; the caller's compare-and-swap
  // on the state word then fails and it looks again, so a stale answer does no harm.
  return __atomic_load_n(&slot.address, __ATOMIC_RELAXED) == key &&
         (__atomic_load_n(&slot.header, __ATOMIC_RELAXED) & 0xff) == static_cast<uint64_t>(cls);
}

bool LiveTable::WaitForBusy(const void* outer, int attempt) {
  // A handler that interrupted this thread's own claim (outer) holds that slot busy while it
  // waits. Two such handlers on two threads, each waiting for the slot the other's interrupted
  // code holds, would wait forever (seen: a stress run with handlers that allocate hung at
  // 100 % CPU). So a waiter that holds a slot gives up after a while and passes the busy slot
  // over, as if another key were there. What that can cost: an insert lands further down its
  // chain, or a release misses its entry and reaches the collector as an unmatched free, which
  // reports count. Holders that hold nothing wait as before; every cycle has a waiter that
  // holds a slot, so none is left.
  if (outer != nullptr && attempt >= kNestedWaitAttempts) return false;
  Backoff(attempt);
  return true;
}

void LiveTable::Backoff(int attempt) {
  if (attempt < 64) return;  // a writer holds a slot for a few instructions
  if (attempt < 1024) {
    sched_yield();
    return;
  }
  timespec ts{0, 50'000};  // it was preempted: let it run
  nanosleep(&ts, nullptr);
}

LiveTable::Slot* LiveTable::ClaimLive(LiveClass cls, uint64_t key, uint64_t* claimed_state) const {
  if (slots_mem_ == nullptr) return nullptr;
  const Chain chain = ChainOf(cls, key);
  const void* const outer = t_live_slot_held;
  // Relaxed: the raise this lookup must see happened before it (probe_limit_).
  const uint64_t limit = probe_limit_.load(std::memory_order_relaxed);
  for (uint64_t probe = 0; probe < limit; ++probe) {
    Slot& slot = slots_mem_[SlotOf(chain, probe)];
    if (&slot == outer) continue;  // held by the code a signal handler interrupted
    for (int spin = 0;; ++spin) {
      uint64_t state = slot.state.load(std::memory_order_acquire);
      uint64_t kind = state & 3;
      if (kind == kEmpty) return nullptr;  // end of the probe chain
      if (kind == kTombstone) break;
      if (kind == kBusy) {  // being written; look again once it settles
        if (!WaitForBusy(outer, spin)) break;
        continue;
      }
      if (!HoldsKey(slot, cls, key)) break;
      t_live_slot_held = &slot;  // before the claim: a handler must never wait for it
      if (slot.state.compare_exchange_weak(state, Next(state, kBusy), std::memory_order_acquire)) {
        *claimed_state = Next(state, kBusy);
        return &slot;
      }
      t_live_slot_held = outer;
    }
  }
  return nullptr;
}

bool LiveTable::InsertWithSeq(const LiveEntry& entry, uint64_t seq, size_t* index) {
  if (slots_mem_ == nullptr) return false;
  const Chain chain = ChainOf(entry.cls, entry.address);
  const void* const outer = t_live_slot_held;
  // One pass: the first free slot (empty, or a tombstone nobody needs) takes the entry, unless
  // the same key is met live on the way (an allocation whose release we never saw): then that
  // entry is replaced. Not looking further keeps inserts short however many tombstones pile up.
  for (uint64_t probe = 0; probe < insert_probes_; ++probe) {
    Slot& slot = slots_mem_[SlotOf(chain, probe)];
    if (&slot == outer) continue;  // held by the code a signal handler interrupted
    for (int spin = 0;; ++spin) {
      uint64_t s = slot.state.load(std::memory_order_acquire);
      uint64_t kind = s & 3;
      if (kind == kBusy) {
        if (!WaitForBusy(outer, spin)) break;  // passed over: next slot
        continue;
      }
      bool replace = kind == kLive && HoldsKey(slot, entry.cls, entry.address);
      bool take = kind == kEmpty || (kind == kTombstone && Reusable(slot));
      if (!replace && !take) break;  // occupied: next slot
      t_live_slot_held = &slot;      // before the claim: a handler must never wait for it
      if (!slot.state.compare_exchange_weak(s, Next(s, kBusy), std::memory_order_acquire)) {
        t_live_slot_held = outer;
        continue;  // changed under us: look again
      }
      const size_t at = static_cast<size_t>(&slot - slots_mem_);
      StoreEntry(at, entry, seq);
      // The next page's slot, for the allocation after this one: allocators hand out ascending
      // addresses (ChainOf), and a line loaded now is not waited for then (dormant hook
      // benchmark: about -4 ns per call).
      __builtin_prefetch(&slots_mem_[(at + 1) & (slots_ - 1)], 1);
      if (index != nullptr) *index = at;
      if (probe >= kRunSlots && probe >= probe_limit_.load(std::memory_order_relaxed)) {
        RaiseProbeLimit(probe + 1);
      }
      slot.state.store(Next(Next(s, kBusy), kLive), std::memory_order_release);
      t_live_slot_held = outer;
      return true;
    }
  }
  if (overflows_.fetch_add(1, std::memory_order_relaxed) == 0) {
    // Once: what a warning reports. Every slot's state word up to 2^18 slots (a few ms), every
    // k-th one beyond, scaled: a hook (or a signal handler) pays this, on a path that has just
    // lost an entry, and a walk over 2^26 slots would take about a second.
    constexpr size_t kCountedSlots = size_t{1} << 18;
    const size_t step = slots_ > kCountedSlots ? slots_ / kCountedSlots : 1;
    size_t live = 0;
    for (size_t i = 0; i < slots_; i += step) {
      live += (slots_mem_[i].state.load(std::memory_order_relaxed) & 3) == kLive ? 1 : 0;
    }
    live_at_first_overflow_.store(live * step, std::memory_order_relaxed);
  }
  return false;
}

void LiveTable::RaiseProbeLimit(uint64_t limit) {
  uint64_t seen = probe_limit_.load(std::memory_order_relaxed);
  while (seen < limit &&
         !probe_limit_.compare_exchange_weak(seen, limit, std::memory_order_relaxed)) {
  }
}

bool LiveTable::Erase(LiveClass cls, uint64_t key, LiveEntry* out, size_t* index) {
  const void* const outer = t_live_slot_held;
  uint64_t state;
  Slot* slot = ClaimLive(cls, key, &state);
  if (slot == nullptr) {
    t_live_slot_held = outer;
    return false;
  }
  if (out != nullptr) LoadEntry(static_cast<size_t>(slot - slots_mem_), out);
  __atomic_store_n(&slot->removed_seq, index != nullptr ? kSeqPending : 0, __ATOMIC_RELAXED);
  if (index != nullptr) *index = static_cast<size_t>(slot - slots_mem_);
  slot->state.store(Next(state, kTombstone), std::memory_order_release);
  t_live_slot_held = outer;
  return true;
}

void LiveTable::StoreResolved(size_t index, int32_t device, uint64_t pool) {
  Slot& slot = slots_mem_[index];
  const uint64_t header = LoadWord(slot.header);
  StoreWord(slot.header, WithDevice(header, device));
  // A deferred pool is not zero, so its entry has the cold fields (StoreEntry).
  if (((header >> 32) & kColdFlag) != 0) StoreWord(cold_[index].pool, pool);
}

void LiveTable::SetResolved(size_t index, int32_t device, uint64_t pool) {
  FRAGSCOPE_DCHECK(index < slots_);
  Slot& slot = slots_mem_[index];
  const void* const outer = t_live_slot_held;
  for (int spin = 0;; ++spin) {
    uint64_t s = slot.state.load(std::memory_order_acquire);
    if ((s & 3) == kBusy) {  // ResolveDeferred stores into it for a few instructions
      Backoff(spin);
      continue;
    }
    if ((s & 3) != kLive) return;
    t_live_slot_held = &slot;
    if (!slot.state.compare_exchange_weak(s, Next(s, kBusy), std::memory_order_acquire)) continue;
    StoreResolved(index, device, pool);
    slot.state.store(Next(Next(s, kBusy), kLive), std::memory_order_release);
    t_live_slot_held = outer;
    return;
  }
}

void LiveTable::SetErasedResolved(size_t index, int32_t device, uint64_t pool) {
  // Pending tombstone: nobody reuses it or reads its entry until SetRemovedSeq (release).
  FRAGSCOPE_DCHECK(index < slots_);
  FRAGSCOPE_DCHECK(__atomic_load_n(&slots_mem_[index].removed_seq, __ATOMIC_RELAXED) ==
                   kSeqPending);
  StoreResolved(index, device, pool);
}

bool LiveTable::Reusable(const Slot& slot) const {
  uint64_t removed = __atomic_load_n(&slot.removed_seq, __ATOMIC_ACQUIRE);
  if (removed == kSeqPending) return false;
  if (scans_.load(std::memory_order_seq_cst) == 0) return true;
  // A scan runs at S: it needs only the tombstones of entries live at S (made live at or
  // before S, removed after). Any other may go: removed at or before S, or made live after S
  // (an address freed and allocated again during the scan, which is common: a scan takes
  // milliseconds and the program reuses the same few addresses thousands of times meanwhile).
  // Keeping those too made every reuse take one slot further down its probe chain, until
  // inserts ran past their probe bound and were lost, and with them entries of later snapshots.
  // S is 0 while not published yet (just after the scan is announced, and as it ends). Then
  // only what was removed at or below the scan's floor may go: S is at least that. (Nothing at
  // all, as before, let a scanner preempted in that window stop every reuse for a time slice;
  // churning writers then ran their probe chains past their bound and lost entries: a flaky
  // ConcurrentWritersAndScanner under load.)
  const uint64_t at = scan_at_.load(std::memory_order_seq_cst);
  if (at == 0) return removed <= scan_floor_.load(std::memory_order_seq_cst);
  if (removed <= at) return true;
  const uint64_t made = __atomic_load_n(&slot.seq, __ATOMIC_ACQUIRE);
  return made != kSeqPending && made > at;
}

bool LiveTable::LiveAt(const Slot& slot, uint64_t at, LiveEntry* out) const {
  // Bounded at about two seconds (Backoff sleeps 50 us per attempt after the first 1024).
  for (int attempt = 0; attempt < 41024; ++attempt) {
    Backoff(attempt);
    uint64_t before = slot.state.load(std::memory_order_acquire);
    uint64_t kind = before & 3;
    if (kind == kEmpty) return false;
    if (kind == kBusy) continue;  // a writer holds it for a few instructions
    // A tombstone's stamp first: what its remover wrote before stamping it (SetErasedResolved)
    // is then in the copy.
    const uint64_t removed =
        kind == kTombstone ? __atomic_load_n(&slot.removed_seq, __ATOMIC_ACQUIRE) : kSeqPending;
    if (kind == kTombstone && removed == kSeqPending) continue;  // seq not stamped yet
    LoadEntry(static_cast<size_t>(&slot - slots_mem_), out);
    if (slot.state.load(std::memory_order_relaxed) != before) continue;
    if (out->seq == kSeqPending) continue;  // inserted, seq not stamped yet
    if (kind == kLive) return out->seq <= at;
    return out->seq <= at && removed > at;  // removed after the snapshot point
  }
  return false;  // a writer stalled for seconds: leave the entry out
}

bool LiveTable::Find(LiveClass cls, uint64_t key, LiveEntry* out) const {
  const void* const outer = t_live_slot_held;
  uint64_t state;
  Slot* slot = ClaimLive(cls, key, &state);
  if (slot == nullptr) {
    t_live_slot_held = outer;
    return false;
  }
  LoadEntry(static_cast<size_t>(slot - slots_mem_), out);
  slot->state.store(Next(state, kLive), std::memory_order_release);
  t_live_slot_held = outer;
  return true;
}

LiveTable::Occupancy LiveTable::Count() const {
  Occupancy o;
  o.slots = slots_;
  for (size_t i = 0; i < slots_; ++i) {
    switch (slots_mem_[i].state.load(std::memory_order_relaxed) & 3) {
      case kLive:
        ++o.live;
        break;
      case kTombstone:
        ++o.tombstones;
        break;
      case kBusy:
        ++o.busy;
        break;
      default:
        break;
    }
  }
  return o;
}

void LiveTable::Clear() {
  if (slots_mem_ == nullptr) return;
  // Fresh anonymous pages instead of touching every slot.
  void* mem = mmap(slots_mem_, slots_ * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (mem == MAP_FAILED) {
    for (size_t i = 0; i < slots_; ++i) slots_mem_[i].state.store(kEmpty);
  }
  scans_.store(0, std::memory_order_relaxed);
  scan_at_.store(0, std::memory_order_relaxed);
  scan_floor_.store(0, std::memory_order_relaxed);
  overflows_.store(0, std::memory_order_relaxed);
  live_at_first_overflow_.store(0, std::memory_order_relaxed);
  probe_limit_.store(kRunSlots, std::memory_order_relaxed);
}

}  // namespace fragscope::agent
