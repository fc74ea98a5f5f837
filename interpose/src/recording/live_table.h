// The agent's compact table of what is live right now: allocations, VMM reservations, physical
// handles, mappings and sub-allocator blocks. A Snapshot built from it is exact at the sequence
// number S it carries: it lists every entry made live by an event with seq <= S and not removed
// by an event with seq <= S.
//
// How that holds without locks: an insert is visible (seq "pending") before its seq is taken
// and stamped; a removal leaves a tombstone that keeps the entry, also "pending" until the
// removing event's seq is stamped. The scanner reads S after announcing itself, waits out the
// few pending stamps it meets, and judges each entry by its two seqs. Nobody reuses a tombstone
// whose removal is unstamped, or, while a scan runs, one removed after the scan's seq, so no
// entry the scan needs vanishes.
//
// Lock-free open addressing: each slot has a state word (empty / busy / live / tombstone, with
// a generation in the high bits). Writers claim a slot with a compare-and-swap; the scanner
// accepts what it copied only if the state word did not change meanwhile.
//
// Thread safety: Insert/Erase/Find/Update/Set*Seq from any thread; ForEachAt from one thread at
// a time; Clear only when no other thread touches the table (the child after fork). Memory: one
// mmap at Init, zero pages until used.
#ifndef FRAGSCOPE_INTERPOSE_LIVE_TABLE_H_
#define FRAGSCOPE_INTERPOSE_LIVE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "recording/agent_check.h"
#include "recording/api.h"

namespace fragscope::agent {

// What a key names; the same address can be a reservation, a mapping and a block at once.
enum class LiveClass : uint8_t {
  kAllocation = 1,   // cudaMalloc & co., imports: LiveAllocation
  kReservation = 2,  // cuMemAddressReserve: LiveReservation
  kHandle = 3,       // cuMemCreate/import: LiveHandle (key = handle value)
  kMapping = 4,      // cuMemMap: LiveMapping (key = mapped address)
  kBlock = 5,        // annotate.h blocks: LiveBlock
};

// Values of one entry (plain data, copied in and out).
struct alignas(8) LiveEntry {
  LiveClass cls;
  Api api;
  MemoryKind kind;
  uint8_t flags;     // LiveFlags
  int32_t device;    // -1 unknown; kDeviceDeferred: not read yet
  uint64_t address;  // key (address, or handle value for kHandle)
  uint64_t size;     // bytes
  uint64_t stream;
  uint64_t pool;    // pool / sub-allocator pool id
  uint64_t handle;  // mapping: its handle; block: allocator id
  uint64_t offset;  // mapping: offset into the handle
  uint64_t stack_id;
  uint64_t seq;  // seq of the event that made it live; kSeqPending while being stamped
  int64_t refs;  // handle: references (create/import/retain minus release)
  int64_t maps;  // handle: live mappings
};
static_assert(sizeof(LiveEntry) % 8 == 0, "copied as 64-bit words");

// A zero entry, copied rather than value-initialized: GCC zeroes a value-initialized LiveEntry
// with `rep stos`, whose start-up cost was half of the dormant allocation hook's own time in
// perf; the copy is a few vector moves. (The empty asm hides the zeros from the optimizer,
// which would turn the copy back into the store loop.)
inline LiveEntry ZeroLiveEntry() {
  static constexpr LiveEntry kZero{};
  const LiveEntry* zero = &kZero;
  asm("" : "+r"(zero));
  return *zero;
}

enum LiveFlags : uint8_t {
  kLiveImported = 1 << 0,
  kLivePendingFree = 1 << 1,
};

inline constexpr uint64_t kSeqPending = ~uint64_t{0};

// LiveEntry::device of an allocation a dormant agent recorded: asking the driver for the
// current device was a third of the dormant hook's cost, and nothing reads the device until a
// wake, which reads it then (ResolveDeferred) from the allocation itself.
inline constexpr int32_t kDeviceDeferred = -2;
// LiveEntry::pool of a stream-ordered allocation a dormant agent recorded, for the same reason
// (the current device and its current pool were two driver calls per cudaMallocAsync).
inline constexpr uint64_t kPoolDeferred = ~uint64_t{0};
inline bool HasDeferredFields(const LiveEntry& e) {
  return e.device == kDeviceDeferred || e.pool == kPoolDeferred;
}

// The slot this thread is claiming or holds busy, if any. A signal handler that interrupts the
// holder on the same thread and uses the table itself (its CUDA calls are recorded) must not
// wait for that slot: the holder cannot finish before the handler returns. It passes over it
// instead, as if another key were there, and waits only a bounded time for slots other threads
// hold (WaitForBusy: their holders may be under handlers waiting for ours). initial-exec: no
// allocation in a handler.
inline thread_local constinit const void* t_live_slot_held
    __attribute__((tls_model("initial-exec"))) = nullptr;

class LiveTable {
 public:
  // Maximum load: an insert is refused (counted in overflows()) only when the first
  // kMaxInsertProbes slots of its probe chain are all taken. The chain visits the table's slots
  // in an order hashed per key (ChainOf), so that comes at 98 % of the slots live or more:
  // measured 98.4 to 99.9 % for 2^12 to 2^22 slots with keys 512 B to 2 MiB apart or random,
  // and 99.5 % or more after allocate/free churn at 90 % (LiveTableTest.AcceptsInsertsUpTo*).
  // A table of at most this many slots refuses only when none is free. The bound keeps a
  // refused insert, which a program past its table's size makes at every allocation, to about
  // 10 us (128 KiB of slots) instead of a walk of the whole table.
  static constexpr uint64_t kMaxInsertProbes = 2048;

  LiveTable() = default;
  LiveTable(const LiveTable&) = delete;
  LiveTable& operator=(const LiveTable&) = delete;
  ~LiveTable();

  bool Init(size_t slots);  // rounded up to a power of two

  // Inserts (cls, entry.address), replacing a live entry of the same key met before the first
  // free slot. False when the table is full. `*index` (optional) names the slot for SetSeq.
  bool Insert(const LiveEntry& entry, size_t* index = nullptr) {
    return InsertWithSeq(entry, entry.seq, index);
  }
  // The same with the entry's seq "pending" (kSeqPending), whatever entry.seq says: the insert
  // that comes before its event's seq is taken and stamped (SetSeq).
  bool InsertPending(const LiveEntry& entry, size_t* index) {
    return InsertWithSeq(entry, kSeqPending, index);
  }
  // Stamps the seq of the entry Insert put at `index` (its key cannot have been erased since:
  // the program does not have the address yet).
  void SetSeq(size_t index, uint64_t seq);

  // Removes (cls, key) and copies it to *out (optional). False if absent. With `index`, the
  // removal stays pending until SetRemovedSeq(*index, seq) stamps the removing event's seq
  // (callers must stamp it); without, it counts as removed before any snapshot.
  bool Erase(LiveClass cls, uint64_t key, LiveEntry* out, size_t* index = nullptr);
  void SetRemovedSeq(size_t index, uint64_t seq);

  // Sets the device and pool of the live entry Insert put at `index`. Only for the inserting
  // thread's own entry (the program does not have the address yet, so nobody erases it
  // meanwhile).
  void SetResolved(size_t index, int32_t device, uint64_t pool);
  // Sets the device and pool of the entry an Erase(..., &index) left pending, before
  // SetRemovedSeq: a scanner reads a tombstone's entry only once its removal is stamped.
  void SetErasedResolved(size_t index, int32_t device, uint64_t pool);
  // For every live entry with deferred fields (HasDeferredFields), `resolve(LiveEntry&)`
  // replaces them (reading the driver, by address) and the entry's device and pool are
  // stored, unless the entry changed meanwhile: then it is read again. Returns how many were
  // set. One thread at a time.
  //
  // Why the answer is the entry's: the store is a compare-and-swap from the state word read
  // before `resolve` ran, and a release erases its entry before the program's real release
  // call (PendingRelease). An unchanged state word therefore means the memory was still
  // allocated, under the same address, all the while the driver was asked. Tombstones are the
  // releasing thread's to fill (SetErasedResolved).
  template <typename Fn>
  size_t ResolveDeferred(Fn&& resolve);

  // Copies (cls, key) to *out. False if absent.
  bool Find(LiveClass cls, uint64_t key, LiveEntry* out) const;
  // Applies `fn(LiveEntry&)` to (cls, key) under the slot's claim and returns fn's result
  // (false also when absent). fn must be short and must not touch the table.
  template <typename Fn>
  bool Update(LiveClass cls, uint64_t key, Fn&& fn);

  // Snapshot scan: reads S from `seq_source` (after announcing the scan) into *snapshot_seq and
  // calls fn(const LiveEntry&) for every entry live at S. Returns how many.
  template <typename Fn>
  size_t ForEachAt(const std::atomic<uint64_t>& seq_source, uint64_t* snapshot_seq, Fn&& fn);

  // Starts loading the first slot of (cls, key)'s probe chain. An insert of a new address
  // lands on a random slot of a table of tens of MiB: a cache miss per allocation. Issued when
  // the address is known, ahead of the caller's other work (the device query, building the
  // record), the miss overlaps that work instead of stalling the insert.
  void Prefetch(LiveClass cls, uint64_t key) const {
    if (slots_mem_ == nullptr) return;
    __builtin_prefetch(&slots_mem_[SlotOf(ChainOf(cls, key), 0)], 1);
  }

  void Clear();
  // What the slots hold, counted by reading every state word: O(slots), for status, warnings
  // and tests. Exact when no writer runs. (No counter is kept: an atomic add on a shared line at
  // every insert and erase cost the hook about 12 ns per call.)
  struct Occupancy {
    size_t live = 0;        // entries live now
    size_t tombstones = 0;  // removed entries whose slots are free again, unless a scan needs them
    size_t busy = 0;        // slots a writer is changing this instant
    size_t slots = 0;       // slots()
  };
  Occupancy Count() const;
  size_t CountLive() const { return Count().live; }
  size_t slots() const { return slots_; }
  // Inserts refused so far (the table full; FRAGSCOPE_LIVE_SLOTS too small).
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }
  // Live entries when the first insert was refused (counted then, once; exact up to 2^18 slots,
  // estimated from a sample of the slots beyond), 0 while none was: what a warning about a full
  // table reports beside slots(), since the load may have fallen since.
  size_t live_at_first_overflow() const {
    return live_at_first_overflow_.load(std::memory_order_relaxed);
  }
  // How far lookups look: one more than the furthest probe an insert has needed so far, at
  // least kRunSlots. A sign of how full the table has been.
  uint64_t probe_limit() const { return probe_limit_.load(std::memory_order_relaxed); }

  // Waits a little before attempt `attempt` at a slot another thread is changing: spins, then
  // yields, then sleeps (that thread may have been preempted). Also the allocation logs' wait
  // for an owner or a fold (allocation_log.h).
  static void Backoff(int attempt);

 private:
  // state word: low 2 bits kind, the rest a generation bumped on every transition.
  enum : uint64_t { kEmpty = 0, kBusy = 1, kLive = 2, kTombstone = 3 };
  // One cache line per slot: what an allocation needs (cudaMalloc, cudaMallocAsync) is here,
  // so its insert and erase own one line, not two. The fields few entries use (pools, VMM
  // handles and offsets, handle counts) are in `cold_` at the same index, written only when
  // one of them is not zero (kColdFlag in the header says so). The entry's words are read by
  // the scanner only between two equal loads of `state`.
  struct alignas(64) Slot {
    std::atomic<uint64_t> state;
    uint64_t removed_seq;  // tombstone: seq of the removing event (kSeqPending until stamped)
    uint64_t header;       // cls | api << 8 | kind << 24 | flags << 32 | uint16 device << 48
    uint64_t address;
    uint64_t size;
    uint64_t seq;
    uint64_t stream;
    uint64_t stack_id;
  };
  static_assert(sizeof(Slot) == 64, "a slot is one cache line");
  struct Cold {
    uint64_t pool;
    uint64_t handle;
    uint64_t offset;
    uint64_t refs;  // int64_t bits
    uint64_t maps;
  };
  static constexpr uint8_t kColdFlag = 0x80;  // in the header's flags: `cold_` holds the fields
  // Where (cls, key)'s probe chain goes. Keys close in address space get slots close in the
  // table: each 64 KiB window of keys owns a run of kRunSlots consecutive slots at a hashed
  // place, and a key starts at the run's slot for its 4 KiB page. Allocators hand out addresses
  // in ascending runs (a driver's sub-allocation, consecutive VMM pages, a bump pointer), so
  // successive inserts touch neighbouring lines the hardware prefetcher has already loaded,
  // instead of one cold line in a table of tens of MiB per allocation (about 65 ns per call on
  // the overhead benchmark, tests/bench/RESULTS.md). The chain walks the run once (wrapping),
  // then other runs' blocks of kRunSlots slots, each walked the same way, in an order hashed
  // from the whole key (double hashing over blocks: block j is the run's plus j times an odd
  // step). So a window with more live keys than its run (256-byte allocations side by side)
  // spills its keys over the table as a plain hash would, and the chain visits every slot of
  // the table exactly once in its first slots() probes. (It used to go on linearly from one
  // hashed place for 112 slots: full runs lie next to each other in clusters, and at 44 % of
  // the slots live, keys 4 KiB apart already met a cluster longer than that and were refused.)
  static constexpr uint64_t kRunSlots = 16;  // 2 KiB of slots per 64 KiB window
  struct Chain {
    uint64_t run;         // first slot of the window's run (a multiple of kRunSlots)
    uint64_t page;        // the key's slot in the run
    uint64_t spill_seed;  // hashed (Mix) into the step between the blocks after the run
  };
  static uint64_t Mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
  }
  static Chain ChainOf(LiveClass cls, uint64_t key) {
    const uint64_t salt = static_cast<uint64_t>(cls) * 0x9e3779b97f4a7c15ull;
    return Chain{Mix((key >> 16) ^ salt) * kRunSlots, (key >> 12) & (kRunSlots - 1),
                 key ^ salt ^ 0xc2b2ae3d27d4eb4full};
  }
  // Slot index of probe `probe` (0 .. slots()-1, each slot once) of `chain`.
  size_t SlotOf(const Chain& chain, uint64_t probe) const {
    uint64_t block = chain.run;
    // The step is hashed only when the run is full: nearly every chain ends in its run. Odd,
    // so that j * step runs through every block of the power-of-two table once.
    if (probe >= kRunSlots) {
      block += (probe / kRunSlots) * ((Mix(chain.spill_seed) | 1) * kRunSlots);
    }
    return static_cast<size_t>((block + ((chain.page + probe) & (kRunSlots - 1))) & (slots_ - 1));
  }
  static uint64_t Next(uint64_t state, uint64_t kind) { return ((state | 3) + 1) | kind; }
  static uint64_t WithDevice(uint64_t header, int32_t device) {
    const uint64_t bits = static_cast<uint16_t>(static_cast<int16_t>(device));
    return (header & ~(uint64_t{0xffff} << 48)) | bits << 48;
  }
  static int32_t DeviceOf(uint64_t header) {
    return static_cast<int16_t>(static_cast<uint16_t>(header >> 48));
  }
  // Writes device and pool into slot `index`, which the caller holds or owns.
  void StoreResolved(size_t index, int32_t device, uint64_t pool);
  // Word-by-word atomic copies in and out of slot `index`: the scanner may read an entry a
  // writer is changing; the state word check discards such a torn copy. Inline (below): every
  // insert and erase makes one, and as calls they were a sixth of a dormant hook's instructions.
  void StoreEntry(size_t index, const LiveEntry& entry) { StoreEntry(index, entry, entry.seq); }
  void StoreEntry(size_t index, const LiveEntry& entry, uint64_t seq);
  bool InsertWithSeq(const LiveEntry& entry, uint64_t seq, size_t* index);
  void LoadEntry(size_t index, LiveEntry* out) const;
  // Relaxed word loads and stores: acquire on the loads so that the scanner's re-check of the
  // state word does not move above them (free on x86; a fence would do, but sanitizers do not
  // model fences).
  static uint64_t LoadWord(const uint64_t& word) {
    return __atomic_load_n(&word, __ATOMIC_ACQUIRE);
  }
  static void StoreWord(uint64_t& word, uint64_t value) {
    __atomic_store_n(&word, value, __ATOMIC_RELAXED);
  }
  // Attempts (Backoff's) a waiter that itself holds a slot makes before passing a busy slot
  // over: past the spinning and yielding, about 2 ms of sleeps.
  static constexpr int kNestedWaitAttempts = 1024 + 40;
  // Backs off once for a busy slot; false when the waiter, holding `outer` (a signal handler's
  // operation over its thread's own claim), should stop waiting and pass the slot over.
  static bool WaitForBusy(const void* outer, int attempt);
  static bool HoldsKey(const Slot& slot, LiveClass cls, uint64_t key);
  // Claims the live slot holding (cls, key): state becomes busy. Returns it or nullptr. Leaves
  // t_live_slot_held naming it (or the last slot tried): the caller restores the value it had.
  Slot* ClaimLive(LiveClass cls, uint64_t key, uint64_t* claimed_state) const;
  // Whether an insert may take over tombstone `slot` now.
  bool Reusable(const Slot& slot) const;
  // The scanner's verdict on one slot (waiting out busy slots and pending stamps, bounded):
  // true and *out filled if the entry was live at `at`.
  bool LiveAt(const Slot& slot, uint64_t at, LiveEntry* out) const;

  // Raises probe_limit_ to `limit` if it is below (rare: only an insert that went further down
  // its chain than any before).
  void RaiseProbeLimit(uint64_t limit);

  Slot* slots_mem_ = nullptr;
  Cold* cold_ = nullptr;
  size_t slots_ = 0;
  uint64_t insert_probes_ = 0;  // min(slots_, kMaxInsertProbes)
  // One more than the furthest probe any insert took since Init or Clear, at least kRunSlots.
  // Lookups (ClaimLive) stop there, or at an empty slot before: once tombstones have taken
  // every empty slot of a chain, a lookup of an absent key (a release the table never held)
  // would otherwise walk the whole chain. Only raised, and before the insert returns, so a
  // lookup of that key, which comes after it, sees the raise: the program learns the address
  // from the call that inserted it.
  std::atomic<uint64_t> probe_limit_{kRunSlots};
  std::atomic<int> scans_{0};         // scans in progress (at most one)
  std::atomic<uint64_t> scan_at_{0};  // its snapshot seq once known, else 0
  // A lower bound of the running scan's snapshot seq, known before the scan is announced.
  std::atomic<uint64_t> scan_floor_{0};
  mutable std::atomic<uint64_t> overflows_{0};
  std::atomic<size_t> live_at_first_overflow_{0};
};

inline void LiveTable::SetSeq(size_t index, uint64_t seq) {
  FRAGSCOPE_DCHECK(index < slots_);
  __atomic_store_n(&slots_mem_[index].seq, seq, __ATOMIC_RELEASE);
}

inline void LiveTable::SetRemovedSeq(size_t index, uint64_t seq) {
  FRAGSCOPE_DCHECK(index < slots_);
  // Only the eraser stamps its own pending tombstone, once.
  FRAGSCOPE_DCHECK(__atomic_load_n(&slots_mem_[index].removed_seq, __ATOMIC_RELAXED) ==
                   kSeqPending);
  __atomic_store_n(&slots_mem_[index].removed_seq, seq, __ATOMIC_RELEASE);
}

[[gnu::always_inline]] inline void LiveTable::StoreEntry(size_t index, const LiveEntry& e,
                                                         uint64_t seq) {
  Slot& slot = slots_mem_[index];
  const bool cold = (e.pool | e.handle | e.offset | static_cast<uint64_t>(e.refs) |
                     static_cast<uint64_t>(e.maps)) != 0;
  // Devices are small ordinals (-1: unknown); 16 bits hold them.
  const uint8_t flags = static_cast<uint8_t>((e.flags & ~kColdFlag) | (cold ? kColdFlag : 0));
  StoreWord(slot.header, WithDevice(static_cast<uint64_t>(e.cls) |
                                        static_cast<uint64_t>(static_cast<uint16_t>(e.api)) << 8 |
                                        static_cast<uint64_t>(static_cast<uint8_t>(e.kind)) << 24 |
                                        static_cast<uint64_t>(flags) << 32,
                                    e.device));
  StoreWord(slot.address, e.address);
  StoreWord(slot.size, e.size);
  StoreWord(slot.seq, seq);
  StoreWord(slot.stream, e.stream);
  StoreWord(slot.stack_id, e.stack_id);
  if (cold) {
    Cold& c = cold_[index];
    StoreWord(c.pool, e.pool);
    StoreWord(c.handle, e.handle);
    StoreWord(c.offset, e.offset);
    StoreWord(c.refs, static_cast<uint64_t>(e.refs));
    StoreWord(c.maps, static_cast<uint64_t>(e.maps));
  }
}

[[gnu::always_inline]] inline void LiveTable::LoadEntry(size_t index, LiveEntry* out) const {
  const Slot& slot = slots_mem_[index];
  const uint64_t header = LoadWord(slot.header);
  out->cls = static_cast<LiveClass>(header & 0xff);
  out->api = static_cast<Api>((header >> 8) & 0xffff);
  out->kind = static_cast<MemoryKind>((header >> 24) & 0xff);
  const uint8_t flags = static_cast<uint8_t>((header >> 32) & 0xff);
  out->flags = static_cast<uint8_t>(flags & ~kColdFlag);
  out->device = DeviceOf(header);
  out->address = LoadWord(slot.address);
  out->size = LoadWord(slot.size);
  out->seq = LoadWord(slot.seq);
  out->stream = LoadWord(slot.stream);
  out->stack_id = LoadWord(slot.stack_id);
  if ((flags & kColdFlag) != 0) {
    const Cold& c = cold_[index];
    out->pool = LoadWord(c.pool);
    out->handle = LoadWord(c.handle);
    out->offset = LoadWord(c.offset);
    out->refs = static_cast<int64_t>(LoadWord(c.refs));
    out->maps = static_cast<int64_t>(LoadWord(c.maps));
  } else {
    out->pool = out->handle = out->offset = 0;
    out->refs = out->maps = 0;
  }
}

template <typename Fn>
bool LiveTable::Update(LiveClass cls, uint64_t key, Fn&& fn) {
  const void* const outer = t_live_slot_held;
  uint64_t state;
  Slot* slot = ClaimLive(cls, key, &state);
  if (slot == nullptr) {
    t_live_slot_held = outer;
    return false;
  }
  const size_t index = static_cast<size_t>(slot - slots_mem_);
  LiveEntry entry;
  LoadEntry(index, &entry);
  bool result = fn(entry);
  StoreEntry(index, entry);
  slot->state.store(Next(state, kLive), std::memory_order_release);
  t_live_slot_held = outer;
  return result;
}

template <typename Fn>
size_t LiveTable::ResolveDeferred(Fn&& resolve) {
  size_t resolved = 0;
  for (size_t i = 0; i < slots_; ++i) {
    Slot& slot = slots_mem_[i];
    // Bounded: an entry that keeps changing is being released or replaced, and what replaces
    // it was inserted after the wake, with its fields read at once.
    for (int attempt = 0; attempt < 1024; ++attempt) {
      Backoff(attempt);
      uint64_t before = slot.state.load(std::memory_order_acquire);
      const uint64_t kind = before & 3;
      if (kind == kBusy) continue;
      if (kind != kLive) break;
      LiveEntry entry;
      LoadEntry(i, &entry);
      if (!HasDeferredFields(entry)) break;  // a torn copy fails the compare-and-swap below
      resolve(entry);
      if (!slot.state.compare_exchange_strong(before, Next(before, kBusy),
                                              std::memory_order_acquire)) {
        continue;  // changed while the driver was asked: look again
      }
      StoreResolved(i, entry.device, entry.pool);
      slot.state.store(Next(Next(before, kBusy), kLive), std::memory_order_release);
      ++resolved;
      break;
    }
  }
  return resolved;
}

template <typename Fn>
size_t LiveTable::ForEachAt(const std::atomic<uint64_t>& seq_source, uint64_t* snapshot_seq,
                            Fn&& fn) {
  // seq_cst on both sides (see NextSeq): an insert that saw no scan announced and reused a
  // tombstone did so after that tombstone's removal seq, which is then <= S.
  // The floor first: an insert that sees the scan before its seq is published reuses only
  // tombstones removed at or below it, and S is at least the floor.
  scan_floor_.store(seq_source.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
  scans_.fetch_add(1, std::memory_order_seq_cst);
  const uint64_t at = seq_source.load(std::memory_order_seq_cst);
  scan_at_.store(at, std::memory_order_seq_cst);  // tombstones removed by then stay reusable
  *snapshot_seq = at;
  size_t passed = 0;
  for (size_t i = 0; i < slots_; ++i) {
    LiveEntry copy;
    if (LiveAt(slots_mem_[i], at, &copy)) {
      fn(static_cast<const LiveEntry&>(copy));
      ++passed;
    }
  }
  scan_at_.store(0, std::memory_order_seq_cst);
  scans_.fetch_sub(1, std::memory_order_seq_cst);
  return passed;
}

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_LIVE_TABLE_H_
