// Bounded lock-free multi-producer single-consumer ring of fixed-size records (Vyukov's bounded
// queue): each slot carries a sequence word that says whether it is free for the producer of lap
// N or full for the consumer. Producers never wait: when the ring is full the push fails and the
// caller counts a drop. Slots are cache-line aligned so two producers never share a line.
//
// Thread safety: TryPush from any number of threads at once; TryPop from one consumer at a
// time; Reset only when nobody else uses the ring. Memory comes from mmap (no heap), sized at
// Init and released by the destructor. A slot stores its sequence minus its index, so fresh
// zero pages are an empty ring: Init touches no memory, an idle ring costs no resident pages.
#ifndef FRAGSCOPE_INTERPOSE_RING_BUFFER_H_
#define FRAGSCOPE_INTERPOSE_RING_BUFFER_H_

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "recording/agent_check.h"

namespace fragscope::agent {

template <typename T>
class MpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "records are copied bytewise");

 public:
  struct alignas(64) Slot {
    std::atomic<uint64_t> sequence;  // lap sequence minus the slot's index
    T value;
  };

  MpscRing() = default;
  MpscRing(const MpscRing&) = delete;
  MpscRing& operator=(const MpscRing&) = delete;
  ~MpscRing() {
    if (slots_ != nullptr) munmap(slots_, capacity_ * sizeof(Slot));
  }

  // Allocates the largest power-of-two number of slots (at least 2) that fits in `bytes`.
  // Returns false when memory cannot be mapped. Not thread-safe; call once before use.
  bool Init(size_t bytes) {
    size_t slots = 2;
    while (slots * 2 * sizeof(Slot) <= bytes) slots *= 2;
    void* mem = mmap(nullptr, slots * sizeof(Slot), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return false;
    slots_ = static_cast<Slot*>(mem);
    capacity_ = slots;
    mask_ = slots - 1;
    return true;
  }

  // Empties the ring. Only when no producer or consumer runs (init, or the child after fork).
  void Reset() {
    void* mem = mmap(slots_, capacity_ * sizeof(Slot), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (mem == MAP_FAILED) {
      for (size_t i = 0; i < capacity_; ++i) slots_[i].sequence.store(0, std::memory_order_relaxed);
    }
    enqueue_.store(0, std::memory_order_relaxed);
    dequeue_.store(0, std::memory_order_release);
  }

  // Copies `value` in. False when full (the caller counts the drop). On success `*position`
  // (optional) is the record's position, compared with consumed() to wait for a flush.
  bool TryPush(const T& value, uint64_t* position = nullptr) {
    FRAGSCOPE_DCHECK(slots_ != nullptr);  // Init() first
    uint64_t pos = enqueue_.load(std::memory_order_relaxed);
    for (;;) {
      Slot& slot = slots_[pos & mask_];
      uint64_t seq = slot.sequence.load(std::memory_order_acquire) + (pos & mask_);
      int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
      if (diff == 0) {
        if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          slot.value = value;
          slot.sequence.store(pos + 1 - (pos & mask_), std::memory_order_release);
          if (position != nullptr) *position = pos;
          return true;
        }
      } else if (diff < 0) {
        return false;  // the consumer has not freed this slot yet: full
      } else {
        pos = enqueue_.load(std::memory_order_relaxed);
      }
    }
  }

  // Takes the oldest record. False when empty, or when the oldest slot is claimed by a producer
  // that has not finished writing it (try again later).
  bool TryPop(T* out) {
    FRAGSCOPE_DCHECK(slots_ != nullptr);  // Init() first
    uint64_t pos = dequeue_.load(std::memory_order_relaxed);
    Slot& slot = slots_[pos & mask_];
    uint64_t seq = slot.sequence.load(std::memory_order_acquire) + (pos & mask_);
    if (seq != pos + 1) return false;
    *out = slot.value;
    slot.sequence.store(pos + capacity_ - (pos & mask_), std::memory_order_release);
    dequeue_.store(pos + 1, std::memory_order_release);
    return true;
  }

  // Records popped so far (a position p has been popped when consumed() > p).
  uint64_t consumed() const { return dequeue_.load(std::memory_order_acquire); }
  // Approximate number of records waiting.
  uint64_t size_approx() const {
    return enqueue_.load(std::memory_order_relaxed) - dequeue_.load(std::memory_order_relaxed);
  }
  size_t capacity() const { return capacity_; }
  size_t bytes() const { return capacity_ * sizeof(Slot); }

 private:
  Slot* slots_ = nullptr;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  alignas(64) std::atomic<uint64_t> enqueue_{0};
  alignas(64) std::atomic<uint64_t> dequeue_{0};
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_RING_BUFFER_H_
