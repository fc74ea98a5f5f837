#include "recording/source_stack_table.h"

#include <sys/mman.h>

#include <cstring>

#include "fragscope/wire_constants.h"
#include "shipping/wire_encoder.h"

namespace fragscope::agent {
namespace {

constexpr size_t kIndexBytes = SourceStackTable::kIndexSlots * sizeof(uint32_t);

uint64_t HashBytes(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

size_t TextSize(const char* text) {
  return text != nullptr ? strnlen(text, SourceStackTable::kMaxTextBytes) : 0;
}

}  // namespace

bool SourceStackTable::Map() {
  if (arena_ != nullptr) return true;
  if (map_failed_) return false;
  void* mem = mmap(nullptr, kArenaBytes + 2 * kIndexBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    map_failed_ = true;
    return false;
  }
  arena_ = static_cast<uint8_t*>(mem);
  index_ = reinterpret_cast<uint32_t*>(arena_ + kArenaBytes);
  order_ = index_ + kIndexSlots;
  return true;
}

uint64_t SourceStackTable::Intern(const SourceFrameText* frames, size_t count) {
  if (frames == nullptr || count == 0) return 0;
  if (count > kMaxFrames) count = kMaxFrames;
  uint64_t id = 0;
  pthread_mutex_lock(&lock_);
  // Encoded in place after the last entry; kept only if the stack is new.
  const size_t at = used_;
  if (Map() && count_ < kIndexSlots / 4 * 3 && kArenaBytes - at > sizeof(Entry)) {
    uint8_t* payload = arena_ + at + sizeof(Entry);
    WireWriter w(payload, kArenaBytes - at - sizeof(Entry));
    for (size_t i = 0; i < count; ++i) {
      using S = wire::SourceFrame;
      const size_t frame = w.BeginMessage(wire::SymbolizedStack::kFrames);
      w.Bytes(S::kFunction, frames[i].function, TextSize(frames[i].function));
      w.Bytes(S::kFile, frames[i].file, TextSize(frames[i].file));
      w.Uint64(S::kLine, frames[i].line);
      w.EndMessage(frame);
    }
    if (w.ok()) {
      const uint64_t hash = HashBytes(payload, w.size());
      size_t slot = hash & (kIndexSlots - 1);
      for (;; slot = (slot + 1) & (kIndexSlots - 1)) {
        const uint32_t n = index_[slot];
        if (n == 0) break;
        const Entry* e = EntryAt(order_[n - 1]);
        if (e->hash == hash && e->size == w.size() && memcmp(Payload(e), payload, w.size()) == 0) {
          id = kIdBase + (n - 1);
          break;
        }
      }
      if (id == 0) {
        Entry* e = EntryAt(static_cast<uint32_t>(at));
        e->hash = hash;
        e->size = static_cast<uint32_t>(w.size());
        e->sent = 0;
        order_[count_] = static_cast<uint32_t>(at);
        index_[slot] = static_cast<uint32_t>(count_ + 1);
        id = kIdBase + count_;
        ++count_;
        used_ = (at + sizeof(Entry) + w.size() + 7) & ~size_t{7};
      }
    }
  }
  pthread_mutex_unlock(&lock_);
  if (id == 0) refused_.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void SourceStackTable::ResetSent() {
  pthread_mutex_lock(&lock_);
  for (size_t n = 0; n < count_; ++n) EntryAt(order_[n])->sent = 0;
  pthread_mutex_unlock(&lock_);
}

void SourceStackTable::ResetAfterFork() {
  pthread_mutex_init(&lock_, nullptr);
  for (size_t n = 0; n < count_; ++n) EntryAt(order_[n])->sent = 0;
}

}  // namespace fragscope::agent
