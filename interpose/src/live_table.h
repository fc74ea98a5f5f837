// The agent's compact table of what is live right now: allocations, VMM reservations, physical
// handles, mappings and sub-allocator blocks. Hooks update it around the real call (insert after
// an acquire returns, erase before a release runs), so a Snapshot built from it is exact at the
// sequence number read before the scan (see Snapshot in fragscope.proto and agent.cc).
//
// Lock-free open addressing: each slot has a state word (empty / busy / live / tombstone, with a
// generation in the high bits). Writers claim a slot with a compare-and-swap; the scanner reads
// a live slot's fields and accepts them only if the state word did not change meanwhile.
//
// Thread safety: Insert/Erase/Find/Update from any thread; ForEach from one thread; Clear only
// when no other thread touches the table (init, child after fork). Memory: one mmap at Init.
#ifndef FRAGSCOPE_INTERPOSE_LIVE_TABLE_H_
#define FRAGSCOPE_INTERPOSE_LIVE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "api.h"

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
  int32_t device;    // -1 unknown
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

enum LiveFlags : uint8_t {
  kLiveImported = 1 << 0,
  kLivePendingFree = 1 << 1,
};

inline constexpr uint64_t kSeqPending = ~uint64_t{0};

class LiveTable {
 public:
  // Probe limit: a table this full is treated as full (counted in overflows()).
  static constexpr int kMaxProbe = 128;

  LiveTable() = default;
  LiveTable(const LiveTable&) = delete;
  LiveTable& operator=(const LiveTable&) = delete;
  ~LiveTable();

  bool Init(size_t slots);  // rounded up to a power of two

  // Inserts or replaces (cls, entry.address). False when the table is full. `*index`
  // (optional) names the slot for SetSeq.
  bool Insert(const LiveEntry& entry, size_t* index = nullptr);
  // Stamps the seq of the entry Insert put at `index` (its key cannot have been erased since:
  // the program does not have the address yet).
  void SetSeq(size_t index, uint64_t seq) {
    __atomic_store_n(&slots_mem_[index].entry.seq, seq, __ATOMIC_RELEASE);
  }
  // Removes (cls, key) and copies it to *out (optional). False if absent.
  bool Erase(LiveClass cls, uint64_t key, LiveEntry* out);
  // Copies (cls, key) to *out. False if absent.
  bool Find(LiveClass cls, uint64_t key, LiveEntry* out) const;
  // Applies `fn(LiveEntry&)` to (cls, key) under the slot's claim and returns fn's result
  // (false also when absent). fn must be short and must not touch the table.
  template <typename Fn>
  bool Update(LiveClass cls, uint64_t key, Fn&& fn);

  // Calls fn(const LiveEntry&) for every live entry with seq <= max_seq; entries still being
  // stamped are waited for (bounded). Returns the number of entries passed to fn.
  template <typename Fn>
  size_t ForEach(uint64_t max_seq, Fn&& fn) const;

  void Clear();
  size_t live() const { return live_.load(std::memory_order_relaxed); }
  size_t slots() const { return slots_; }
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }

 private:
  // state word: low 2 bits kind, the rest a generation bumped on every transition.
  enum : uint64_t { kEmpty = 0, kBusy = 1, kLive = 2, kTombstone = 3 };
  struct alignas(64) Slot {
    std::atomic<uint64_t> state;
    LiveEntry entry;  // read by ForEach only between two equal loads of `state`
  };
  static uint64_t Hash(LiveClass cls, uint64_t key);
  // Word-by-word relaxed atomic copy: the scanner may read an entry a writer is changing; the
  // state word check discards such a torn copy.
  static void CopyEntry(LiveEntry* dst, const LiveEntry* src);
  static void YieldBriefly();
  static uint64_t Next(uint64_t state, uint64_t kind) { return ((state | 3) + 1) | kind; }
  // Claims the live slot holding (cls, key): state becomes busy. Returns it or nullptr.
  Slot* ClaimLive(LiveClass cls, uint64_t key, uint64_t* claimed_state) const;

  Slot* slots_mem_ = nullptr;
  size_t slots_ = 0;
  std::atomic<size_t> live_{0};
  mutable std::atomic<uint64_t> overflows_{0};
};

template <typename Fn>
bool LiveTable::Update(LiveClass cls, uint64_t key, Fn&& fn) {
  uint64_t state;
  Slot* slot = ClaimLive(cls, key, &state);
  if (slot == nullptr) return false;
  bool result = fn(slot->entry);
  slot->state.store(Next(state, kLive), std::memory_order_release);
  return result;
}

template <typename Fn>
size_t LiveTable::ForEach(uint64_t max_seq, Fn&& fn) const {
  size_t passed = 0;
  for (size_t i = 0; i < slots_; ++i) {
    const Slot& slot = slots_mem_[i];
    for (int attempt = 0; attempt < 1000; ++attempt) {
      uint64_t before = slot.state.load(std::memory_order_acquire);
      if ((before & 3) == kEmpty || (before & 3) == kTombstone) break;
      if ((before & 3) == kBusy) {  // a writer holds it for a few instructions
        if (attempt > 50) YieldBriefly();
        continue;
      }
      LiveEntry copy;
      CopyEntry(&copy, &slot.entry);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slot.state.load(std::memory_order_relaxed) != before) continue;
      if (copy.seq == kSeqPending) {  // inserted, seq not stamped yet: wait for it
        if (attempt > 50) YieldBriefly();
        continue;
      }
      if (copy.seq <= max_seq) {
        fn(static_cast<const LiveEntry&>(copy));
        ++passed;
      }
      break;
    }
  }
  return passed;
}

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_LIVE_TABLE_H_
