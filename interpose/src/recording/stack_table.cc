#include "recording/stack_table.h"

#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include <cstring>

#include "recording/stack_hash.h"

namespace fragscope::agent {

uint64_t HashStack(const uint64_t* pcs, int count) {
  using namespace stack_hash;
  uint64_t lane[4] = {kSeed[0], kSeed[1], kSeed[2], kSeed[3]};
  int i = 0;
  for (; i + 4 <= count; i += 4) {
    lane[0] = Step(lane[0], pcs[i]);
    lane[1] = Step(lane[1], pcs[i + 1]);
    lane[2] = Step(lane[2], pcs[i + 2]);
    lane[3] = Step(lane[3], pcs[i + 3]);
  }
  for (int l = 0; i < count; ++i, ++l) lane[l] = Step(lane[l], pcs[i]);
  return Finish(lane[0], lane[1], lane[2], lane[3], count);
}

StackTable::~StackTable() {
  if (memory_ != nullptr) munmap(memory_, slots_ * slot_bytes_);
}

bool StackTable::Init(size_t slots, int max_depth) {
  if (max_depth < 1) max_depth = 1;
  if (max_depth > kMaxDepth) max_depth = kMaxDepth;
  size_t n = 64;
  while (n < slots) n *= 2;
  slot_bytes_ =
      (offsetof(Slot, pcs) + sizeof(uint64_t) * static_cast<size_t>(max_depth) + 15) & ~size_t{15};
  void* mem = mmap(nullptr, n * slot_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  memory_ = mem;  // anonymous memory is zero: every slot empty
  slots_ = n;
  max_depth_ = max_depth;
  return true;
}

uint64_t StackTable::Intern(const uint64_t* pcs, int count, uint32_t* slot, StackEnd end) {
  if (count <= 0 || memory_ == nullptr) return 0;
  if (count > max_depth_) {
    count = max_depth_;
    end = StackEnd::kDepthLimit;
  }
  return InternHashed(pcs, count, HashStack(pcs, count), end, slot);
}

uint64_t StackTable::Intern(const uint64_t* pcs, int count, uint64_t hash, uint32_t* slot,
                            StackEnd end) {
  if (count <= 0 || memory_ == nullptr) return 0;
  // The hash covers frames the slot won't hold: hash the ones it will.
  if (count > max_depth_) return Intern(pcs, count, slot, end);
  return InternHashed(pcs, count, hash, end, slot);
}

uint64_t StackTable::InternHashed(const uint64_t* pcs, int count, uint64_t id, StackEnd end,
                                  uint32_t* slot) {
  // `id` (what the slot holds) is HashStack(pcs, count); never 0.
  size_t mask = slots_ - 1;
  for (int probe = 0; probe < kMaxProbe; ++probe) {
    size_t i = (id + static_cast<uint64_t>(probe)) & mask;
    Slot* s = SlotAt(i);
    uint64_t current = s->id.load(std::memory_order_acquire);
    if (current == 0) {
      if (s->id.compare_exchange_strong(current, id, std::memory_order_acq_rel)) {
        memcpy(s->pcs, pcs, sizeof(uint64_t) * static_cast<size_t>(count));
        s->count = static_cast<uint16_t>(count);
        s->end = end;
        s->ready.store(1, std::memory_order_release);
        *slot = static_cast<uint32_t>(i);
        return IdOfSlot(i);
      }
      // Lost the race: `current` now holds the winner's hash.
    }
    if (current == id) {
      *slot = static_cast<uint32_t>(i);
      return IdOfSlot(i);
    }
  }
  overflows_.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

int StackTable::Frames(uint32_t slot, uint64_t id, uint64_t* pcs, StackEnd* end) const {
  if (slot >= slots_ || id != IdOfSlot(slot)) return -1;
  const Slot* s = SlotAt(slot);
  if (s->id.load(std::memory_order_acquire) == 0) return -1;  // nothing interned there
  // The inserting thread writes a few hundred bytes between claiming the slot and setting
  // `ready`; wait for it, but never forever (it may have been frozen by a debugger or killed);
  // it may also have been preempted on a loaded machine: up to about two seconds.
  for (int spin = 0; s->ready.load(std::memory_order_acquire) == 0; ++spin) {
    if (spin > 20100) return -1;
    if (spin < 100) {
      sched_yield();
    } else {
      timespec ts{0, 100000};
      nanosleep(&ts, nullptr);
    }
  }
  memcpy(pcs, s->pcs, sizeof(uint64_t) * s->count);
  if (end != nullptr) *end = s->end;
  return s->count;
}

void StackTable::ResetSent() {
  for (size_t i = 0; i < slots_; ++i) SlotAt(i)->sent = 0;
}

void StackTable::ResetAfterFork() {
  for (size_t i = 0; i < slots_; ++i) {
    Slot* s = SlotAt(i);
    if (s->id.load(std::memory_order_relaxed) != 0 &&
        s->ready.load(std::memory_order_relaxed) == 0) {
      s->id.store(0, std::memory_order_relaxed);
    }
    s->sent = 0;
  }
}

}  // namespace fragscope::agent
