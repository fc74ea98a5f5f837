// Stream-ordered allocator: memory pools, cuMemAllocAsync/FromPoolAsync/FreeAsync.
//
// A pool reserves physical memory in 32 MiB chunks (larger requests round up to a multiple)
// and carves blocks at 512-byte granularity, first fit. A cuMemFreeAsync block stays pending
// (not reusable, still "used") until its stream is synchronized or queried, an event recorded
// after it is synchronized, or the context is synchronized. At those points every pool of the
// device gives idle chunks back until its reservation is at most its release threshold.
#include "gpu_state.h"

using namespace fakecuda;

namespace {

using Lock = std::lock_guard<std::mutex>;

bool NullMode() { return GetState().null_mode.load(std::memory_order_relaxed); }

MemPool* LivePool(State& s, CUmemoryPool handle) {
  MemPool* pool = reinterpret_cast<MemPool*>(handle);
  return s.pools.count(pool) && pool->alive ? pool : nullptr;
}

CUresult AllocateFromPoolLocked(State& s, MemPool* pool, Context* ctx, Stream* stream, size_t size,
                                CUdeviceptr* out) {
  Device& d = s.devices[pool->device];
  uint64_t rounded = RoundUp(size, kSmallAlignment);
  PoolChunk* chunk = nullptr;
  uint64_t address = 0;
  for (auto& candidate : pool->chunks) {
    address = candidate->ranges.Allocate(rounded, kSmallAlignment);
    if (address) {
      chunk = candidate.get();
      break;
    }
  }
  if (!chunk) {
    uint64_t chunk_bytes = RoundUp(rounded, kPoolChunkBytes);
    if (!ChargePagesLocked(d, chunk_bytes / kPageBytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t base = d.va.Allocate(chunk_bytes, kPageBytes);
    if (!base) {
      ReleasePagesLocked(d, chunk_bytes / kPageBytes);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CommitLocked(s, base, chunk_bytes);
    auto fresh = std::make_unique<PoolChunk>();
    fresh->address = base;
    fresh->size = chunk_bytes;
    fresh->ranges.Reset(base, chunk_bytes);
    chunk = fresh.get();
    pool->chunks.push_back(std::move(fresh));
    pool->reserved += chunk_bytes;
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
    address = chunk->ranges.Allocate(rounded, kSmallAlignment);
  }
  ++chunk->blocks;
  pool->used += rounded;
  pool->used_high = std::max(pool->used_high, pool->used);
  Allocation a;
  a.address = address;
  a.size = size;
  a.va_bytes = rounded;
  a.device = pool->device;
  a.kind = FAKECUDA_KIND_ASYNC;
  a.ctx = ctx;
  a.pool = pool;
  a.chunk = chunk;
  s.allocations[address] = a;
  ++stream->seq;
  *out = address;
  return CUDA_SUCCESS;
}

CUresult AllocAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool explicit_pool, bool from_pool,
                    CUstream hStream, bool per_thread) {
  State& s = GetState();
  if (NullMode()) {
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    *dptr = s.null_next.fetch_add(RoundUp(bytesize, kSmallAlignment), std::memory_order_relaxed);
    return CUDA_SUCCESS;
  }
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  Stream* stream = ResolveStreamLocked(s, ctx, hStream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  MemPool* pool = s.devices[ctx->device].current_pool;
  if (from_pool) {
    pool = LivePool(s, explicit_pool);
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
  }
  if (CountAllocationCallLocked(s)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    // Graph memory: owned by the graph being captured, charged now (the fake does not
    // defer physical backing to the first launch).
    CUresult r = AllocateLocked(s, ctx, bytesize, FAKECUDA_KIND_GRAPH, true, false, dptr);
    if (r != CUDA_SUCCESS) return r;
    s.allocations[*dptr].graph = stream->capture_graph;
    ++stream->capture_graph->nodes;
    return CUDA_SUCCESS;
  }
  return AllocateFromPoolLocked(s, pool, ctx, stream, bytesize, dptr);
}

CUresult FreeAsync(CUdeviceptr dptr, CUstream hStream, bool per_thread) {
  State& s = GetState();
  if (NullMode()) return dptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  Stream* stream = ResolveStreamLocked(s, ctx, hStream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  auto it = s.allocations.find(dptr);
  if (dptr == 0 || it == s.allocations.end() || it->second.kind == FAKECUDA_KIND_ASYNC_PENDING ||
      it->second.kind == FAKECUDA_KIND_IPC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Allocation& a = it->second;
  bool capturing = stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (a.kind == FAKECUDA_KIND_GRAPH) {
    if (capturing && a.graph == stream->capture_graph) {
      a.graph->freed_inside.push_back(a.address);  // freed when the graph goes away
      ++stream->capture_graph->nodes;
      return CUDA_SUCCESS;
    }
    ReleaseAllocationLocked(s, it);
    return CUDA_SUCCESS;
  }
  if (a.kind != FAKECUDA_KIND_ASYNC) {
    ReleaseAllocationLocked(s, it);  // cuMemAlloc memory freed in stream order: done at once
    return CUDA_SUCCESS;
  }
  a.kind = FAKECUDA_KIND_ASYNC_PENDING;
  a.free_stream = stream;
  a.free_seq = ++stream->seq;
  return CUDA_SUCCESS;
}

CUresult CheckLocation(State& s, const CUmemLocation* location, CUmemAllocationType type,
                       int* device) {
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!location || type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  if (location->id < 0 || location->id >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = location->id;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return AllocAsync(dptr, bytesize, nullptr, false, hStream, false);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return AllocAsync(dptr, bytesize, nullptr, false, hStream, true);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream) {
  return AllocAsync(dptr, bytesize, pool, true, hStream, false);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream) {
  return AllocAsync(dptr, bytesize, pool, true, hStream, true);
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(dptr, hStream, false);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(dptr, hStream, true);
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = reinterpret_cast<CUmemoryPool>(s.devices[dev].default_pool);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *pool = reinterpret_cast<CUmemoryPool>(s.devices[dev].current_pool);
  return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  MemPool* pool = LivePool(s, handle);
  if (!pool || pool->device != dev) return CUDA_ERROR_INVALID_VALUE;
  s.devices[dev].current_pool = pool;
  return CUDA_SUCCESS;
}

CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool_out, CUmemLocation* location,
                                CUmemAllocationType type) {
  State& s = GetState();
  Lock lock(s.mu);
  int device = 0;
  if (CUresult r = CheckLocation(s, location, type, &device); r != CUDA_SUCCESS) return r;
  if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
  *pool_out = reinterpret_cast<CUmemoryPool>(s.devices[device].default_pool);
  return CUDA_SUCCESS;
}

CUresult cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  State& s = GetState();
  Lock lock(s.mu);
  int device = 0;
  if (CUresult r = CheckLocation(s, location, type, &device); r != CUDA_SUCCESS) return r;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  *pool = reinterpret_cast<CUmemoryPool>(s.devices[device].current_pool);
  return CUDA_SUCCESS;
}

CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool handle) {
  State& s = GetState();
  Lock lock(s.mu);
  int device = 0;
  if (CUresult r = CheckLocation(s, location, type, &device); r != CUDA_SUCCESS) return r;
  MemPool* pool = LivePool(s, handle);
  if (!pool || pool->device != device) return CUDA_ERROR_INVALID_VALUE;
  s.devices[device].current_pool = pool;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool* pool_out, const CUmemPoolProps* props) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pool_out || !props) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = CheckLocation(s, &props->location, props->allocType, &device);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  MemPool* pool = new MemPool();
  pool->device = device;
  pool->handle_types = props->handleTypes;
  s.pools.insert(pool);
  *pool_out = reinterpret_cast<CUmemoryPool>(pool);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  MemPool* pool = LivePool(s, handle);
  if (!pool || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  // Outstanding blocks keep their chunks until freed; the rest goes back now.
  pool->alive = false;
  ReleaseIdleChunksLocked(s, pool, 0);
  Device& d = s.devices[pool->device];
  if (d.current_pool == pool) d.current_pool = d.default_pool;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool handle, CUmemPool_attribute attr, void* value) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  MemPool* pool = LivePool(s, handle);
  if (!pool || !value) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] =
          *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->reserved_high = pool->reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->used_high = pool->used;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemPoolGetAttribute(CUmemoryPool handle, CUmemPool_attribute attr, void* value) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  MemPool* pool = LivePool(s, handle);
  if (!pool || !value) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) =
          pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *out = pool->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *out = pool->reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *out = pool->reserved_high;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *out = pool->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *out = pool->used_high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemPoolTrimTo(CUmemoryPool handle, size_t minBytesToKeep) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  MemPool* pool = LivePool(s, handle);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  ReleaseIdleChunksLocked(s, pool, minBytesToKeep);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAccess(CUmemoryPool handle, const CUmemAccessDesc* map, size_t count) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!LivePool(s, handle) || (count && !map)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool handle,
                            CUmemLocation* location) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!flags || !location || !LivePool(s, handle)) return CUDA_ERROR_INVALID_VALUE;
  *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return CUDA_SUCCESS;
}

// Sharing pools between processes is outside what the fake simulates.
CUresult cuMemPoolExportToShareableHandle(void*, CUmemoryPool, CUmemAllocationHandleType,
                                          unsigned long long) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool*, void*, CUmemAllocationHandleType,
                                            unsigned long long) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData*, CUdeviceptr) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuMemPoolImportPointer(CUdeviceptr*, CUmemoryPool, CUmemPoolPtrExportData*) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
