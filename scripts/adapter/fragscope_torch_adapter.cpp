// fragscope's PyTorch adapter, C++ half: forwards the CUDA caching allocator's block events to
// the agent's annotate API (interpose/include/fragscope/annotate.h), so the collector sees
// PyTorch's blocks inside its segments instead of opaque segments.
//
// Built at run time by sitecustomize.py with torch.utils.cpp_extension.load against the installed
// torch (the allocator's C++ API has no stable ABI), cached per torch version.
//
// The tracker runs under the allocator's lock, on whatever thread allocates, and with or without
// the GIL: it updates its mirror of the allocator's blocks (below) and calls the annotate
// functions (lock-free, allocation-free in the agent), never Python. The annotate functions are
// weak: without libfragscope.so preloaded they are null and the tracker only keeps its mirror.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/extension.h>
#if __has_include(<c10/core/AllocatorConfig.h>)
#include <c10/core/AllocatorConfig.h>
#else
#include <c10/cuda/CUDAAllocatorConfig.h>
#endif

#include <atomic>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <string>

#include "fragscope/annotate.h"

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

std::atomic<bool> g_installed{false};

// Block sizes. The allocator's ALLOC entry carries the size the program asked for (orig_size),
// while its block, and torch.cuda.memory_allocated(), use the block's size: the request rounded
// (CUDACachingAllocator.cpp round_size: at least 512 bytes, a multiple of 512, or the next
// power-of-two division when PYTORCH_CUDA_ALLOC_CONF sets roundup_power2_divisions), or the
// whole free block when the allocator does not split it (should_split: in the small pool when
// less than 512 bytes would remain; in the large pool when 1 MiB or less would remain, or the
// request is at least max_split_size). Reporting the block's size keeps the rounding tail and
// unsplit remainders out of fragscope's free ranges, so allocated and cached match PyTorch's.
//
// To know what a free block holds, the tracker keeps a mirror of each device's segments and
// blocks from the same trace: SEGMENT_ALLOC adds a free segment, ALLOC takes the free block that
// starts at its address (and splits it as the allocator does), FREE_COMPLETED frees a block and
// merges it with free neighbours of the same segment, SEGMENT_FREE drops the segment. A block the
// mirror does not know (memory allocated before the tracker was attached, or expandable
// segments, which map memory with SEGMENT_MAP) is reported at its rounded size.
constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = size_t{1} << 20;

#if __has_include(<c10/core/AllocatorConfig.h>)  // torch >= 2.9
using Config = c10::CachingAllocator::AcceleratorAllocatorConfig;
#else
using Config = c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig;
#endif

size_t RoundSize(size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = Config::roundup_power2_divisions(size);
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    // roundup_power2_next_division, in C++17 (older torch builds extensions as C++17)
    if ((size & (size - 1)) == 0) return size;
    const size_t floor = size_t{1} << (63 - __builtin_clzll(size));
    const size_t division = floor >> (63 - __builtin_clzll(divisions));
    if (division == 0) return floor << 1;
    const size_t rounded_floor = size & ~(division - 1);
    return rounded_floor == size ? size : rounded_floor + division;
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

struct MirrorBlock {
  uintptr_t segment = 0;  // start of the segment holding the block
  size_t size = 0;
  bool allocated = false;
};

// One device's segments and blocks, by address. Touched only from the tracker, which runs
// under that device's allocator lock, so it needs no lock of its own.
class DeviceMirror {
 public:
  void AddSegment(uintptr_t address, size_t size) {
    DropRange(address, size);  // a stale entry from before a missed event
    blocks_[address] = {address, size, false};
  }

  void DropSegment(uintptr_t address, size_t size) { DropRange(address, size); }

  // The size of the block the allocator hands out at `address` for a request of `rounded`
  // bytes; 0 when the mirror does not know a free block there.
  size_t Allocate(uintptr_t address, size_t rounded) {
    auto it = blocks_.find(address);
    if (it == blocks_.end() || it->second.allocated || it->second.size < rounded) return 0;
    MirrorBlock& block = it->second;
    const size_t remaining = block.size - rounded;
    const bool split = rounded <= kSmallSize
                           ? remaining >= kMinBlockSize
                           : rounded < Config::max_split_size() && remaining > kSmallSize;
    if (split) {
      blocks_[address + rounded] = {block.segment, remaining, false};
      block.size = rounded;
    }
    block.allocated = true;
    return block.size;
  }

  void Free(uintptr_t address) {
    auto it = blocks_.find(address);
    if (it == blocks_.end() || !it->second.allocated) return;
    it->second.allocated = false;
    auto next = std::next(it);
    if (next != blocks_.end() && !next->second.allocated &&
        next->second.segment == it->second.segment && address + it->second.size == next->first) {
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (!prev->second.allocated && prev->second.segment == it->second.segment &&
          prev->first + prev->second.size == address) {
        prev->second.size += it->second.size;
        blocks_.erase(it);
      }
    }
  }

 private:
  void DropRange(uintptr_t address, size_t size) {
    blocks_.erase(blocks_.lower_bound(address), blocks_.lower_bound(address + size));
  }

  std::map<uintptr_t, MirrorBlock> blocks_;
};

constexpr int kMaxDevices = 128;
DeviceMirror g_mirrors[kMaxDevices];

DeviceMirror* MirrorFor(int device) {
  return device >= 0 && device < kMaxDevices ? &g_mirrors[device] : nullptr;
}

// The annotate API's pool id: 0 for the default pool; a private pool (CUDA graphs,
// torch.cuda.MemPool) by its MempoolId_t, {capture id, 0} or {0, handle id}, with the top bit
// telling the two counters apart.
uint64_t PoolId(const c10::MempoolId_t& pool) {
  if (pool.first != 0) return pool.first | (uint64_t{1} << 63);
  return pool.second;
}

void OnTrace(const alloc::TraceEntry& e) {
  // addr_ is the block address for block actions; for OOM it is the device's free bytes.
  const uintptr_t address = static_cast<uintptr_t>(e.addr_);
  void* ptr = reinterpret_cast<void*>(address);
  void* stream = reinterpret_cast<void*>(e.stream_);
  DeviceMirror* mirror = MirrorFor(e.device_);
  switch (e.action_) {
    case alloc::TraceEntry::SEGMENT_ALLOC:
      // The agent sees the segment itself as the driver call it is.
      if (mirror) mirror->AddSegment(address, e.size_);
      break;
    case alloc::TraceEntry::SEGMENT_FREE:
      if (mirror) mirror->DropSegment(address, e.size_);
      break;
    case alloc::TraceEntry::ALLOC: {
      const size_t rounded = RoundSize(e.size_);
      const size_t block = mirror ? mirror->Allocate(address, rounded) : 0;
      fragscope_annotate_block_alloc(ptr, block != 0 ? block : rounded, e.device_, stream,
                                     PoolId(e.mempool_));
      break;
    }
    case alloc::TraceEntry::FREE_REQUESTED:
      // Not reusable until the streams that used it pass this point; FREE_COMPLETED follows
      // (at once when no other stream used the block).
      fragscope_annotate_block_free_pending(ptr, e.device_, stream);
      break;
    case alloc::TraceEntry::FREE_COMPLETED:
      if (mirror) mirror->Free(address);
      fragscope_annotate_block_free(ptr, e.device_, stream);
      break;
    case alloc::TraceEntry::OOM:
      fragscope_annotate_alloc_failed(e.size_, e.device_, stream);
      break;
    default:
      // SEGMENT_MAP/UNMAP: the agent sees them as the driver calls they are.
      // SNAPSHOT, ANNOTATE (torch >= 2.9: user metadata on a live block): nothing to forward.
      break;
  }
}

// Attaches the tracker once per process; true if this call attached it. Needs CUDA initialised
// (the allocator must exist), which sitecustomize.py waits for.
// False, not an exception, when the allocator in use has no tracker (the cudaMallocAsync
// backend refuses one): sitecustomize.py then uses its fallback.
bool Install() {
  if (g_installed.exchange(true)) return false;
  try {
    alloc::attachAllocatorTraceTracker(&OnTrace);
  } catch (const std::exception&) {
    g_installed = false;
    return false;
  }
  return true;
}

// Whether the agent is there to receive the annotations.
bool AgentActive() { return fragscope_annotate_active() != 0; }

void Mark(const std::string& label) { fragscope_annotate_mark(label.c_str()); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fragscope: PyTorch caching-allocator blocks to the fragscope agent";
  m.def("install", &Install, "attach the allocator trace tracker (once per process)");
  m.def("agent_active", &AgentActive, "whether libfragscope.so receives annotations");
  m.def("mark", &Mark, "a label in the fragscope timeline (e.g. 'step 12')");
}
