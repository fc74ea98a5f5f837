#include "gpu_state.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace fakecuda {
namespace {

// Legacy (32-bit ABI) allocations must fit in 32 bits: a 256 MiB window per device at 1 GiB +
// physical * 256 MiB, reserved with MAP_FIXED_NOREPLACE so it never clobbers host mappings.
constexpr uint64_t kLowWindowBase = 1ull << 30;
constexpr uint64_t kLowWindowBytes = 256ull << 20;
// Null mode never touches memory; its addresses only need to be distinct and non-zero.
constexpr uint64_t kNullWindowBase = 1ull << 40;

thread_local std::vector<Context*> tls_context_stack;
thread_local CUstreamCaptureMode tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

void MapDeviceWindowsLocked(State& s, Device& d) {
  if (d.va.size() != 0) return;
  uint64_t bytes =
      std::max<uint64_t>(64ull << 30, RoundUp(4 * s.config.capacity_bytes, kPageBytes));
  if (s.config.null_mode) {
    d.va.Reset(kNullWindowBase * (d.physical + 1), bytes);
    d.low_va.Reset(kLowWindowBase + d.physical * kLowWindowBytes, kLowWindowBytes);
    d.low_window_ok = true;
    return;
  }
  // Reserve twice the window and align to 2 MiB so page-sized allocations are page aligned.
  void* raw = mmap(nullptr, bytes + kPageBytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    std::perror("fakecuda: cannot reserve device address window");
    return;
  }
  uint64_t base = RoundUp(reinterpret_cast<uint64_t>(raw), kPageBytes);
  d.va.Reset(base, bytes);
  void* low_hint = reinterpret_cast<void*>(kLowWindowBase + d.physical * kLowWindowBytes);
  void* low = mmap(low_hint, kLowWindowBytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (low == low_hint) {
    d.low_va.Reset(reinterpret_cast<uint64_t>(low), kLowWindowBytes);
    d.low_window_ok = true;
  } else if (low != MAP_FAILED) {
    munmap(low, kLowWindowBytes);  // old kernels treat the flag as a hint
  }
}

}  // namespace

State& GetState() {
  // Leaked: used from atexit handlers and destructors. The lock is held across fork() so a
  // child never inherits it locked by a thread that does not exist there.
  static State* state = [] {
    State* fresh = new State();
    pthread_atfork([] { GetState().mu.lock(); }, [] { GetState().mu.unlock(); },
                   [] { GetState().mu.unlock(); });
    return fresh;
  }();
  return *state;
}

std::vector<Context*>& ContextStack() { return tls_context_stack; }
Context* CurrentContext() { return tls_context_stack.empty() ? nullptr : tls_context_stack.back(); }
void SetCurrentContext(Context* ctx) {
  if (tls_context_stack.empty()) {
    if (ctx) tls_context_stack.push_back(ctx);
  } else if (ctx) {
    tls_context_stack.back() = ctx;
  } else {
    tls_context_stack.pop_back();
  }
}
CUstreamCaptureMode& ThreadCaptureMode() { return tls_capture_mode; }

void ConfigureDevicesLocked(State& s) {
  s.device_count = static_cast<int>(s.config.visible.size());
  s.null_mode.store(s.config.null_mode, std::memory_order_relaxed);
  s.fail_at = s.config.fail_at;
  s.call_failures.clear();
  for (const auto& [api, n] : s.config.fail_calls) s.call_failures[api] = {0, n};
  for (int i = 0; i < kMaxDevices; ++i) {
    Device& d = s.devices[i];
    d.primary.device = i;
    d.primary.primary = true;
    if (i >= s.device_count) continue;
    d.physical = s.config.visible[i];
    d.total_pages = s.config.capacity_bytes / kPageBytes;
    d.other_pages = PagesFor(s.config.other_used_bytes);
    d.used_pages = 0;
    MapDeviceWindowsLocked(s, d);
    if (!d.default_pool) {
      d.default_pool = new MemPool();
      d.default_pool->device = i;
      d.default_pool->is_default = true;
      s.pools.insert(d.default_pool);
    }
    d.current_pool = d.default_pool;
  }
}

bool CountAllocationCallLocked(State& s) {
  ++s.allocation_calls;
  return std::find(s.fail_at.begin(), s.fail_at.end(), s.allocation_calls) != s.fail_at.end();
}

bool CountApiCallLocked(State& s, const char* api) {
  auto it = s.call_failures.find(api);
  if (it == s.call_failures.end()) return false;
  return ++it->second.first == it->second.second;
}

uint64_t FreePagesLocked(const Device& d) {
  uint64_t held = d.used_pages + d.other_pages;
  return held >= d.total_pages ? 0 : d.total_pages - held;
}

bool ChargePagesLocked(Device& d, uint64_t pages) {
  if (pages > FreePagesLocked(d)) return false;
  d.used_pages += pages;
  return true;
}

void ReleasePagesLocked(Device& d, uint64_t pages) {
  d.used_pages -= std::min(pages, d.used_pages);
}

void CommitLocked(const State& s, uint64_t address, uint64_t bytes) {
  if (s.config.null_mode || bytes == 0) return;
  mprotect(reinterpret_cast<void*>(address), bytes, PROT_READ | PROT_WRITE);
}

void DecommitLocked(const State& s, uint64_t address, uint64_t bytes) {
  if (s.config.null_mode || bytes == 0) return;
  madvise(reinterpret_cast<void*>(address), bytes, MADV_DONTNEED);
  mprotect(reinterpret_cast<void*>(address), bytes, PROT_NONE);
}

CUresult AllocateLocked(State& s, Context* ctx, uint64_t size, fakecuda_kind kind, bool charge,
                        bool low_window, CUdeviceptr* out) {
  Device& d = s.devices[ctx->device];
  Allocation a;
  a.size = size;
  a.device = ctx->device;
  a.kind = kind;
  a.ctx = ctx;
  a.low_window = low_window;
  if (low_window) {
    if (!d.low_window_ok) return CUDA_ERROR_OUT_OF_MEMORY;
    a.pages = charge ? PagesFor(size) : 0;
    a.va_bytes = PagesFor(size) * kPageBytes;
    if (!ChargePagesLocked(d, a.pages)) return CUDA_ERROR_OUT_OF_MEMORY;
    a.address = d.low_va.Allocate(a.va_bytes, kPageBytes);
    if (a.address == 0) {
      ReleasePagesLocked(d, a.pages);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CommitLocked(s, a.address, a.va_bytes);
  } else if (charge && size < kPageBytes) {
    // Small sizes share 2 MiB pages at 512-byte alignment, like the real allocator's small
    // heaps: only a new page costs physical memory.
    uint64_t rounded = RoundUp(size, kSmallAlignment);
    for (auto& [page_address, page] : d.small_pages) {
      a.address = page.ranges.Allocate(rounded, kSmallAlignment);
      if (a.address) {
        a.small_page = page_address;
        ++page.live;
        break;
      }
    }
    if (!a.address) {
      if (!ChargePagesLocked(d, 1)) return CUDA_ERROR_OUT_OF_MEMORY;
      uint64_t page_address = d.va.Allocate(kPageBytes, kPageBytes);
      if (!page_address) {
        ReleasePagesLocked(d, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      CommitLocked(s, page_address, kPageBytes);
      SmallPage& page = d.small_pages[page_address];
      page.device = ctx->device;
      page.ranges.Reset(page_address, kPageBytes);
      a.address = page.ranges.Allocate(rounded, kSmallAlignment);
      a.small_page = page_address;
      page.live = 1;
    }
    a.va_bytes = rounded;
  } else {
    a.va_bytes = PagesFor(size) * kPageBytes;
    a.pages = charge ? PagesFor(size) : 0;
    if (!ChargePagesLocked(d, a.pages)) return CUDA_ERROR_OUT_OF_MEMORY;
    a.address = d.va.Allocate(a.va_bytes, kPageBytes);
    if (!a.address) {
      ReleasePagesLocked(d, a.pages);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CommitLocked(s, a.address, a.va_bytes);
  }
  *out = a.address;
  s.allocations[a.address] = a;
  return CUDA_SUCCESS;
}

void ReleaseAllocationLocked(State& s, std::map<uint64_t, Allocation>::iterator it) {
  Allocation& a = it->second;
  Device& d = s.devices[a.device];
  if (a.pool) {
    MemPool* pool = a.pool;
    a.chunk->ranges.Free(a.address, a.va_bytes);
    --a.chunk->blocks;
    pool->used -= a.va_bytes;
    s.allocations.erase(it);
    if (!pool->alive) ReleaseIdleChunksLocked(s, pool, 0);  // destroyed pool: nothing to keep
    return;
  } else if (a.small_page) {
    auto page = d.small_pages.find(a.small_page);
    page->second.ranges.Free(a.address, a.va_bytes);
    if (--page->second.live == 0) {
      DecommitLocked(s, page->first, kPageBytes);
      d.va.Free(page->first, kPageBytes);
      ReleasePagesLocked(d, 1);
      d.small_pages.erase(page);
    }
  } else {
    DecommitLocked(s, a.address, a.va_bytes);
    (a.low_window ? d.low_va : d.va).Free(a.address, a.va_bytes);
    ReleasePagesLocked(d, a.pages);
  }
  s.allocations.erase(it);
}

std::map<uint64_t, Allocation>::iterator FindContainingLocked(State& s, uint64_t address,
                                                              uint64_t bytes) {
  auto it = s.allocations.upper_bound(address);
  if (it == s.allocations.begin()) return s.allocations.end();
  --it;
  uint64_t end = it->second.address + std::max<uint64_t>(it->second.size, 1);
  if (address >= end || bytes > end - address) return s.allocations.end();
  return it;
}

bool IsDeviceRangeLocked(State& s, uint64_t address, uint64_t bytes) {
  if (FindContainingLocked(s, address, bytes) != s.allocations.end()) return true;
  if (auto g = s.globals.upper_bound(address); g != s.globals.begin()) {
    --g;
    if (address >= g->first && address - g->first <= g->second &&
        bytes <= g->second - (address - g->first)) {
      return true;
    }
  }
  // VMM: walk contiguous accessible mappings.
  uint64_t cursor = address;
  uint64_t end = address + bytes;
  while (cursor < end || (bytes == 0 && cursor == address)) {
    auto it = s.mappings.upper_bound(cursor);
    if (it == s.mappings.begin()) return false;
    --it;
    const VmmMapping& m = it->second;
    if (cursor >= m.address + m.size || !m.accessible) return false;
    cursor = m.address + m.size;
    if (bytes == 0) break;
  }
  return true;
}

HandleObject* LiveObjectLocked(State& s, void* handle, HandleObject::Type type) {
  HandleObject* object = static_cast<HandleObject*>(handle);
  return s.objects.count(object) && object->alive && object->type == type ? object : nullptr;
}

HandleObject* NewObjectLocked(State& s, HandleObject::Type type, HandleObject* parent) {
  HandleObject* object = new HandleObject();
  object->type = type;
  object->parent = parent;
  s.objects.insert(object);
  return object;
}

bool IsLiveContextLocked(State& s, Context* ctx) {
  if (!ctx) return false;
  if (IsPrimaryContextLocked(s, ctx)) return ctx->alive;
  return s.contexts.count(ctx) && ctx->alive;
}

bool IsPrimaryContextLocked(State& s, Context* ctx) {
  for (int i = 0; i < s.device_count; ++i) {
    if (ctx == &s.devices[i].primary) return true;
  }
  return false;
}

CUresult RequireContextLocked(State& s, Context** ctx) {
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* current = CurrentContext();
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  if (!IsLiveContextLocked(s, current)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *ctx = current;
  return CUDA_SUCCESS;
}

CUresult ActivateContextLocked(State& s, Context* ctx) {
  // Null mode keeps no accounting at all, not even for contexts.
  uint64_t pages = s.config.null_mode ? 0 : PagesFor(s.config.ctx_overhead_bytes);
  if (!ChargePagesLocked(s.devices[ctx->device], pages)) return CUDA_ERROR_OUT_OF_MEMORY;
  ctx->overhead_pages = pages;
  ctx->alive = true;
  ctx->id = s.next_context_id++;
  // The default streams live as long as their context object (reused on reactivation).
  if (!ctx->legacy_stream) ctx->legacy_stream = new Stream();
  if (!ctx->per_thread_stream) ctx->per_thread_stream = new Stream();
  *ctx->legacy_stream = Stream();
  ctx->legacy_stream->ctx = ctx;
  *ctx->per_thread_stream = Stream();
  ctx->per_thread_stream->ctx = ctx;
  ctx->per_thread_stream->flags = CU_STREAM_NON_BLOCKING;
  return CUDA_SUCCESS;
}

void DeactivateContextLocked(State& s, Context* ctx) {
  NoteContextTeardownLocked(s);  // FAKECUDA_LIVE_DUMP: the table before a teardown at exit
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    auto next = std::next(it);
    if (it->second.ctx == ctx) ReleaseAllocationLocked(s, it);
    it = next;
  }
  for (Stream* stream : s.streams) {
    if (stream->ctx == ctx) stream->alive = false;
  }
  for (Event* event : s.events) {
    if (event->ctx == ctx) event->alive = false;
  }
  if (ctx->primary) {
    // A device reset returns the pools' cached memory too.
    for (MemPool* pool : s.pools) {
      if (pool->device == ctx->device) ReleaseIdleChunksLocked(s, pool, 0);
    }
  }
  ReleasePagesLocked(s.devices[ctx->device], ctx->overhead_pages);
  ctx->overhead_pages = 0;
  ctx->alive = false;
  ctx->primary_refs = 0;
  ctx->local_storage.clear();  // destructors, where due, were taken and run by the caller
  ctx->limits.clear();
}

std::vector<LocalStorageRelease> TakeLocalStorageLocked(Context* ctx) {
  std::vector<LocalStorageRelease> releases;
  for (auto& [key, entry] : ctx->local_storage) {
    releases.push_back({reinterpret_cast<CUcontext>(ctx), key, entry});
  }
  ctx->local_storage.clear();
  return releases;
}

void RunLocalStorageDestructors(const std::vector<LocalStorageRelease>& releases) {
  for (const LocalStorageRelease& r : releases) {
    if (r.entry.destructor) r.entry.destructor(r.ctx, r.key, r.entry.value);
  }
}

Stream* ResolveStreamLocked(State& s, Context* ctx, CUstream stream, bool per_thread_default) {
  if (stream == nullptr) return per_thread_default ? ctx->per_thread_stream : ctx->legacy_stream;
  if (stream == CU_STREAM_LEGACY) return ctx->legacy_stream;
  if (stream == CU_STREAM_PER_THREAD) return ctx->per_thread_stream;
  Stream* candidate = reinterpret_cast<Stream*>(stream);
  if (!s.streams.count(candidate) || !candidate->alive) return nullptr;
  return candidate;
}

void SynchronizeStreamLocked(State& s, Stream* stream, uint64_t up_to_seq) {
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    auto next = std::next(it);
    const Allocation& a = it->second;
    if (a.kind == FAKECUDA_KIND_ASYNC_PENDING && a.free_stream == stream &&
        a.free_seq <= up_to_seq) {
      ReleaseAllocationLocked(s, it);
    }
    it = next;
  }
  for (MemPool* pool : s.pools) {
    if (pool->device != stream->ctx->device) continue;
    if (!pool->alive) {
      ReleaseIdleChunksLocked(s, pool, 0);
    } else if (pool->reserved > pool->release_threshold) {
      ReleaseIdleChunksLocked(s, pool, pool->release_threshold);
    }
  }
}

void SynchronizeContextLocked(State& s, Context* ctx) {
  SynchronizeStreamLocked(s, ctx->legacy_stream, ~0ull);
  SynchronizeStreamLocked(s, ctx->per_thread_stream, ~0ull);
  for (Stream* stream : s.streams) {
    if (stream->ctx == ctx && stream->alive) SynchronizeStreamLocked(s, stream, ~0ull);
  }
}

void ReleaseIdleChunksLocked(State& s, MemPool* pool, uint64_t keep_bytes) {
  Device& d = s.devices[pool->device];
  for (size_t i = pool->chunks.size(); i-- > 0 && pool->reserved > keep_bytes;) {
    PoolChunk* chunk = pool->chunks[i].get();
    if (chunk->blocks != 0) continue;
    DecommitLocked(s, chunk->address, chunk->size);
    d.va.Free(chunk->address, chunk->size);
    ReleasePagesLocked(d, chunk->size / kPageBytes);
    pool->reserved -= chunk->size;
    pool->chunks.erase(pool->chunks.begin() + static_cast<long>(i));
  }
}

void DestroyPoolContentsLocked(State& s, MemPool* pool) {
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    auto next = std::next(it);
    if (it->second.pool == pool) ReleaseAllocationLocked(s, it);
    it = next;
  }
  ReleaseIdleChunksLocked(s, pool, 0);
  pool->used = 0;
}

bool UnsafeDuringCaptureLocked(State& s) {
  CUstreamCaptureMode mine = tls_capture_mode;
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  std::thread::id self = std::this_thread::get_id();
  bool prohibited = false;
  for (Stream* stream : s.streams) {
    if (!stream->alive || stream->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) continue;
    bool own =
        stream->capture_thread == self && stream->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    bool other_global = mine == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                        stream->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || other_global) {
      stream->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
      prohibited = true;
    }
  }
  return prohibited;
}

void DropHandleIfUnusedLocked(State& s, uint64_t handle_id) {
  auto it = s.handles.find(handle_id);
  if (it == s.handles.end() || it->second.refs > 0 || it->second.maps > 0) return;
  PhysicalMemory* memory = it->second.memory;
  s.handles.erase(it);
  if (--memory->handles > 0) return;
  ReleasePagesLocked(s.devices[memory->device], memory->pages);
  if (memory->memfd >= 0) close(memory->memfd);
  delete memory;
}

void ResetLocked(State& s) {
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    auto next = std::next(it);
    ReleaseAllocationLocked(s, it);
    it = next;
  }
  for (MemPool* pool : s.pools) {
    DestroyPoolContentsLocked(s, pool);
    if (pool->is_default) {
      int device = pool->device;
      *pool = MemPool();
      pool->device = device;
      pool->is_default = true;
    } else {
      pool->alive = false;
    }
  }
  for (auto& [address, mapping] : s.mappings) {
    if (!s.config.null_mode) {
      mmap(reinterpret_cast<void*>(address), mapping.size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    }
  }
  s.mappings.clear();
  for (auto& [address, size] : s.reservations) s.vmm_va.Free(address, size);
  s.reservations.clear();
  std::vector<uint64_t> ids;
  for (auto& [id, handle] : s.handles) ids.push_back(id);
  for (uint64_t id : ids) {
    s.handles[id].refs = 0;
    s.handles[id].maps = 0;
    DropHandleIfUnusedLocked(s, id);
  }
  for (Stream* stream : s.streams) stream->alive = false;
  for (Event* event : s.events) event->alive = false;
  for (Graph* graph : s.graphs) graph->alive = false;
  for (GraphExec* exec : s.graph_execs) exec->alive = false;
  for (HandleObject* object : s.objects) object->alive = false;
  for (Context* ctx : s.contexts) {
    if (ctx->alive) DeactivateContextLocked(s, ctx);
  }
  int old_count = s.device_count;
  s.config = ReadConfigFromEnvironment();
  ConfigureDevicesLocked(s);
  for (int i = 0; i < old_count; ++i) {
    Context& primary = s.devices[i].primary;
    if (!primary.alive) continue;
    if (i >= s.device_count) {
      primary.alive = false;
      primary.primary_refs = 0;
      continue;
    }
    primary.overhead_pages = PagesFor(s.config.ctx_overhead_bytes);
    if (!ChargePagesLocked(s.devices[i], primary.overhead_pages)) primary.overhead_pages = 0;
  }
  s.allocation_calls = 0;
}

}  // namespace fakecuda
