// Interning of call stacks: a fixed-size open-addressing table keyed by a 64-bit hash of the
// return addresses, so each distinct stack is shipped once per stream. Hooks insert without
// locks or allocation; the drain thread reads frames back and remembers what it has sent.
//
// Thread safety: Intern from any thread concurrently; Frames/MarkSent/IsSent/ResetSent from the
// single drain thread; ResetAfterFork only in a single-threaded child. Memory: one mmap at Init.
#ifndef FRAGSCOPE_INTERPOSE_STACK_TABLE_H_
#define FRAGSCOPE_INTERPOSE_STACK_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "recording/api.h"

namespace fragscope::agent {

// A 64-bit hash of the pcs in order (the stack's id); never 0 (0 means "no stack").
uint64_t HashStack(const uint64_t* pcs, int count);

class StackTable {
 public:
  static constexpr int kMaxDepth = 64;
  // How far Intern probes before giving up (the stack is then reported as "no stack").
  static constexpr int kMaxProbe = 64;

  StackTable() = default;
  StackTable(const StackTable&) = delete;
  StackTable& operator=(const StackTable&) = delete;
  ~StackTable();

  // `slots` is rounded up to a power of two; `max_depth` in 1..kMaxDepth.
  bool Init(size_t slots, int max_depth);

  // Returns the stack's id and sets *slot to where its frames live; returns 0 when `count` is
  // 0 or the table is too full. `count` is clamped to max_depth. The id is the slot + 1: unique
  // for the table's life (slots are never reused, a fork's child starts a stream of its own)
  // and small, so it is a varint of 1 to 4 bytes in every event; the 64-bit hash (a 10-byte
  // varint half the time) stays in the table, where lookups compare it. `end` says how the
  // capture ended; the first insert of a stack keeps its own (frames clamped to max_depth
  // become kDepthLimit).
  uint64_t Intern(const uint64_t* pcs, int count, uint32_t* slot,
                  StackEnd end = StackEnd::kUnspecified);
  // The same, for frames whose HashStack(pcs, count) the caller already has (CaptureStack
  // computes it during the walk).
  uint64_t Intern(const uint64_t* pcs, int count, uint64_t hash, uint32_t* slot,
                  StackEnd end = StackEnd::kUnspecified);
  // The slot whose frames an id names (ids from Intern only).
  static uint32_t SlotOfId(uint64_t id) { return static_cast<uint32_t>(id - 1); }

  // Copies the frames of `id` stored at `slot` into pcs (max_depth entries). Waits (bounded,
  // ~100 ms) for a producer still writing them. Returns the frame count, or -1 if `slot` does
  // not hold `id`. Sets *end (if given) to how the capture ended.
  int Frames(uint32_t slot, uint64_t id, uint64_t* pcs, StackEnd* end = nullptr) const;

  bool IsSent(uint32_t slot) const { return SlotAt(slot)->sent != 0; }
  void MarkSent(uint32_t slot) { SlotAt(slot)->sent = 1; }
  // Makes every stack unsent (a new stream starts).
  void ResetSent();
  // In a forked child: slots a parent thread was writing are emptied; all become unsent.
  void ResetAfterFork();

  size_t slots() const { return slots_; }
  int max_depth() const { return max_depth_; }
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::atomic<uint64_t> id;     // the frames' HashStack; 0 = empty
    std::atomic<uint32_t> ready;  // frames fully written
    uint16_t count;
    uint8_t sent;  // drain thread only
    StackEnd end;
    uint64_t pcs[1];  // max_depth_ entries follow
  };
  uint64_t InternHashed(const uint64_t* pcs, int count, uint64_t hash, StackEnd end,
                        uint32_t* slot);
  static uint64_t IdOfSlot(size_t i) { return static_cast<uint64_t>(i) + 1; }
  Slot* SlotAt(size_t i) const {
    return reinterpret_cast<Slot*>(reinterpret_cast<char*>(memory_) + i * slot_bytes_);
  }

  void* memory_ = nullptr;
  size_t slots_ = 0;
  size_t slot_bytes_ = 0;
  int max_depth_ = 0;
  std::atomic<uint64_t> overflows_{0};
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_STACK_TABLE_H_
