// Wrappers of the tracked driver functions (driver_hook_list.inc, kind kTracked): plain and
// stream-ordered allocation, VMM, IPC and pool imports. Each calls the real function and, when
// it is the outermost hook on its thread, records one event (see recorder.h).
#include <cuda.h>
#include <cudaTypedefs.h>

#include "hooks/driver_api.h"
#include "hooks/hook_exports.h"
#include "hooks/hook_table.h"
#include "recording/recorder.h"

namespace fragscope::agent {
namespace {

// The legacy (CUDA 2.x) ABIs with 32-bit device pointers and sizes; cudaTypedefs.h only
// declares them for the driver's own build.
using DevicePtr32 = unsigned int;
using LegacyMemAlloc = CUresult (*)(DevicePtr32*, unsigned int);
using LegacyMemFree = CUresult (*)(DevicePtr32);
using LegacyMemAllocPitch = CUresult (*)(DevicePtr32*, unsigned int*, unsigned int, unsigned int,
                                         unsigned int);

template <typename Fn>
Fn Real(DriverHookId id) {
  return reinterpret_cast<Fn>(DriverReal(id));
}

Api ApiOf(DriverHookId id) { return HookApi(id); }

// Success -> AllocEvent, failure -> FailedAlloc.
void OnAcquire(DriverHookId id, CUresult r, uint64_t address, uint64_t size, MemoryKind kind,
               uint64_t stream = 0, uint64_t pool = 0, uint64_t pitch = 0,
               bool in_capture = false) {
  AllocInfo info{ApiOf(id), address, size, kind};
  info.stream = stream;
  info.pool = pool;
  info.pitch = pitch;
  info.in_capture = in_capture;
  RecordAcquire(info, r);
}

// First statement of a hot wrapper: the inner layer of a runtime call (recorder.h,
// InnerLayer) returns here. The rest of the wrapper (which records) is a separate noinline
// function, so this path does not pay for that body's frame and saved registers.
#define FRAGSCOPE_INNER_LAYER(id, Fn, ...)                                                    \
  if (InnerLayer()) {                                                                         \
    if (auto inner_real = reinterpret_cast<Fn>(DriverRealIfKnown(id)); inner_real != nullptr) \
      return CallInner(inner_real, __VA_ARGS__);                                              \
  }

// A plain release of an allocation (free, IPC close), outermost or not ready for the inner path.
template <typename Fn, typename Ptr>
[[gnu::noinline]] CUresult ReleaseHook(DriverHookId id, Fn real, Ptr ptr, uint64_t stream,
                                       CUresult (*call)(Fn, Ptr, uint64_t)) {
  HookCall hook;
  if (!hook.record() || ptr == 0) {
    CUresult r = call(real, ptr, stream);
    hook.Returned(r);
    return r;
  }
  PendingRelease release(static_cast<uint64_t>(ptr), ApiOf(id), stream);
  CUresult r = call(real, ptr, stream);
  hook.Returned(r);
  release.EndFree(ApiOf(id), r, stream);
  return r;
}

template <typename Fn, typename Ptr>
CUresult Release(DriverHookId id, Fn real, Ptr ptr, uint64_t stream,
                 CUresult (*call)(Fn, Ptr, uint64_t)) {
  if (InnerLayer()) return CallInner(call, real, ptr, stream);
  return ReleaseHook(id, real, ptr, stream, call);
}

[[gnu::noinline]] CUresult AllocAsync(DriverHookId id, CUdeviceptr* dptr, size_t size,
                                      CUstream stream, CUmemoryPool pool, bool from_pool) {
  HookCall hook;
  CUresult r;
  if (from_pool) {
    auto real = Real<PFN_cuMemAllocFromPoolAsync_v11020>(id);
    if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
    r = real(dptr, size, pool, stream);
  } else {
    auto real = Real<PFN_cuMemAllocAsync_v11020>(id);
    if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
    r = real(dptr, size, stream);
  }
  hook.Returned(r);
  if (hook.record()) {
    const bool capture =
        StreamCapturing(stream, id == DriverHookId::k_cuMemAllocAsync_ptsz ||
                                    id == DriverHookId::k_cuMemAllocFromPoolAsync_ptsz);
    uint64_t pool_id = from_pool ? reinterpret_cast<uint64_t>(pool) : CurrentPoolUnlessDormant();
    OnAcquire(id, r, r == CUDA_SUCCESS && dptr != nullptr ? *dptr : 0, size,
              capture ? MemoryKind::kGraph : MemoryKind::kPool, reinterpret_cast<uint64_t>(stream),
              pool_id, 0, capture);
  }
  return r;
}

// Not the inner layer (the wrappers test that first and keep no frame): the rest of
// cuMemFreeAsync's wrapper.
[[gnu::noinline]] CUresult FreeAsync(DriverHookId id, CUdeviceptr dptr, CUstream stream) {
  auto real = Real<PFN_cuMemFreeAsync_v11020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return Release<PFN_cuMemFreeAsync_v11020, CUdeviceptr>(
      id, real, dptr, reinterpret_cast<uint64_t>(stream),
      [](PFN_cuMemFreeAsync_v11020 f, CUdeviceptr p, uint64_t s) {
        return f(p, reinterpret_cast<CUstream>(s));
      });
}

CUresult IpcOpen(DriverHookId id, CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  HookCall hook;
  auto real = Real<PFN_cuIpcOpenMemHandle_v11000>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(pdptr, handle, flags);
  hook.Returned(r);
  if (hook.record()) {
    uint64_t address = r == CUDA_SUCCESS && pdptr != nullptr ? *pdptr : 0;
    CUdeviceptr base = 0;
    size_t size = 0;
    const DriverCalls& d = Driver();
    if (address != 0 && d.mem_get_address_range != nullptr && AgentMayCallDriver()) {
      d.mem_get_address_range(&base, &size, address);
    }
    OnAcquire(id, r, address, size, MemoryKind::kIpcImport);
  }
  return r;
}

// MapEvent / HandleEvent records, stack captured now.
EventRecord MapRecord(DriverHookId id, MapOp op) {
  const bool release = op == MapOp::kUnmap || op == MapOp::kFreeRange;
  EventRecord r = release ? NewReleaseRecord(RecordType::kMap, ApiOf(id))
                          : NewRecord(RecordType::kMap, ApiOf(id));
  r.op = static_cast<uint8_t>(op);
  return r;
}
EventRecord HandleRecord(DriverHookId id, HandleOp op) {
  EventRecord r = op == HandleOp::kRelease ? NewReleaseRecord(RecordType::kHandle, ApiOf(id))
                                           : NewRecord(RecordType::kHandle, ApiOf(id));
  r.op = static_cast<uint8_t>(op);
  return r;
}

// Drops one mapping reference of `handle` (unmapped by the event `seq`), erasing the handle
// once released and unmapped.
void UnmapHandle(uint64_t handle, uint64_t seq) {
  LiveTable& live = Agent().live;
  bool gone = false;
  live.Update(LiveClass::kHandle, handle, [&](LiveEntry& e) {
    --e.maps;
    gone = e.maps <= 0 && e.refs <= 0;
    return true;
  });
  size_t index = 0;
  if (gone && live.Erase(LiveClass::kHandle, handle, nullptr, &index)) {
    live.SetRemovedSeq(index, seq);
  }
}

int32_t HandleDevice(uint64_t handle) {
  LiveEntry e;
  return Agent().live.Find(LiveClass::kHandle, handle, &e) ? e.device : -1;
}

}  // namespace

// --- plain allocations ---

namespace {
[[gnu::noinline]] CUresult MemAllocHook(CUdeviceptr* dptr, size_t bytesize) {
  HookCall hook;
  auto real = Real<PFN_cuMemAlloc_v3020>(DriverHookId::k_cuMemAlloc_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(dptr, bytesize);
  hook.Returned(r);
  if (hook.record()) {
    OnAcquire(DriverHookId::k_cuMemAlloc_v2, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,
              MemoryKind::kDevice);
  }
  return r;
}
}  // namespace

FRAGSCOPE_DRIVER_WRAPPER(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAlloc_v2, PFN_cuMemAlloc_v3020, dptr, bytesize)
  return MemAllocHook(dptr, bytesize);
}

// Legacy ABI: 32-bit pointer and size.
FRAGSCOPE_DRIVER_WRAPPER(cuMemAlloc, (DevicePtr32 * dptr, unsigned int bytesize)) {
  if (PassThroughInner()) return Real<LegacyMemAlloc>(DriverHookId::k_cuMemAlloc)(dptr, bytesize);
  HookCall hook;
  auto real = Real<LegacyMemAlloc>(DriverHookId::k_cuMemAlloc);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(dptr, bytesize);
  hook.Returned(r);
  if (hook.record()) {
    OnAcquire(DriverHookId::k_cuMemAlloc, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,
              MemoryKind::kDevice);
  }
  return r;
}

namespace {
// The rest of cuMemFree_v2's wrapper, when it is not the inner layer.
[[gnu::noinline]] CUresult MemFreeHook(CUdeviceptr dptr) {
  auto real = Real<PFN_cuMemFree_v3020>(DriverHookId::k_cuMemFree_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return Release<PFN_cuMemFree_v3020, CUdeviceptr>(
      DriverHookId::k_cuMemFree_v2, real, dptr, 0,
      [](PFN_cuMemFree_v3020 f, CUdeviceptr p, uint64_t) { return f(p); });
}
}  // namespace

FRAGSCOPE_DRIVER_WRAPPER(cuMemFree_v2, (CUdeviceptr dptr)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemFree_v2, PFN_cuMemFree_v3020, dptr)
  return MemFreeHook(dptr);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemFree, (DevicePtr32 dptr)) {
  auto real = Real<LegacyMemFree>(DriverHookId::k_cuMemFree);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return Release<LegacyMemFree, DevicePtr32>(
      DriverHookId::k_cuMemFree, real, dptr, 0,
      [](LegacyMemFree f, DevicePtr32 p, uint64_t) { return f(p); });
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocPitch_v2, (CUdeviceptr * dptr, size_t* pitch, size_t width,
                                              size_t height, unsigned int element_size)) {
  HookCall hook;
  auto real = Real<PFN_cuMemAllocPitch_v3020>(DriverHookId::k_cuMemAllocPitch_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(dptr, pitch, width, height, element_size);
  hook.Returned(r);
  if (hook.record()) {
    bool ok = r == CUDA_SUCCESS && dptr != nullptr && pitch != nullptr;
    uint64_t p = ok ? *pitch : 0;
    OnAcquire(DriverHookId::k_cuMemAllocPitch_v2, r, ok ? *dptr : 0,
              ok ? p * height : width * height, MemoryKind::kPitched, 0, 0, p);
  }
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocPitch,
                         (DevicePtr32 * dptr, unsigned int* pitch, unsigned int width,
                          unsigned int height, unsigned int element_size)) {
  HookCall hook;
  auto real = Real<LegacyMemAllocPitch>(DriverHookId::k_cuMemAllocPitch);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(dptr, pitch, width, height, element_size);
  hook.Returned(r);
  if (hook.record()) {
    bool ok = r == CUDA_SUCCESS && dptr != nullptr && pitch != nullptr;
    uint64_t p = ok ? *pitch : 0;
    OnAcquire(DriverHookId::k_cuMemAllocPitch, r, ok ? *dptr : 0,
              ok ? p * height : uint64_t{width} * height, MemoryKind::kPitched, 0, 0, p);
  }
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocManaged,
                         (CUdeviceptr * dptr, size_t bytesize, unsigned int flags)) {
  HookCall hook;
  auto real = Real<PFN_cuMemAllocManaged_v6000>(DriverHookId::k_cuMemAllocManaged);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(dptr, bytesize, flags);
  hook.Returned(r);
  if (hook.record()) {
    OnAcquire(DriverHookId::k_cuMemAllocManaged, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,
              MemoryKind::kManaged);
  }
  return r;
}

// --- stream-ordered ---

FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAllocAsync, PFN_cuMemAllocAsync_v11020, dptr, bytesize,
                        s)
  return AllocAsync(DriverHookId::k_cuMemAllocAsync, dptr, bytesize, s, nullptr, false);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020, dptr,
                        bytesize, s)
  return AllocAsync(DriverHookId::k_cuMemAllocAsync_ptsz, dptr, bytesize, s, nullptr, false);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocFromPoolAsync,
                         (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020,
                        dptr, bytesize, pool, s)
  return AllocAsync(DriverHookId::k_cuMemAllocFromPoolAsync, dptr, bytesize, s, pool, true);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocFromPoolAsync_ptsz,
                         (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAllocFromPoolAsync_ptsz,
                        PFN_cuMemAllocFromPoolAsync_v11020, dptr, bytesize, pool, s)
  return AllocAsync(DriverHookId::k_cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, s, pool, true);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemFreeAsync, (CUdeviceptr dptr, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemFreeAsync, PFN_cuMemFreeAsync_v11020, dptr, s)
  return FreeAsync(DriverHookId::k_cuMemFreeAsync, dptr, s);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020, dptr, s)
  return FreeAsync(DriverHookId::k_cuMemFreeAsync_ptsz, dptr, s);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemPoolTrimTo, (CUmemoryPool pool, size_t min_bytes_to_keep)) {
  HookCall hook;
  auto real = Real<PFN_cuMemPoolTrimTo_v11020>(DriverHookId::k_cuMemPoolTrimTo);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(pool, min_bytes_to_keep);
  hook.Returned(r);
  if (hook.record() && r == CUDA_SUCCESS) {
    SamplePool(CurrentDevice(), reinterpret_cast<uint64_t>(pool));
  }
  return r;
}

// --- virtual memory management ---

FRAGSCOPE_DRIVER_WRAPPER(cuMemAddressReserve, (CUdeviceptr * ptr, size_t size, size_t alignment,
                                               CUdeviceptr addr, unsigned long long flags)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemAddressReserve;
  auto real = Real<PFN_cuMemAddressReserve_v10020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(ptr, size, alignment, addr, flags);
  hook.Returned(r);
  if (!hook.record()) return r;
  if (r != CUDA_SUCCESS || ptr == nullptr) {
    RecordFailure(FailureInfo{ApiOf(id), r, size});
    return r;
  }
  EventRecord rec = MapRecord(id, MapOp::kReserve);
  rec.address = *ptr;
  rec.size = size;
  rec.aux1 = alignment;
  LiveEntry e = ZeroLiveEntry();
  e.cls = LiveClass::kReservation;
  e.api = ApiOf(id);
  e.device = -1;
  e.address = *ptr;
  e.size = size;
  e.stack_id = rec.stack_id;
  rec.seq = InsertLive(e);
  Submit(rec);
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemAddressFree, (CUdeviceptr ptr, size_t size)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemAddressFree;
  auto real = Real<PFN_cuMemAddressFree_v10020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (!hook.record()) {
    CUresult r = real(ptr, size);
    hook.Returned(r);
    return r;
  }
  PendingRelease release(LiveClass::kReservation, ptr);
  CUresult r = real(ptr, size);
  hook.Returned(r);
  if (r != CUDA_SUCCESS) release.Restore();
  EventRecord rec = MapRecord(id, MapOp::kFreeRange);
  rec.seq = release.seq();
  rec.result = r;
  rec.address = ptr;
  rec.size = size;
  Submit(rec);
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemCreate, (CUmemGenericAllocationHandle * handle, size_t size,
                                       const CUmemAllocationProp* prop, unsigned long long flags)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemCreate;
  auto real = Real<PFN_cuMemCreate_v10020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(handle, size, prop, flags);
  hook.Returned(r);
  if (!hook.record()) return r;
  int32_t device = prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                       ? prop->location.id
                       : -1;
  if (r != CUDA_SUCCESS || handle == nullptr) {
    FailureInfo info{ApiOf(id), r, size, device};
    RecordFailure(info);
    return r;
  }
  EventRecord rec = HandleRecord(id, HandleOp::kCreate);
  rec.pool = *handle;
  rec.size = size;
  rec.device = device;
  rec.aux1 = prop != nullptr ? static_cast<uint64_t>(prop->requestedHandleTypes) : 0;
  LiveEntry e = ZeroLiveEntry();
  e.cls = LiveClass::kHandle;
  e.api = ApiOf(id);
  e.device = device;
  e.address = *handle;
  e.size = size;
  e.stack_id = rec.stack_id;
  e.refs = 1;
  rec.seq = InsertLive(e);
  Submit(rec);
  MaybeSampleMemInfo(device);
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemRelease, (CUmemGenericAllocationHandle handle)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemRelease;
  auto real = Real<PFN_cuMemRelease_v10020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (!hook.record()) {
    CUresult r = real(handle);
    hook.Returned(r);
    return r;
  }
  // The physical memory goes once the last reference is released and nothing maps it.
  LiveTable& live = Agent().live;
  LiveEntry before{};
  size_t index = 0;
  bool known = live.Find(LiveClass::kHandle, handle, &before);
  bool erased = known && before.refs <= 1 && before.maps <= 0 &&
                live.Erase(LiveClass::kHandle, handle, nullptr, &index);
  if (known && !erased) {
    live.Update(LiveClass::kHandle, handle, [](LiveEntry& e) {
      --e.refs;
      return true;
    });
  }
  EventRecord rec = HandleRecord(id, HandleOp::kRelease);
  rec.seq = NextSeq();
  if (erased) live.SetRemovedSeq(index, rec.seq);
  CUresult r = real(handle);
  hook.Returned(r);
  if (r != CUDA_SUCCESS && known) {
    if (erased) {
      live.Insert(before);
    } else {
      live.Update(LiveClass::kHandle, handle, [](LiveEntry& e) {
        ++e.refs;
        return true;
      });
    }
  }
  rec.result = r;
  rec.pool = handle;
  rec.size = known ? before.size : 0;
  rec.device = known ? before.device : -1;
  Submit(rec);
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemMap,
                         (CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemMap;
  auto real = Real<PFN_cuMemMap_v10020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(ptr, size, offset, handle, flags);
  hook.Returned(r);
  if (!hook.record()) return r;
  if (r != CUDA_SUCCESS) {
    FailureInfo info{ApiOf(id), r, size, HandleDevice(handle)};
    RecordFailure(info);
    return r;
  }
  // The handle's device and its mapping count in one claim of its slot (a separate lookup
  // was a second compare-and-swap per map).
  int32_t device = -1;
  Agent().live.Update(LiveClass::kHandle, handle, [&device](LiveEntry& e) {
    ++e.maps;
    device = e.device;
    return true;
  });
  EventRecord rec = MapRecord(id, MapOp::kMap);
  rec.address = ptr;
  rec.size = size;
  rec.aux0 = offset;
  rec.pool = handle;
  rec.device = device;
  LiveEntry e = ZeroLiveEntry();
  e.cls = LiveClass::kMapping;
  e.api = ApiOf(id);
  e.device = device;
  e.address = ptr;
  e.size = size;
  e.offset = offset;
  e.handle = handle;
  e.stack_id = rec.stack_id;
  rec.seq = InsertLive(e);
  Submit(rec);
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemUnmap, (CUdeviceptr ptr, size_t size)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemUnmap;
  auto real = Real<PFN_cuMemUnmap_v10020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (!hook.record()) {
    CUresult r = real(ptr, size);
    hook.Returned(r);
    return r;
  }
  // The range may cover several mappings laid end to end.
  constexpr int kMaxMappings = 64;
  LiveEntry removed[kMaxMappings];
  size_t indexes[kMaxMappings];
  int count = 0;
  LiveTable& live = Agent().live;
  for (uint64_t at = ptr; at < ptr + size && count < kMaxMappings;) {
    if (!live.Erase(LiveClass::kMapping, at, &removed[count], &indexes[count])) break;
    at += removed[count].size > 0 ? removed[count].size : size;
    ++count;
  }
  EventRecord rec = MapRecord(id, MapOp::kUnmap);
  rec.seq = NextSeq();
  for (int i = 0; i < count; ++i) live.SetRemovedSeq(indexes[i], rec.seq);
  CUresult r = real(ptr, size);
  hook.Returned(r);
  for (int i = 0; i < count; ++i) {
    if (r == CUDA_SUCCESS) {
      UnmapHandle(removed[i].handle, rec.seq);
    } else {
      live.Insert(removed[i]);
    }
  }
  rec.result = r;
  rec.address = ptr;
  rec.size = size;
  rec.pool = count > 0 ? removed[0].handle : 0;
  rec.device = count > 0 ? removed[0].device : -1;
  Submit(rec);
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemRetainAllocationHandle,
                         (CUmemGenericAllocationHandle * handle, void* addr)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemRetainAllocationHandle;
  auto real = Real<PFN_cuMemRetainAllocationHandle_v11000>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(handle, addr);
  hook.Returned(r);
  if (!hook.record()) return r;
  EventRecord rec = HandleRecord(id, HandleOp::kRetain);
  rec.result = r;
  rec.address = reinterpret_cast<uint64_t>(addr);
  if (r == CUDA_SUCCESS && handle != nullptr) {
    rec.pool = *handle;
    LiveEntry e = ZeroLiveEntry();
    if (Agent().live.Update(LiveClass::kHandle, *handle, [&](LiveEntry& x) {
          ++x.refs;
          e = x;
          return true;
        })) {
      rec.size = e.size;
      rec.device = e.device;
    }
  }
  rec.seq = NextSeq();
  Submit(rec);
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemExportToShareableHandle,
                         (void* shareable_handle, CUmemGenericAllocationHandle handle,
                          CUmemAllocationHandleType handle_type, unsigned long long flags)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemExportToShareableHandle;
  auto real = Real<PFN_cuMemExportToShareableHandle_v10020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(shareable_handle, handle, handle_type, flags);
  hook.Returned(r);
  if (!hook.record()) return r;
  EventRecord rec = HandleRecord(id, HandleOp::kExport);
  rec.result = r;
  rec.pool = handle;
  rec.aux1 = static_cast<uint64_t>(handle_type);
  LiveEntry e;
  if (Agent().live.Find(LiveClass::kHandle, handle, &e)) {
    rec.size = e.size;
    rec.device = e.device;
  }
  rec.seq = NextSeq();
  Submit(rec);
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemImportFromShareableHandle,
                         (CUmemGenericAllocationHandle * handle, void* os_handle,
                          CUmemAllocationHandleType handle_type)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemImportFromShareableHandle;
  auto real = Real<PFN_cuMemImportFromShareableHandle_v10020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(handle, os_handle, handle_type);
  hook.Returned(r);
  if (!hook.record()) return r;
  if (r != CUDA_SUCCESS || handle == nullptr) {
    RecordFailure(FailureInfo{ApiOf(id), r});
    return r;
  }
  EventRecord rec = HandleRecord(id, HandleOp::kImport);
  rec.pool = *handle;
  rec.aux1 = static_cast<uint64_t>(handle_type);
  LiveEntry e = ZeroLiveEntry();
  e.cls = LiveClass::kHandle;
  e.api = ApiOf(id);
  e.flags = kLiveImported;
  e.device = -1;
  e.address = *handle;
  e.stack_id = rec.stack_id;
  e.refs = 1;
  rec.seq = InsertLive(e);
  Submit(rec);
  return r;
}

// --- imports of another process's memory ---

FRAGSCOPE_DRIVER_WRAPPER(cuIpcOpenMemHandle,
                         (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int flags)) {
  return IpcOpen(DriverHookId::k_cuIpcOpenMemHandle, pdptr, handle, flags);
}
FRAGSCOPE_DRIVER_WRAPPER(cuIpcOpenMemHandle_v2,
                         (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int flags)) {
  return IpcOpen(DriverHookId::k_cuIpcOpenMemHandle_v2, pdptr, handle, flags);
}

FRAGSCOPE_DRIVER_WRAPPER(cuIpcCloseMemHandle, (CUdeviceptr dptr)) {
  auto real = Real<PFN_cuIpcCloseMemHandle_v4010>(DriverHookId::k_cuIpcCloseMemHandle);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return Release<PFN_cuIpcCloseMemHandle_v4010, CUdeviceptr>(
      DriverHookId::k_cuIpcCloseMemHandle, real, dptr, 0,
      [](PFN_cuIpcCloseMemHandle_v4010 f, CUdeviceptr p, uint64_t) { return f(p); });
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemPoolImportPointer, (CUdeviceptr * ptr_out, CUmemoryPool pool,
                                                  CUmemPoolPtrExportData* share_data)) {
  HookCall hook;
  const DriverHookId id = DriverHookId::k_cuMemPoolImportPointer;
  auto real = Real<PFN_cuMemPoolImportPointer_v11020>(id);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(ptr_out, pool, share_data);
  hook.Returned(r);
  if (hook.record()) {
    uint64_t address = r == CUDA_SUCCESS && ptr_out != nullptr ? *ptr_out : 0;
    CUdeviceptr base = 0;
    size_t size = 0;
    const DriverCalls& d = Driver();
    if (address != 0 && d.mem_get_address_range != nullptr && AgentMayCallDriver()) {
      d.mem_get_address_range(&base, &size, address);
    }
    OnAcquire(id, r, address, size, MemoryKind::kIpcImport, 0, reinterpret_cast<uint64_t>(pool));
  }
  return r;
}

}  // namespace fragscope::agent
