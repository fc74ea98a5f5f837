// The typed records a tracked call produces (an allocation, a failure, a free, a VMM range or
// handle operation, a sub-allocator block), and the one place that lays each out in an
// EventRecord: which field carries a VMM handle, which aux word a pitch, an offset or a device's
// free bytes. The preloaded agent's recorder and the CUPTI translation both fill records through
// these functions, so both write the same frames for the same call.
//
// Pure and allocation-free: no agent state, nothing but stores into the record. The Fill*
// functions set their fields only; the caller made the record (type, api, stack) and sets seq.
#ifndef FRAGSCOPE_INTERPOSE_EVENT_INFOS_H_
#define FRAGSCOPE_INTERPOSE_EVENT_INFOS_H_

#include <cstdint>

#include "recording/api.h"
#include "recording/event_record.h"

namespace fragscope::agent {

// An allocation (AllocEvent).
struct AllocInfo {
  Api api;
  uint64_t address;
  uint64_t size;
  MemoryKind kind = MemoryKind::kDevice;
  int32_t device = -1;  // -1: ask the driver
  uint64_t stream = 0;
  uint64_t pool = 0;
  uint64_t pitch = 0;
  bool in_capture = false;
};

// A failed acquire (FailedAlloc).
struct FailureInfo {
  Api api;
  int32_t result;
  uint64_t size = 0;
  int32_t device = -1;  // -1: ask the driver
  uint64_t stream = 0;
  uint64_t pool = 0;
  MemoryKind kind = MemoryKind::kUnspecified;
  bool from_sub_allocator = false;
  // A source-level stack (SourceStackTable id) that names the failing request's site, for a
  // reporter that is not where the request was made; 0: the caller's own stack.
  uint64_t site = 0;
};

// The release of an allocation (FreeEvent).
struct FreeInfo {
  uint64_t address;
  uint64_t size = 0;  // 0: unknown to the caller
  int32_t device = -1;
  uint64_t stream = 0;
  uint64_t pool = 0;
};

// A VMM address-range operation (MapEvent): reserve, free range, map, unmap.
struct MapInfo {
  Api api;
  MapOp op;
  uint64_t address;
  uint64_t size;
  uint64_t offset = 0;     // map: offset into the handle
  uint64_t alignment = 0;  // reserve
  uint64_t handle = 0;     // map, unmap: the physical allocation
  int32_t device = -1;
};

// A VMM physical-allocation operation (HandleEvent): create, release, retain, export, import.
struct HandleInfo {
  Api api;
  HandleOp op;
  uint64_t handle;
  uint64_t size = 0;
  int32_t device = -1;
  uint64_t address = 0;       // retain: the address asked about
  uint64_t handle_types = 0;  // create: the requested shareable types; export/import: the type
};

// A sub-allocator's block (BlockEvent).
struct BlockInfo {
  Api api;
  BlockOp op;
  uint64_t address;
  uint64_t size = 0;
  int32_t device = -1;
  uint64_t stream = 0;
  uint64_t allocator_pool = 0;  // the sub-allocator's own pool id
};

// AllocEvent fields, with the device and pool the caller settled on (it may have asked the
// driver for either).
inline void FillAllocRecord(EventRecord& r, const AllocInfo& info, int32_t device, uint64_t pool) {
  r.device = device;
  r.address = info.address;
  r.size = info.size;
  r.kind = info.kind;
  r.stream = info.stream;
  r.pool = pool;
  r.aux0 = info.pitch;
  if (info.in_capture) r.flags |= kFlagInCapture;
}

// AllocEvent.failed_release_result: the allocation is back because its release failed.
inline void SetFailedReleaseResult(EventRecord& r, int32_t result) {
  r.aux1 = static_cast<uint32_t>(result);
}

// The FailedAlloc of an acquire that failed with `result`: its size, stream, pool and kind.
inline FailureInfo FailureOf(const AllocInfo& info, int32_t result) {
  FailureInfo failure{info.api, result, info.size, info.device};
  failure.stream = info.stream;
  failure.pool = info.pool;
  failure.kind = info.kind;
  return failure;
}

// FailedAlloc fields, with the device and pool the caller settled on.
inline void FillFailureRecord(EventRecord& r, const FailureInfo& info, int32_t device,
                              uint64_t pool) {
  r.result = info.result;
  r.device = device;
  r.size = info.size;
  r.stream = info.stream;
  r.pool = pool;
  r.kind = info.kind;
  if (info.from_sub_allocator) r.flags |= kFlagSubAllocator;
}

// FailedAlloc.free_bytes/total_bytes, sampled when the failure was recorded.
inline void SetFailureMemInfo(EventRecord& r, uint64_t free_bytes, uint64_t total_bytes) {
  r.flags |= kFlagHasMemInfo;
  r.aux0 = free_bytes;
  r.aux1 = total_bytes;
}

inline void FillFreeRecord(EventRecord& r, const FreeInfo& info) {
  r.address = info.address;
  r.size = info.size;
  r.device = info.device;
  r.stream = info.stream;
  r.pool = info.pool;
}

inline void FillMapRecord(EventRecord& r, const MapInfo& info) {
  r.op = static_cast<uint8_t>(info.op);
  r.address = info.address;
  r.size = info.size;
  r.aux0 = info.offset;
  r.aux1 = info.alignment;
  r.pool = info.handle;
  r.device = info.device;
}

inline void FillHandleRecord(EventRecord& r, const HandleInfo& info) {
  r.op = static_cast<uint8_t>(info.op);
  r.pool = info.handle;
  r.size = info.size;
  r.device = info.device;
  r.address = info.address;
  r.aux1 = info.handle_types;
}

inline void FillBlockRecord(EventRecord& r, const BlockInfo& info) {
  r.op = static_cast<uint8_t>(info.op);
  r.address = info.address;
  r.size = info.size;
  r.device = info.device;
  r.stream = info.stream;
  r.aux2 = info.allocator_pool;
}

// MemInfo: the device's free/total bytes.
inline void SetMemInfoDevice(EventRecord& r, uint64_t free_bytes, uint64_t total_bytes) {
  r.aux0 = free_bytes;
  r.aux1 = total_bytes;
}

// MemInfo: a pool's reserved and used bytes (r.pool names the pool).
inline void SetMemInfoPool(EventRecord& r, uint64_t reserved_bytes, uint64_t used_bytes) {
  r.aux2 = reserved_bytes;
  r.aux3 = used_bytes;
}

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_EVENT_INFOS_H_
