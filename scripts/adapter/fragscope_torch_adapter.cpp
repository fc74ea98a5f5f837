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

#if __has_include(<torch/csrc/profiler/combined_traceback.h>)
#include <torch/csrc/profiler/combined_traceback.h>
#define FRAGSCOPE_HAVE_TRACEBACKS 1
#endif

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "fragscope/annotate.h"

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

std::atomic<bool> g_installed{false};
std::atomic<bool> g_oom_from_observer{false};  // sitecustomize's OOM observer reports OOMs

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

// The stream of each device's latest OOM entry, for the observer's report (ReportOom).
std::atomic<uintptr_t> g_oom_stream[kMaxDevices];

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

// New peaks of PyTorch's reserved memory. The collector names the blocks live at a device's
// peak of reserved by their sites; blocks made and freed between two flushes would stay under
// the tracker's C++ site there, and a training step's activations, the bulk of its peak, are
// such blocks. So each new peak wakes the flush thread at once (sitecustomize.py waits on
// growth_fd() with poll), while those blocks are still live: a byte down a non-blocking
// pipe, which a full pipe drops (a wake is already pending then). Per device, under that
// device's allocator lock (the tracker's caller), so plain counters.
uint64_t g_reserved[kMaxDevices];
uint64_t g_peak_reserved[kMaxDevices];
std::atomic<int> g_growth_write_fd{-1};
std::mutex g_growth_fd_lock;  // creates the pipe once
int g_growth_read_fd = -1;

void NewPeak(int device);  // below, with the sites it concerns

void ReservedChanged(int device, uint64_t size, bool grew) {
  if (device < 0 || device >= kMaxDevices) return;
  uint64_t& reserved = g_reserved[device];
  if (!grew) {
    reserved -= std::min(reserved, size);
    return;
  }
  reserved += size;
  if (reserved <= g_peak_reserved[device]) return;
  g_peak_reserved[device] = reserved;
  NewPeak(device);
  const int fd = g_growth_write_fd.load(std::memory_order_acquire);
  if (fd >= 0) {
    const char byte = 'p';
    const int saved = errno;  // the allocator may read errno after its driver call
    (void)!write(fd, &byte, 1);
    errno = saved;
  }
}

// Python sites. The tracker runs without the GIL, so it cannot read Python frames; PyTorch's
// own context recording (_record_memory_history(stacks="python"), which sitecustomize turns on)
// gathers them before the allocator takes its lock and hands each ALLOC entry the traceback.
// The tracker keeps it by block address until Python, holding the GIL, turns the pending ones
// into source stacks (FlushSites: at marks, at OOMs before the failure is reported, at exit).
// g_sites_lock orders a site before the block's free: the tracker drops a block's entry under
// it before reporting the free, and FlushSites reports a site under it only for an entry still
// there, from the same allocation. Lock order: the allocator's lock, then g_sites_lock; Python
// holds the GIL and takes g_sites_lock, never the allocator's.
//
// A block live at a device's latest peak of reserved and freed before its flush (the peak's
// own temporary, often) is kept on g_freed_at_peak instead, and FlushSites reports its site as a
// freed block's (fragscope_freed_block_site): only the sites at the peak change, and the
// collector checks that the block was live there.
struct PendingSite {
  std::shared_ptr<c10::GatheredContext> context;  // null: allocated in a backward pass only
  int device = -1;
  uint64_t generation = 0;  // which allocation at this address
  uint64_t size = 0;        // as reported to the agent
  uint64_t backward = 0;    // the site of the backward pass it was allocated in (0: none)
};
struct FreedSite {
  uintptr_t address;
  PendingSite site;
};
std::mutex g_sites_lock;
std::unordered_map<uintptr_t, PendingSite> g_pending_sites;
uint64_t g_generation = 0;
// Per device: blocks of generation up to this one may have been live at its latest peak (the
// allocation right after the peak's segment included: the collector takes the sites at the
// peak after the block the segment was made for).
uint64_t g_peak_generation[kMaxDevices];
std::vector<FreedSite> g_freed_at_peak;
constexpr std::size_t kMaxFreedAtPeak = 65536;

// Backward passes. The autograd engine allocates on threads of its own, whose contexts hold no
// Python frames, so gradients and backward temporaries had the tracker's C++ site.
// sitecustomize wraps torch.autograd.backward and .grad and marks each pass (BeginBackward,
// with the Python frames of its call): a block allocated meanwhile without Python frames gets
// "(autograd backward)" above them as its site, interned at once (a step's passes share it).
std::atomic<uint64_t> g_backward{0};  // the running pass's site, 0 for none

void KeepContext(uintptr_t address, int device, uint64_t size,
                 const std::shared_ptr<c10::GatheredContext>& c) {
  const uint64_t backward = g_backward.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_sites_lock);
  if (c == nullptr && backward == 0) {
    g_pending_sites.erase(address);
    return;
  }
  g_pending_sites[address] = PendingSite{c, device, ++g_generation, size, backward};
}

// Called from Python (the GIL held) when a backward pass starts, with the Python frames of its
// call (innermost first). Returns the pass's site and the site of the pass it interrupts (a
// torch.autograd.grad inside a backward hook), for EndBackward to restore.
std::pair<uint64_t, uint64_t> BeginBackward(
    const std::vector<std::tuple<std::string, std::string, int>>& frames) {
  std::vector<fragscope_source_frame> out;
  out.push_back({"(autograd backward)", nullptr, 0});
  for (const auto& [function, file, line] : frames) {
    out.push_back({function.c_str(), file.c_str(), static_cast<uint32_t>(line > 0 ? line : 0)});
  }
  const uint64_t site = fragscope_annotate_source_stack(out.data(), out.size());
  if (site == 0) return {0, 0};  // no agent, or its table of stacks is full
  return {site, g_backward.exchange(site, std::memory_order_relaxed)};
}

void EndBackward(uint64_t site, uint64_t interrupted) {
  g_backward.compare_exchange_strong(site, interrupted, std::memory_order_relaxed);
}

void DropContext(uintptr_t address) {
  std::lock_guard<std::mutex> lock(g_sites_lock);
  auto it = g_pending_sites.find(address);
  if (it == g_pending_sites.end()) return;
  const PendingSite& site = it->second;
  if (site.device >= 0 && site.device < kMaxDevices &&
      site.generation <= g_peak_generation[site.device] &&
      g_freed_at_peak.size() < kMaxFreedAtPeak) {
    g_freed_at_peak.push_back({address, std::move(it->second)});
  }
  g_pending_sites.erase(it);
}

// A new peak on `device`: blocks freed since its previous peak no longer matter there.
void NewPeak(int device) {
  std::lock_guard<std::mutex> lock(g_sites_lock);
  g_peak_generation[device] = g_generation + 1;
  g_freed_at_peak.erase(
      std::remove_if(g_freed_at_peak.begin(), g_freed_at_peak.end(),
                     [device](const FreedSite& f) { return f.site.device == device; }),
      g_freed_at_peak.end());
}

// Reports the Python site of every block allocated since the last flush and still live, and of
// those freed since that were live at their device's latest peak. Called from Python (the GIL
// held). Returns the number of blocks given a site.
int FlushSites() {
#ifndef FRAGSCOPE_HAVE_TRACEBACKS
  return 0;
#else
  struct Taken {
    uintptr_t address;
    PendingSite site;
    bool freed;  // from g_freed_at_peak
  };
  std::vector<Taken> taken;
  {
    std::lock_guard<std::mutex> lock(g_sites_lock);
    taken.reserve(g_pending_sites.size() + g_freed_at_peak.size());
    for (const auto& [address, site] : g_pending_sites) taken.push_back({address, site, false});
    for (FreedSite& f : g_freed_at_peak) taken.push_back({f.address, std::move(f.site), true});
    g_freed_at_peak.clear();
  }
  if (taken.empty()) return 0;
  std::vector<torch::CapturedTraceback*> tracebacks;
  std::vector<size_t> of;  // index into `taken` of each traceback
  for (size_t i = 0; i < taken.size(); ++i) {
    if (auto* t = dynamic_cast<torch::CapturedTraceback*>(taken[i].site.context.get())) {
      tracebacks.push_back(t);
      of.push_back(i);
    }
  }
  // Outside the lock: symbolizing reads Python objects (the GIL, which the caller holds).
  const torch::SymbolizedTracebacks symbolized = torch::symbolize(tracebacks);
  std::vector<uint64_t> stack_of(taken.size(), 0);
  std::vector<fragscope_source_frame> frames;
  for (size_t k = 0; k < symbolized.tracebacks.size() && k < of.size(); ++k) {
    frames.clear();
    for (uint64_t index : symbolized.tracebacks[k]) {
      if (index >= symbolized.all_frames.size()) continue;
      const auto& f = symbolized.all_frames[index];
      // Python frames only, as the fallback keeps: a program that records its own history with
      // C++ stacks (stacks="all") would otherwise bury the line that made the tensor.
      const std::string& file = f.filename;
      if (file.size() < 3 || file.compare(file.size() - 3, 3, ".py") != 0) continue;
      frames.push_back({f.funcname.c_str(), f.filename.c_str(), static_cast<uint32_t>(f.lineno)});
    }
    stack_of[of[k]] = fragscope_annotate_source_stack(frames.data(), frames.size());
  }
  // No Python frames (or no context) but allocated during a backward pass: the pass's site.
  for (size_t i = 0; i < taken.size(); ++i) {
    if (stack_of[i] == 0) stack_of[i] = taken[i].site.backward;
  }
  int reported = 0;
  auto report_freed = [&](uintptr_t address, const PendingSite& site, uint64_t stack) {
    fragscope_annotate_freed_block_site(reinterpret_cast<void*>(address), site.size, site.device,
                                        stack);
    ++reported;
  };
  std::lock_guard<std::mutex> lock(g_sites_lock);
  // Blocks freed while this flush symbolized, that were live at their device's peak, are on
  // g_freed_at_peak again: by address, to find them below.
  std::unordered_map<uintptr_t, size_t> freed_meanwhile;
  for (size_t j = 0; j < g_freed_at_peak.size(); ++j) {
    freed_meanwhile[g_freed_at_peak[j].address] = j;
  }
  std::vector<bool> reported_freed(g_freed_at_peak.size(), false);
  for (size_t i = 0; i < taken.size(); ++i) {
    const Taken& t = taken[i];
    if (t.freed) {
      if (stack_of[i] != 0) report_freed(t.address, t.site, stack_of[i]);
      continue;
    }
    auto it = g_pending_sites.find(t.address);
    if (it == g_pending_sites.end() || it->second.generation != t.site.generation) {
      auto f = freed_meanwhile.find(t.address);
      if (f != freed_meanwhile.end() &&
          g_freed_at_peak[f->second].site.generation == t.site.generation) {
        if (stack_of[i] != 0) report_freed(t.address, t.site, stack_of[i]);
        reported_freed[f->second] = true;
      }
      continue;
    }
    // No traceback (recorded without Python frames, e.g. autograd's backward thread): the
    // block keeps the site it was reported with.
    if (stack_of[i] != 0) {
      fragscope_annotate_block_site(reinterpret_cast<void*>(t.address), it->second.device,
                                    stack_of[i]);
      ++reported;
    }
    g_pending_sites.erase(it);
  }
  if (!freed_meanwhile.empty()) {
    std::size_t kept = 0;
    for (size_t j = 0; j < g_freed_at_peak.size(); ++j) {
      if (!reported_freed[j]) g_freed_at_peak[kept++] = std::move(g_freed_at_peak[j]);
    }
    g_freed_at_peak.resize(kept);
  }
  return reported;
#endif
}

// The read end of the peak pipe: readable after each new peak of reserved memory on any device.
// Created on the first call; -1 when no pipe can be made.
int GrowthFd() {
  std::lock_guard<std::mutex> lock(g_growth_fd_lock);
  if (g_growth_read_fd < 0) {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
    g_growth_read_fd = fds[0];
    g_growth_write_fd.store(fds[1], std::memory_order_release);
  }
  return g_growth_read_fd;
}

// PyTorch's first symbolize imports torch._inductor (its PyCodeCache maps generated code back to
// source) and what that needs: about 900 modules, 2 s here. sitecustomize.py runs one at CUDA's
// initialisation so that no flush pays it (see there).
void WarmUpSites() {
#ifdef FRAGSCOPE_HAVE_TRACEBACKS
  std::shared_ptr<torch::CapturedTraceback> here =
      torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
  torch::symbolize({here.get()});
#endif
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
      ReservedChanged(e.device_, e.size_, /*grew=*/true);
      break;
    case alloc::TraceEntry::SEGMENT_FREE:
      if (mirror) mirror->DropSegment(address, e.size_);
      ReservedChanged(e.device_, e.size_, /*grew=*/false);
      break;
    // Expandable segments' pages; the agent sees the mappings as the driver calls they are.
    case alloc::TraceEntry::SEGMENT_MAP:
    case alloc::TraceEntry::SEGMENT_UNMAP:
      ReservedChanged(e.device_, e.size_, e.action_ == alloc::TraceEntry::SEGMENT_MAP);
      break;
    case alloc::TraceEntry::ALLOC: {
      const size_t rounded = RoundSize(e.size_);
      const size_t block = mirror ? mirror->Allocate(address, rounded) : 0;
      fragscope_annotate_block_alloc(ptr, block != 0 ? block : rounded, e.device_, stream,
                                     PoolId(e.mempool_));
      KeepContext(address, e.device_, block != 0 ? block : rounded, e.context_);
      break;
    }
    case alloc::TraceEntry::FREE_REQUESTED:
      // Not reusable until the streams that used it pass this point; FREE_COMPLETED follows
      // (at once when no other stream used the block).
      fragscope_annotate_block_free_pending(ptr, e.device_, stream);
      break;
    case alloc::TraceEntry::FREE_COMPLETED:
      DropContext(address);  // before the free is reported: see g_sites_lock
      if (mirror) mirror->Free(address);
      fragscope_annotate_block_free(ptr, e.device_, stream);
      break;
    case alloc::TraceEntry::OOM:
      // With Python sites on, PyTorch's OOM observer reports it (sitecustomize), after the
      // blocks' sites: the failure is then judged with its tensors' Python frames.
      if (e.device_ >= 0 && e.device_ < kMaxDevices)
        g_oom_stream[e.device_] = reinterpret_cast<uintptr_t>(e.stream_);
      if (!g_oom_from_observer.load()) fragscope_annotate_alloc_failed(e.size_, e.device_, stream);
      break;
    default:
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

// Whether this build can turn PyTorch's tracebacks into sites (the header is there).
bool SitesSupported() {
#ifdef FRAGSCOPE_HAVE_TRACEBACKS
  return true;
#else
  return false;
#endif
}

void ReportOomFromObserver(bool on) { g_oom_from_observer = on; }
// An OOM from PyTorch's observer, with the Python frames of the failing request (innermost
// first, as (function, file, line)): the observer's own C++ stack would name pybind11.
void ReportOom(size_t size, int device,
               const std::vector<std::tuple<std::string, std::string, int>>& python_frames) {
  void* stream = nullptr;  // the observer is not told the stream; the tracker's OOM entry was
  if (device >= 0 && device < kMaxDevices) {
    stream = reinterpret_cast<void*>(g_oom_stream[device].load());
  }
  std::vector<fragscope_source_frame> frames;
  for (const auto& [function, file, line] : python_frames) {
    frames.push_back({function.c_str(), file.c_str(), static_cast<uint32_t>(line > 0 ? line : 0)});
  }
  const uint64_t site = fragscope_annotate_source_stack(frames.data(), frames.size());
  if (site != 0) {
    fragscope_annotate_alloc_failed_at(size, device, stream, site);
  } else {
    fragscope_annotate_alloc_failed(size, device, stream);
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fragscope: PyTorch caching-allocator blocks to the fragscope agent";
  m.def("install", &Install, "attach the allocator trace tracker (once per process)");
  m.def("agent_active", &AgentActive, "whether libfragscope.so receives annotations");
  m.def("mark", &Mark, "a label in the fragscope timeline (e.g. 'step 12')");
  m.def("sites_supported", &SitesSupported, "whether Python sites can be reported");
  m.def("flush_sites", &FlushSites,
        "give the blocks allocated since the last flush their Python sites (GIL held)");
  m.def("warm_up_sites", &WarmUpSites, "symbolize once, so later flushes are quick (GIL held)");
  m.def("growth_fd", &GrowthFd,
        "a pipe's read end, readable after each new peak of PyTorch's reserved memory");
  m.def("begin_backward", &BeginBackward,
        "a backward pass starts, called from these Python frames (innermost first): returns "
        "(its site, the site of the pass it interrupts)");
  m.def("end_backward", &EndBackward,
        "the pass of this site ended; the one it interrupted (begin_backward's) resumes");
  m.def("report_oom_from_observer", &ReportOomFromObserver,
        "true: the tracker leaves OOMs to the caller's observer (report_oom)");
  m.def("report_oom", &ReportOom, "a failed allocation of the caching allocator");
}
