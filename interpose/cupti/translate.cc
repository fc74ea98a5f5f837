#include "translate.h"

#include <cuda_runtime_api.h>

#include <cstring>

namespace fragscope::cupti {
namespace {

using agent::Api;
using agent::EventRecord;
using agent::HandleOp;
using agent::MapOp;
using agent::MemoryKind;
using agent::RecordType;

// How a tracked function's parameters become a record.
enum class Fn : uint8_t {
  kAlloc,             // cuMemAlloc_v2
  kAllocLegacy,       // cuMemAlloc (32-bit ABI)
  kAllocPitch,        // cuMemAllocPitch_v2
  kAllocPitchLegacy,  // cuMemAllocPitch
  kAllocManaged,      // cuMemAllocManaged
  kAllocAsync,        // cuMemAllocAsync(_ptsz)
  kAllocFromPool,     // cuMemAllocFromPoolAsync(_ptsz)
  kFree,              // cuMemFree_v2
  kFreeLegacy,        // cuMemFree
  kFreeAsync,         // cuMemFreeAsync(_ptsz)
  kTrim,              // cuMemPoolTrimTo
  kReserve,           // cuMemAddressReserve
  kAddressFree,       // cuMemAddressFree
  kCreate,            // cuMemCreate
  kRelease,           // cuMemRelease
  kMap,               // cuMemMap
  kUnmap,             // cuMemUnmap
  kRetain,            // cuMemRetainAllocationHandle
  kImport,            // cuMemImportFromShareableHandle
  kIpcOpen,           // cuIpcOpenMemHandle(_v2)
  kIpcClose,          // cuIpcCloseMemHandle
  kPoolImport,        // cuMemPoolImportPointer
  kFailureOnly,       // cuLaunchKernel, cuModuleLoad*, ...: only a failure is an event
  kRtMalloc,          // cudaMalloc
  kRtMallocPitch,     // cudaMallocPitch
  kRtMalloc3D,        // cudaMalloc3D
  kRtMallocManaged,   // cudaMallocManaged
  kRtMallocAsync,     // cudaMallocAsync(_ptsz)
  kRtMallocFromPool,  // cudaMallocFromPoolAsync(_ptsz)
  kRtFree,            // cudaFree
  kRtFreeAsync,       // cudaFreeAsync(_ptsz)
  kRtTrim,            // cudaMemPoolTrimTo
};

struct Tracked {
  Api api;
  Fn fn;
};

// X(cbid suffix, Api, Fn) for the driver domain. The legacy ABIs and _ptsz variants keep their
// own Api where fragscope.proto has one, as the preload agent names them.
#define FRAGSCOPE_CUPTI_DRIVER(X)                                                  \
  X(cuMemAlloc_v2, cuMemAlloc_v2, kAlloc)                                          \
  X(cuMemAlloc, cuMemAlloc, kAllocLegacy)                                          \
  X(cuMemAllocPitch_v2, cuMemAllocPitch_v2, kAllocPitch)                           \
  X(cuMemAllocPitch, cuMemAllocPitch, kAllocPitchLegacy)                           \
  X(cuMemAllocManaged, cuMemAllocManaged, kAllocManaged)                           \
  X(cuMemAllocAsync, cuMemAllocAsync, kAllocAsync)                                 \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync_ptsz, kAllocAsync)                       \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, kAllocFromPool)              \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_ptsz, kAllocFromPool)    \
  X(cuMemFree_v2, cuMemFree_v2, kFree)                                             \
  X(cuMemFree, cuMemFree, kFreeLegacy)                                             \
  X(cuMemFreeAsync, cuMemFreeAsync, kFreeAsync)                                    \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync_ptsz, kFreeAsync)                          \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo, kTrim)                                       \
  X(cuMemAddressReserve, cuMemAddressReserve, kReserve)                            \
  X(cuMemAddressFree, cuMemAddressFree, kAddressFree)                              \
  X(cuMemCreate, cuMemCreate, kCreate)                                             \
  X(cuMemRelease, cuMemRelease, kRelease)                                          \
  X(cuMemMap, cuMemMap, kMap)                                                      \
  X(cuMemUnmap, cuMemUnmap, kUnmap)                                                \
  X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, kRetain)             \
  X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, kImport)       \
  X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, kIpcOpen)                              \
  X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, kIpcOpen)                           \
  X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, kIpcClose)                           \
  X(cuMemPoolImportPointer, cuMemPoolImportPointer, kPoolImport)                   \
  X(cuLaunchKernel, cuLaunchKernel, kFailureOnly)                                  \
  X(cuLaunchKernel_ptsz, cuLaunchKernel, kFailureOnly)                             \
  X(cuModuleLoad, cuModuleLoad, kFailureOnly)                                      \
  X(cuModuleLoadData, cuModuleLoadData, kFailureOnly)                              \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, kFailureOnly)                          \
  X(cuModuleLoadFatBinary, cuModuleLoadFatBinary, kFailureOnly)                    \
  X(cuLibraryLoadData, cuLibraryLoadData, kFailureOnly)                            \
  X(cuLibraryLoadFromFile, cuLibraryLoadFromFile, kFailureOnly)                    \
  X(cuGraphInstantiate_v2, cuGraphInstantiate, kFailureOnly)                       \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, kFailureOnly)        \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, kFailureOnly)      \
  X(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, kFailureOnly) \
  X(cuGraphUpload, cuGraphUpload, kFailureOnly)                                    \
  X(cuGraphUpload_ptsz, cuGraphUpload, kFailureOnly)                               \
  X(cuCtxCreate_v2, cuCtxCreate, kFailureOnly)                                     \
  X(cuCtxCreate_v3, cuCtxCreate, kFailureOnly)                                     \
  X(cuCtxCreate_v4, cuCtxCreate, kFailureOnly)                                     \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, kFailureOnly)

#define FRAGSCOPE_CUPTI_RUNTIME(X)                                                   \
  X(cudaMalloc_v3020, cudaMalloc, kRtMalloc)                                         \
  X(cudaMallocPitch_v3020, cudaMallocPitch, kRtMallocPitch)                          \
  X(cudaMalloc3D_v3020, cudaMalloc3D, kRtMalloc3D)                                   \
  X(cudaMallocManaged_v6000, cudaMallocManaged, kRtMallocManaged)                    \
  X(cudaMallocAsync_v11020, cudaMallocAsync, kRtMallocAsync)                         \
  X(cudaMallocAsync_ptsz_v11020, cudaMallocAsync, kRtMallocAsync)                    \
  X(cudaMallocFromPoolAsync_v11020, cudaMallocFromPoolAsync, kRtMallocFromPool)      \
  X(cudaMallocFromPoolAsync_ptsz_v11020, cudaMallocFromPoolAsync, kRtMallocFromPool) \
  X(cudaFree_v3020, cudaFree, kRtFree)                                               \
  X(cudaFreeAsync_v11020, cudaFreeAsync, kRtFreeAsync)                               \
  X(cudaFreeAsync_ptsz_v11020, cudaFreeAsync, kRtFreeAsync)                          \
  X(cudaMemPoolTrimTo_v11020, cudaMemPoolTrimTo, kRtTrim)

bool Find(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, Tracked* out) {
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
#define FRAGSCOPE_CASE(cb, api, fn)       \
  case CUPTI_DRIVER_TRACE_CBID_##cb:      \
    *out = Tracked{Api::k_##api, Fn::fn}; \
    return true;
      FRAGSCOPE_CUPTI_DRIVER(FRAGSCOPE_CASE)
#undef FRAGSCOPE_CASE
      default:
        return false;
    }
  }
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
#define FRAGSCOPE_CASE(cb, api, fn)       \
  case CUPTI_RUNTIME_TRACE_CBID_##cb:     \
    *out = Tracked{Api::k_##api, Fn::fn}; \
    return true;
      FRAGSCOPE_CUPTI_RUNTIME(FRAGSCOPE_CASE)
#undef FRAGSCOPE_CASE
      default:
        return false;
    }
  }
  return false;
}

bool IsRelease(Fn fn) {
  switch (fn) {
    case Fn::kFree:
    case Fn::kFreeLegacy:
    case Fn::kFreeAsync:
    case Fn::kAddressFree:
    case Fn::kRelease:
    case Fn::kUnmap:
    case Fn::kIpcClose:
    case Fn::kRtFree:
    case Fn::kRtFreeAsync:
      return true;
    default:
      return false;
  }
}

// The address a release names (0: nothing to release, e.g. cudaFree(NULL): not an event).
uint64_t ReleaseKey(Fn fn, const void* p) {
  switch (fn) {
    case Fn::kFree:
      return static_cast<const cuMemFree_v2_params*>(p)->dptr;
    case Fn::kFreeLegacy:
      return static_cast<const cuMemFree_params*>(p)->dptr;
    case Fn::kFreeAsync:
      return static_cast<const cuMemFreeAsync_params*>(p)->dptr;
    case Fn::kAddressFree:
      return static_cast<const cuMemAddressFree_params*>(p)->ptr;
    case Fn::kRelease:
      return static_cast<const cuMemRelease_params*>(p)->handle;
    case Fn::kUnmap:
      return static_cast<const cuMemUnmap_params*>(p)->ptr;
    case Fn::kIpcClose:
      return static_cast<const cuIpcCloseMemHandle_params*>(p)->dptr;
    case Fn::kRtFree:
      return reinterpret_cast<uint64_t>(static_cast<const cudaFree_v3020_params*>(p)->devPtr);
    case Fn::kRtFreeAsync:
      return reinterpret_cast<uint64_t>(static_cast<const cudaFreeAsync_v11020_params*>(p)->devPtr);
    default:
      return 0;
  }
}

template <typename T>
uint64_t Deref(const T* p) {
  return p != nullptr ? static_cast<uint64_t>(*p) : 0;
}
uint64_t DerefPtr(void* const* p) { return p != nullptr ? reinterpret_cast<uint64_t>(*p) : 0; }
uint64_t Handle(const void* h) { return reinterpret_cast<uint64_t>(h); }

EventRecord New(RecordType type, Api api) {
  EventRecord r;
  std::memset(&r, 0, sizeof(r));
  r.type = type;
  r.api = api;
  r.device = -1;
  return r;
}

// An acquire's outcome: AllocEvent when it succeeded with an address, FailedAlloc when it failed,
// nothing for a successful call that allocated nothing (size 0).
struct Acquire {
  uint64_t address = 0;
  uint64_t size = 0;
  MemoryKind kind = MemoryKind::kDevice;
  uint64_t stream = 0;
  uint64_t pool = 0;
  uint64_t pitch = 0;
  int32_t device = -1;
};

bool EmitAcquire(Api api, int32_t result, const Acquire& a, CallbackTranslation* t) {
  if (result == 0) {
    if (a.address == 0) return false;
    t->record = New(RecordType::kAlloc, api);
    t->record.address = a.address;
    t->record.aux0 = a.pitch;
  } else {
    t->record = New(RecordType::kFailed, api);
  }
  t->record.result = result;
  t->record.size = a.size;
  t->record.kind = a.kind;
  t->record.stream = a.stream;
  t->record.pool = a.pool;
  t->record.device = a.device;
  t->action = CallbackAction::kEmit;
  return true;
}

// Builds the exit record of an outermost tracked call; false when the call is not an event.
bool Build(const Tracked& tracked, const void* p, int32_t result, CallbackTranslation* t) {
  const Api api = tracked.api;
  Acquire a;
  switch (tracked.fn) {
    case Fn::kAlloc: {
      auto* q = static_cast<const cuMemAlloc_v2_params*>(p);
      a.address = result == 0 ? Deref(q->dptr) : 0;
      a.size = q->bytesize;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kAllocLegacy: {
      auto* q = static_cast<const cuMemAlloc_params*>(p);
      a.address = result == 0 ? Deref(q->dptr) : 0;
      a.size = q->bytesize;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kAllocPitch: {
      auto* q = static_cast<const cuMemAllocPitch_v2_params*>(p);
      a.kind = MemoryKind::kPitched;
      a.pitch = result == 0 ? Deref(q->pPitch) : 0;
      a.address = result == 0 ? Deref(q->dptr) : 0;
      a.size = result == 0 ? a.pitch * q->Height : uint64_t{q->WidthInBytes} * q->Height;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kAllocPitchLegacy: {
      auto* q = static_cast<const cuMemAllocPitch_params*>(p);
      a.kind = MemoryKind::kPitched;
      a.pitch = result == 0 ? Deref(q->pPitch) : 0;
      a.address = result == 0 ? Deref(q->dptr) : 0;
      a.size = result == 0 ? a.pitch * q->Height : uint64_t{q->WidthInBytes} * q->Height;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kAllocManaged: {
      auto* q = static_cast<const cuMemAllocManaged_params*>(p);
      a.kind = MemoryKind::kManaged;
      a.address = result == 0 ? Deref(q->dptr) : 0;
      a.size = q->bytesize;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kAllocAsync: {
      // Same layout for the _ptsz variant.
      auto* q = static_cast<const cuMemAllocAsync_params*>(p);
      a.kind = MemoryKind::kPool;
      a.address = result == 0 ? Deref(q->dptr) : 0;
      a.size = q->bytesize;
      a.stream = Handle(q->hStream);
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kAllocFromPool: {
      auto* q = static_cast<const cuMemAllocFromPoolAsync_params*>(p);
      a.kind = MemoryKind::kPool;
      a.address = result == 0 ? Deref(q->dptr) : 0;
      a.size = q->bytesize;
      a.stream = Handle(q->hStream);
      a.pool = Handle(q->pool);
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kRtMalloc: {
      auto* q = static_cast<const cudaMalloc_v3020_params*>(p);
      a.address = result == 0 ? DerefPtr(q->devPtr) : 0;
      a.size = q->size;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kRtMallocPitch: {
      auto* q = static_cast<const cudaMallocPitch_v3020_params*>(p);
      a.kind = MemoryKind::kPitched;
      a.pitch = result == 0 ? Deref(q->pitch) : 0;
      a.address = result == 0 ? DerefPtr(q->devPtr) : 0;
      a.size = result == 0 ? a.pitch * q->height : uint64_t{q->width} * q->height;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kRtMalloc3D: {
      auto* q = static_cast<const cudaMalloc3D_v3020_params*>(p);
      a.kind = MemoryKind::kPitched;
      const cudaExtent& e = q->extent;
      if (result == 0 && q->pitchedDevPtr != nullptr) {
        a.address = reinterpret_cast<uint64_t>(q->pitchedDevPtr->ptr);
        a.pitch = q->pitchedDevPtr->pitch;
        a.size = a.pitch * e.height * e.depth;
      } else {
        a.size = uint64_t{e.width} * e.height * e.depth;
      }
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kRtMallocManaged: {
      auto* q = static_cast<const cudaMallocManaged_v6000_params*>(p);
      a.kind = MemoryKind::kManaged;
      a.address = result == 0 ? DerefPtr(q->devPtr) : 0;
      a.size = q->size;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kRtMallocAsync: {
      auto* q = static_cast<const cudaMallocAsync_v11020_params*>(p);
      a.kind = MemoryKind::kPool;
      a.address = result == 0 ? DerefPtr(q->devPtr) : 0;
      a.size = q->size;
      a.stream = Handle(q->hStream);
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kRtMallocFromPool: {
      auto* q = static_cast<const cudaMallocFromPoolAsync_v11020_params*>(p);
      a.kind = MemoryKind::kPool;
      a.address = result == 0 ? DerefPtr(q->ptr) : 0;
      a.size = q->size;
      a.stream = Handle(q->stream);
      a.pool = Handle(q->memPool);
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kIpcOpen: {
      // cuIpcOpenMemHandle and _v2 share the layout. The size is the backend's to look up.
      auto* q = static_cast<const cuIpcOpenMemHandle_v2_params*>(p);
      a.kind = MemoryKind::kIpcImport;
      a.address = result == 0 ? Deref(q->pdptr) : 0;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kPoolImport: {
      auto* q = static_cast<const cuMemPoolImportPointer_params*>(p);
      a.kind = MemoryKind::kIpcImport;
      a.address = result == 0 ? Deref(q->ptr_out) : 0;
      a.pool = Handle(q->pool);
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kReserve: {
      auto* q = static_cast<const cuMemAddressReserve_params*>(p);
      if (result != 0 || q->ptr == nullptr) {
        a.size = q->size;
        return EmitAcquire(api, result, a, t);
      }
      t->record = New(RecordType::kMap, api);
      t->record.op = static_cast<uint8_t>(MapOp::kReserve);
      t->record.address = *q->ptr;
      t->record.size = q->size;
      t->record.aux1 = q->alignment;
      t->action = CallbackAction::kEmit;
      return true;
    }
    case Fn::kCreate: {
      auto* q = static_cast<const cuMemCreate_params*>(p);
      const CUmemAllocationProp* prop = q->prop;
      a.device = prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                     ? prop->location.id
                     : -1;
      if (result != 0 || q->handle == nullptr) {
        a.size = q->size;
        return EmitAcquire(api, result, a, t);
      }
      t->record = New(RecordType::kHandle, api);
      t->record.op = static_cast<uint8_t>(HandleOp::kCreate);
      t->record.pool = *q->handle;
      t->record.size = q->size;
      t->record.device = a.device;
      t->record.aux1 = prop != nullptr ? static_cast<uint64_t>(prop->requestedHandleTypes) : 0;
      t->action = CallbackAction::kEmit;
      return true;
    }
    case Fn::kMap: {
      auto* q = static_cast<const cuMemMap_params*>(p);
      if (result != 0) {
        a.size = q->size;
        return EmitAcquire(api, result, a, t);
      }
      t->record = New(RecordType::kMap, api);
      t->record.op = static_cast<uint8_t>(MapOp::kMap);
      t->record.address = q->ptr;
      t->record.size = q->size;
      t->record.aux0 = q->offset;
      t->record.pool = q->handle;
      t->action = CallbackAction::kEmit;
      return true;
    }
    case Fn::kRetain: {
      // Recorded whatever the result, as the agent does: a failed retain is a probe ("is this
      // address VMM memory?"), not an allocation failure.
      auto* q = static_cast<const cuMemRetainAllocationHandle_params*>(p);
      t->record = New(RecordType::kHandle, api);
      t->record.op = static_cast<uint8_t>(HandleOp::kRetain);
      t->record.result = result;
      t->record.address = reinterpret_cast<uint64_t>(q->addr);
      if (result == 0) t->record.pool = Deref(q->handle);
      t->action = CallbackAction::kEmit;
      return true;
    }
    case Fn::kImport: {
      auto* q = static_cast<const cuMemImportFromShareableHandle_params*>(p);
      if (result != 0 || q->handle == nullptr) return EmitAcquire(api, result, a, t);
      t->record = New(RecordType::kHandle, api);
      t->record.op = static_cast<uint8_t>(HandleOp::kImport);
      t->record.pool = *q->handle;
      t->record.aux1 = static_cast<uint64_t>(q->shHandleType);
      t->action = CallbackAction::kEmit;
      return true;
    }
    case Fn::kTrim:
    case Fn::kRtTrim: {
      if (result != 0) return false;
      uint64_t pool = tracked.fn == Fn::kTrim
                          ? Handle(static_cast<const cuMemPoolTrimTo_params*>(p)->pool)
                          : Handle(static_cast<const cudaMemPoolTrimTo_v11020_params*>(p)->memPool);
      t->record = New(RecordType::kMemInfo, api);
      t->record.pool = pool;
      t->action = CallbackAction::kSamplePool;
      return true;
    }
    case Fn::kFailureOnly: {
      if (result == 0) return false;
      return EmitAcquire(api, result, a, t);
    }
    case Fn::kFree:
    case Fn::kFreeLegacy:
    case Fn::kIpcClose:
    case Fn::kRtFree: {
      t->record = New(RecordType::kFree, api);
      t->record.address = ReleaseKey(tracked.fn, p);
      break;
    }
    case Fn::kFreeAsync:
    case Fn::kRtFreeAsync: {
      t->record = New(RecordType::kFree, api);
      t->record.address = ReleaseKey(tracked.fn, p);
      t->record.stream = tracked.fn == Fn::kFreeAsync
                             ? Handle(static_cast<const cuMemFreeAsync_params*>(p)->hStream)
                             : Handle(static_cast<const cudaFreeAsync_v11020_params*>(p)->hStream);
      break;
    }
    case Fn::kAddressFree: {
      auto* q = static_cast<const cuMemAddressFree_params*>(p);
      t->record = New(RecordType::kMap, api);
      t->record.op = static_cast<uint8_t>(MapOp::kFreeRange);
      t->record.address = q->ptr;
      t->record.size = q->size;
      break;
    }
    case Fn::kUnmap: {
      auto* q = static_cast<const cuMemUnmap_params*>(p);
      t->record = New(RecordType::kMap, api);
      t->record.op = static_cast<uint8_t>(MapOp::kUnmap);
      t->record.address = q->ptr;
      t->record.size = q->size;
      break;
    }
    case Fn::kRelease: {
      t->record = New(RecordType::kHandle, api);
      t->record.op = static_cast<uint8_t>(HandleOp::kRelease);
      t->record.pool = ReleaseKey(tracked.fn, p);
      break;
    }
  }
  // Releases: recorded with their result, seq taken at enter.
  t->record.result = result;
  t->action = CallbackAction::kEmit;
  t->seq_from_enter = true;
  t->is_release = true;
  return true;
}

}  // namespace

bool IsTrackedCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  Tracked t;
  return Find(domain, cbid, &t);
}

agent::Api CallbackApi(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  Tracked t;
  return Find(domain, cbid, &t) ? t.api : Api::k_UNKNOWN;
}

size_t TrackedCallbacks(CUpti_CallbackDomain domain, CUpti_CallbackId* out, size_t capacity) {
  size_t n = 0;
  auto add = [&](CUpti_CallbackId id) {
    if (n < capacity) out[n] = id;
    ++n;
  };
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
#define FRAGSCOPE_ADD(cb, api, fn) add(CUPTI_DRIVER_TRACE_CBID_##cb);
    FRAGSCOPE_CUPTI_DRIVER(FRAGSCOPE_ADD)
#undef FRAGSCOPE_ADD
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
#define FRAGSCOPE_ADD(cb, api, fn) add(CUPTI_RUNTIME_TRACE_CBID_##cb);
    FRAGSCOPE_CUPTI_RUNTIME(FRAGSCOPE_ADD)
#undef FRAGSCOPE_ADD
  }
  return n < capacity ? n : capacity;
}

CallbackTranslation TranslateCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                      const CUpti_CallbackData& data, CallbackNesting& nesting) {
  CallbackTranslation t;
  Tracked tracked;
  if (!Find(domain, cbid, &tracked) || data.functionParams == nullptr) return t;
  if (data.callbackSite == CUPTI_API_ENTER) {
    const bool outermost = nesting.depth == 0;
    ++nesting.depth;
    if (outermost) {
      nesting.inner_failed = false;
      nesting.inner_result = 0;
      nesting.inner_correlation_id = 0;
      if (IsRelease(tracked.fn) && ReleaseKey(tracked.fn, data.functionParams) != 0) {
        t.action = CallbackAction::kTakeSeq;
      }
    }
    return t;
  }
  if (data.callbackSite != CUPTI_API_EXIT || nesting.depth == 0) return t;  // exit w/o enter
  --nesting.depth;
  int32_t result = data.functionReturnValue != nullptr
                       ? *static_cast<const int32_t*>(data.functionReturnValue)
                       : 0;
  if (nesting.depth > 0) {
    // Nested: the outer call is the event; remember what the driver said.
    nesting.inner_correlation_id = data.correlationId;
    if (result != 0) {
      nesting.inner_failed = true;
      nesting.inner_result = result;
    }
    return t;
  }
  // A runtime call that failed after a failing driver call reports the driver's result.
  if (result != 0 && nesting.inner_failed) result = nesting.inner_result;
  if (IsRelease(tracked.fn) && ReleaseKey(tracked.fn, data.functionParams) == 0) return t;
  if (!Build(tracked, data.functionParams, result, &t)) return CallbackTranslation{};
  t.correlation_id = data.correlationId;
  t.inner_correlation_id = nesting.inner_correlation_id;
  return t;
}

bool TranslateMemoryActivity(const CUpti_ActivityMemory4& activity, EventRecord* out) {
  MemoryKind kind;
  switch (activity.memoryKind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
      kind = activity.isAsync ? MemoryKind::kPool : MemoryKind::kDevice;
      break;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
      kind = MemoryKind::kManaged;
      break;
    default:  // host memory, arrays, module globals (*_STATIC): not the segments we model
      return false;
  }
  RecordType type;
  switch (activity.memoryOperationType) {
    case CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION:
      type = RecordType::kAlloc;
      break;
    case CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE:
      type = RecordType::kFree;
      break;
    default:
      return false;
  }
  if (activity.address == 0) return false;
  *out = New(type, Api::k_UNKNOWN);
  out->address = activity.address;
  out->size = activity.bytes;
  out->device = static_cast<int32_t>(activity.deviceId);
  if (type == RecordType::kAlloc) out->kind = kind;
  return true;
}

bool TranslateMemoryPoolActivity(const CUpti_ActivityMemoryPool3& activity, EventRecord* out) {
  if (activity.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) return false;
  switch (activity.memoryPoolOperationType) {
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED:
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED:
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED:
      break;
    default:
      return false;
  }
  *out = New(RecordType::kMemInfo, Api::k_UNKNOWN);
  out->device = static_cast<int32_t>(activity.deviceId);
  const bool destroyed =
      activity.memoryPoolOperationType == CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED;
  out->aux2 = destroyed ? 0 : activity.size;
  out->aux3 = destroyed ? 0 : activity.utilizedSize;
  return true;
}

void ActivityCorrelator::Recorded(uint32_t correlation_id, uint64_t pool) {
  if (correlation_id == 0 || capacity_ == 0) return;
  if (recorded_.emplace(correlation_id, pool).second) {
    order_.push_back(correlation_id);
  } else if (pool != 0) {
    recorded_[correlation_id] = pool;
  }
  while (order_.size() > capacity_) {
    recorded_.erase(order_.front());
    order_.pop_front();
  }
}

bool ActivityCorrelator::IsNew(const CUpti_ActivityMemory4& activity) {
  auto it = recorded_.find(activity.correlationId);
  if (it == recorded_.end()) return true;
  if (it->second != 0 && activity.isAsync && activity.memoryPoolConfig.address != 0) {
    pool_by_base_[activity.memoryPoolConfig.address] = it->second;
  }
  return false;
}

uint64_t ActivityCorrelator::PoolForBase(uint64_t base_address) const {
  auto it = pool_by_base_.find(base_address);
  return it == pool_by_base_.end() ? 0 : it->second;
}

}  // namespace fragscope::cupti
