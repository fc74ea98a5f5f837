#include "va_allocator.h"

#include <iterator>

namespace fakecuda {

void FirstFitRanges::Reset(uint64_t base, uint64_t size) {
  base_ = base;
  size_ = size;
  free_bytes_ = size;
  free_.clear();
  if (size > 0) free_[base] = size;
}

uint64_t FirstFitRanges::Allocate(uint64_t size, uint64_t alignment) {
  if (size == 0) return 0;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    uint64_t start = it->first;
    uint64_t end = start + it->second;
    uint64_t aligned = (start + alignment - 1) & ~(alignment - 1);
    if (aligned < start || aligned > end || end - aligned < size) continue;
    if (AllocateAt(aligned, size)) return aligned;
  }
  return 0;
}

bool FirstFitRanges::AllocateAt(uint64_t address, uint64_t size) {
  if (size == 0) return false;
  auto it = free_.upper_bound(address);
  if (it == free_.begin()) return false;
  --it;
  uint64_t start = it->first;
  uint64_t end = start + it->second;
  if (address < start || address + size > end || address + size < address) return false;
  free_.erase(it);
  if (address > start) free_[start] = address - start;
  if (address + size < end) free_[address + size] = end - (address + size);
  free_bytes_ -= size;
  return true;
}

void FirstFitRanges::Free(uint64_t address, uint64_t size) {
  if (size == 0) return;
  uint64_t start = address;
  uint64_t length = size;
  auto next = free_.lower_bound(address);
  if (next != free_.end() && next->first == start + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = length;
  free_bytes_ += size;
}

}  // namespace fakecuda
