// First-fit allocator of address ranges inside one fixed window. Hands out numbers only; it
// never touches memory. Not thread-safe: the driver calls it under its state lock.
#pragma once

#include <cstdint>
#include <map>

namespace fakecuda {

class FirstFitRanges {
 public:
  FirstFitRanges() = default;
  FirstFitRanges(uint64_t base, uint64_t size) { Reset(base, size); }

  // Forgets every allocation: the whole window [base, base + size) is free again.
  void Reset(uint64_t base, uint64_t size);

  // Lowest free address aligned to `alignment` (a power of two) with `size` bytes free after
  // it, or 0 when none. `size` must be > 0.
  uint64_t Allocate(uint64_t size, uint64_t alignment);

  // Takes exactly [address, address + size) if it is entirely free; false otherwise.
  bool AllocateAt(uint64_t address, uint64_t size);

  // Returns a range obtained from Allocate/AllocateAt; neighbours are merged.
  void Free(uint64_t address, uint64_t size);

  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t free_bytes() const { return free_bytes_; }
  bool Contains(uint64_t address) const { return address >= base_ && address - base_ < size_; }

 private:
  uint64_t base_ = 0;
  uint64_t size_ = 0;
  uint64_t free_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;  // start -> length
};

}  // namespace fakecuda
