// A small caching allocator in the style of PyTorch's, for the demo and end-to-end tests.
//
// Segments come from cudaMalloc and are never merged with each other; a request is served
// best-fit from free blocks of the same stream, splitting the block when the rest is worth
// keeping. Freed blocks merge only with free neighbours inside their own segment. When
// cudaMalloc fails, segments that are entirely free are returned to the driver and the
// allocation retried once; if it still fails, the OOM is reported to fragscope
// (fragscope_annotate_alloc_failed) and the request fails. Every block is reported through
// fragscope/annotate.h, so the collector sees inside the segments.
//
// Not thread-safe (the demo is single-threaded). Sizes in bytes.
#ifndef FRAGSCOPE_TESTS_DEMO_CACHING_ALLOCATOR_H_
#define FRAGSCOPE_TESTS_DEMO_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace demo {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator();

  // Returns nullptr on OOM; last_error() then holds a PyTorch-style message.
  void* Allocate(std::size_t size);
  void Free(void* ptr);
  // Returns every entirely free segment to the driver (torch.cuda.empty_cache()).
  void EmptyCache();

  std::size_t reserved_bytes() const { return reserved_; }
  std::size_t allocated_bytes() const { return allocated_; }
  const std::string& last_error() const { return last_error_; }

 private:
  struct Block {
    uintptr_t segment;  // base address of the segment holding the block
    std::size_t size;
    bool free;
  };
  static std::size_t RoundSize(std::size_t size);
  static std::size_t SegmentSizeFor(std::size_t size);
  bool GrowCache(std::size_t segment_size);
  void Split(uintptr_t addr, std::size_t size);

  int device_;
  std::map<uintptr_t, Block> blocks_;                     // every block, by address
  std::set<std::pair<std::size_t, uintptr_t>> free_set_;  // (size, address) for best fit
  std::map<uintptr_t, std::size_t> segments_;             // base -> size
  std::size_t reserved_ = 0;
  std::size_t allocated_ = 0;
  std::string last_error_;
};

}  // namespace demo

#endif  // FRAGSCOPE_TESTS_DEMO_CACHING_ALLOCATOR_H_
