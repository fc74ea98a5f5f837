// fragscope's PyTorch adapter, C++ half: forwards the CUDA caching allocator's block events to
// the agent's annotate API (interpose/include/fragscope/annotate.h), so the collector sees
// PyTorch's blocks inside its segments instead of opaque segments.
//
// Built at run time by sitecustomize.py with torch.utils.cpp_extension.load against the installed
// torch (the allocator's C++ API has no stable ABI), cached per torch version.
//
// The tracker runs under the allocator's lock, on whatever thread allocates, and with or without
// the GIL: it calls only the annotate functions (lock-free, allocation-free in the agent) and
// never Python. The annotate functions are weak: without libfragscope.so preloaded they are null
// and the tracker does nothing.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/extension.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>

#include "fragscope/annotate.h"

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

std::atomic<bool> g_installed{false};

void OnTrace(const alloc::TraceEntry& e) {
  // addr_ is the block address for block actions; for OOM it is the device's free bytes.
  void* ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(e.addr_));
  void* stream = reinterpret_cast<void*>(e.stream_);
  switch (e.action_) {
    case alloc::TraceEntry::ALLOC:
      fragscope_annotate_block_alloc(ptr, e.size_, e.device_, stream, 0);
      break;
    case alloc::TraceEntry::FREE_REQUESTED:
      // Not reusable until the streams that used it pass this point; FREE_COMPLETED follows
      // (at once when no other stream used the block).
      fragscope_annotate_block_free_pending(ptr, e.device_, stream);
      break;
    case alloc::TraceEntry::FREE_COMPLETED:
      fragscope_annotate_block_free(ptr, e.device_, stream);
      break;
    case alloc::TraceEntry::OOM:
      fragscope_annotate_alloc_failed(e.size_, e.device_, stream);
      break;
    default:
      // SEGMENT_ALLOC/FREE/MAP/UNMAP: the agent sees them as the driver calls they are.
      // SNAPSHOT: nothing to forward.
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
