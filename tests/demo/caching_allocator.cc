#include "caching_allocator.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <iterator>

#include "fragscope/annotate.h"

namespace demo {

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kMinBlock = 512;
constexpr std::size_t kSmallSize = 1 * kMiB;  // requests up to this share 2 MiB segments
constexpr std::size_t kSmallSegment = 2 * kMiB;
constexpr std::size_t kMidSize = 10 * kMiB;  // requests up to this share 20 MiB segments
constexpr std::size_t kMidSegment = 20 * kMiB;

double GiB(std::size_t bytes) { return static_cast<double>(bytes) / (1u << 30); }
}  // namespace

CachingAllocator::~CachingAllocator() {
  for (auto& [base, size] : segments_) cudaFree(reinterpret_cast<void*>(base));
}

std::size_t CachingAllocator::RoundSize(std::size_t size) {
  if (size == 0) size = 1;
  return (size + kMinBlock - 1) / kMinBlock * kMinBlock;
}

std::size_t CachingAllocator::SegmentSizeFor(std::size_t size) {
  if (size <= kSmallSize) return kSmallSegment;
  if (size <= kMidSize) return kMidSegment;
  return (size + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
}

bool CachingAllocator::GrowCache(std::size_t segment_size) {
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, segment_size) != cudaSuccess) {
    cudaGetLastError();  // the caller handles it; keep the sticky state clean like PyTorch does
    return false;
  }
  auto base = reinterpret_cast<uintptr_t>(ptr);
  segments_[base] = segment_size;
  reserved_ += segment_size;
  blocks_[base] = Block{base, segment_size, true};
  free_set_.insert({segment_size, base});
  return true;
}

void CachingAllocator::Split(uintptr_t addr, std::size_t size) {
  Block& b = blocks_.at(addr);
  std::size_t rest = b.size - size;
  // Like PyTorch: a large block is split only when the remainder is big enough to be useful.
  bool worth = b.size <= kSmallSize ? rest >= kMinBlock : rest > kSmallSize;
  if (!worth) return;
  b.size = size;
  blocks_[addr + size] = Block{b.segment, rest, true};
  free_set_.insert({rest, addr + size});
}

void* CachingAllocator::Allocate(std::size_t request) {
  std::size_t size = RoundSize(request);
  auto it = free_set_.lower_bound({size, 0});
  if (it == free_set_.end()) {
    std::size_t seg = SegmentSizeFor(size);
    if (!GrowCache(seg)) {
      EmptyCache();  // return cached segments to the driver and retry once
      if (!GrowCache(seg)) {
        fragscope_annotate_alloc_failed(request, device_, nullptr);
        std::size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        char msg[512];
        std::snprintf(msg, sizeof(msg),
                      "CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total "
                      "capacity of %.2f GiB of which %.2f GiB is free. Of the allocated memory "
                      "%.2f GiB is allocated by the demo allocator, and %.2f GiB is reserved but "
                      "unallocated.",
                      GiB(request), device_, GiB(total_b), GiB(free_b), GiB(allocated_),
                      GiB(reserved_ - allocated_));
        last_error_ = msg;
        return nullptr;
      }
    }
    it = free_set_.lower_bound({size, 0});
  }
  uintptr_t addr = it->second;
  free_set_.erase(it);
  Split(addr, size);
  Block& b = blocks_.at(addr);
  b.free = false;
  allocated_ += b.size;
  fragscope_annotate_block_alloc(reinterpret_cast<void*>(addr), b.size, device_, nullptr, 0);
  return reinterpret_cast<void*>(addr);
}

void CachingAllocator::Free(void* ptr) {
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.find(addr);
  if (it == blocks_.end() || it->second.free) return;
  fragscope_annotate_block_free(ptr, device_, nullptr);
  allocated_ -= it->second.size;
  it->second.free = true;
  // Merge with free neighbours inside the same segment only.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
    free_set_.erase({next->second.size, next->first});
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      free_set_.erase({prev->second.size, prev->first});
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  free_set_.insert({it->second.size, it->first});
}

void CachingAllocator::EmptyCache() {
  for (auto seg = segments_.begin(); seg != segments_.end();) {
    auto b = blocks_.find(seg->first);
    if (b != blocks_.end() && b->second.free && b->second.size == seg->second) {
      free_set_.erase({b->second.size, b->first});
      blocks_.erase(b);
      cudaFree(reinterpret_cast<void*>(seg->first));
      reserved_ -= seg->second;
      seg = segments_.erase(seg);
    } else {
      ++seg;
    }
  }
}

}  // namespace demo
