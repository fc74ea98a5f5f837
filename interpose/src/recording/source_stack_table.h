// Interning of source-level stacks: frames a sub-allocator's adapter knows as text (function,
// file, line), such as the Python frames PyTorch records for a tensor, which no return address
// in the agent's own stack walk names. Each distinct stack gets an id once and is shipped as a
// SymbolizedStack frame once per stream, before the first frame that names it.
//
// Ids are kIdBase + n: above every id the pc StackTable hands out (its slot + 1, below 2^32),
// so both share Stack.id's space as fragscope.proto says, and a reader needs no flag to tell
// them apart.
//
// Thread safety: everything takes one mutex. Intern is for adapters' site updates, which run
// outside any hook and may wait; the drain thread holds it while it writes a stack out (which
// may flush its buffer). Hooks never take it. ResetAfterFork remakes it in a child.
// Memory: one anonymous mapping of kArenaBytes reserved (MAP_NORESERVE) at the first Intern,
// touched as stacks arrive; past it Intern answers 0 and counts the refusal.
#ifndef FRAGSCOPE_INTERPOSE_SOURCE_STACK_TABLE_H_
#define FRAGSCOPE_INTERPOSE_SOURCE_STACK_TABLE_H_

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fragscope::agent {

// One frame as an adapter passes it (annotate.h's fragscope_source_frame).
struct SourceFrameText {
  const char* function;  // may be null
  const char* file;      // may be null
  uint32_t line;         // 0: unknown
};

class SourceStackTable {
 public:
  static constexpr uint64_t kIdBase = uint64_t{1} << 40;
  static constexpr size_t kMaxFrames = 128;
  // Longer text is cut (at a byte boundary: fragscope.proto keeps such text as bytes).
  static constexpr size_t kMaxTextBytes = 512;
  static constexpr size_t kArenaBytes = size_t{32} << 20;
  static constexpr size_t kIndexSlots = size_t{1} << 16;  // distinct stacks at most

  static bool IsSourceId(uint64_t id) { return id >= kIdBase; }

  constexpr SourceStackTable() = default;
  SourceStackTable(const SourceStackTable&) = delete;
  SourceStackTable& operator=(const SourceStackTable&) = delete;

  // The id of the stack of `count` frames (innermost first; cut at kMaxFrames), interning it
  // on first sight. 0 when `count` is 0 or the table is full.
  uint64_t Intern(const SourceFrameText* frames, size_t count);

  // For the drain thread: when `id` was not sent in this stream, calls
  // write(id, frames_wire, size) with the stack's frames already encoded as the repeated
  // SymbolizedStack.frames field, and marks it sent if write returns true. Returns false when
  // `id` is not a stack of this table.
  template <typename Write>
  bool SendIfUnsent(uint64_t id, Write&& write) {
    pthread_mutex_lock(&lock_);
    Entry* e = Find(id);
    bool known = e != nullptr;
    if (known && !e->sent && write(id, Payload(e), e->size)) e->sent = 1;
    pthread_mutex_unlock(&lock_);
    return known;
  }
  // Makes every stack unsent (a new stream or flight segment starts).
  void ResetSent();
  // SendIfUnsent for every stack of the table, in id order (a woken stream's head: its
  // snapshot may name stacks that dormant site updates set).
  template <typename Write>
  void SendAllUnsent(Write&& write) {
    pthread_mutex_lock(&lock_);
    for (size_t n = 0; n < count_; ++n) {
      Entry* e = EntryAt(order_[n]);
      if (!e->sent && write(kIdBase + n, Payload(e), e->size)) e->sent = 1;
    }
    pthread_mutex_unlock(&lock_);
  }
  // In a forked child: the mutex may have been held by a thread the child does not have.
  void ResetAfterFork();

  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  size_t count() const { return count_; }

 private:
  struct Entry {
    uint64_t hash;
    uint32_t size;  // payload bytes that follow the entry
    uint8_t sent;
    uint8_t pad[3];
  };
  bool Map();
  Entry* EntryAt(uint32_t offset) const { return reinterpret_cast<Entry*>(arena_ + offset); }
  static const uint8_t* Payload(const Entry* e) { return reinterpret_cast<const uint8_t*>(e + 1); }
  Entry* Find(uint64_t id) const {
    if (id < kIdBase || id - kIdBase >= count_) return nullptr;
    return EntryAt(order_[id - kIdBase]);
  }

  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  uint8_t* arena_ = nullptr;   // kArenaBytes; entries, each followed by its payload
  size_t used_ = 0;            // arena bytes in use
  uint32_t* index_ = nullptr;  // kIndexSlots: (entry number + 1) by hash, 0 = empty
  uint32_t* order_ = nullptr;  // kIndexSlots: arena offset of entry n (id kIdBase + n)
  size_t count_ = 0;
  bool map_failed_ = false;
  std::atomic<uint64_t> refused_{0};
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_SOURCE_STACK_TABLE_H_
