// Recording of the VMM calls (cuMemAddressReserve/Free, cuMemCreate/Release, cuMemMap/Unmap,
// retain, export, import): the hook hands over a typed record (event_infos.h, MapInfo /
// HandleInfo) and the real call's result; this file keeps the live table's reservations,
// handles and mappings (with each handle's reference and mapping counts) and pushes the MapEvent
// or HandleEvent. A call that fails as FailedAlloc (call_description.h) records that instead.
//
// Releases take their seq and leave the live table before the real call (another thread may
// reuse the range the moment it returns): construct the Pending* object before calling, End()
// after. Call these only from a hook whose HookCall records (recorder.h). Same hot-path rules as
// recorder.h: no locks, no heap.
#ifndef FRAGSCOPE_INTERPOSE_VMM_RECORDER_H_
#define FRAGSCOPE_INTERPOSE_VMM_RECORDER_H_

#include <cstddef>
#include <cstdint>

#include "recording/event_infos.h"
#include "recording/live_table.h"
#include "recording/recorder.h"

namespace fragscope::agent {

// cuMemAddressReserve: a live reservation and OP_RESERVE; a failure is a FailedAlloc of its size.
void RecordReserve(const MapInfo& info, int32_t result);

// cuMemMap: one more mapping of the handle, a live mapping and OP_MAP with the handle's device;
// a failure is a FailedAlloc of its size on the handle's device.
void RecordMap(const MapInfo& info, int32_t result);

// cuMemCreate: a live handle (one reference) and OP_CREATE, then a MemInfo sample of its device;
// a failure is a FailedAlloc of its size and device.
void RecordHandleCreate(const HandleInfo& info, int32_t result);

// cuMemImportFromShareableHandle: a live imported handle (one reference, device unknown) and
// OP_IMPORT; a failure is a FailedAlloc.
void RecordHandleImport(const HandleInfo& info, int32_t result);

// cuMemRetainAllocationHandle: one more reference to a handle the agent knows, and OP_RETAIN
// with the result whatever it is (a failed retain is a probe, not an allocation failure).
// info.handle: the handle the call wrote (0 if it wrote none).
void RecordHandleRetain(const HandleInfo& info, int32_t result);

// cuMemExportToShareableHandle: OP_EXPORT with its result; the live table is unchanged.
void RecordHandleExport(const HandleInfo& info, int32_t result);

// cuMemAddressFree: the reservation leaves the table before the call, returns if the call fails;
// OP_FREE_RANGE with the result.
class PendingAddressFree {
 public:
  explicit PendingAddressFree(const MapInfo& info)
      : info_(info), release_(LiveClass::kReservation, info.address) {}
  void End(int32_t result);

 private:
  MapInfo info_;
  PendingRelease release_;
};

// cuMemUnmap: the mappings the range covers (several, laid end to end) leave the table before
// the call; after a success each drops its handle's mapping count (a handle released and no
// longer mapped goes), after a failure they return. OP_UNMAP with the result and the first
// mapping's handle and device.
class PendingUnmap {
 public:
  explicit PendingUnmap(const MapInfo& info);
  void End(int32_t result);

 private:
  static constexpr int kMaxMappings = 64;
  MapInfo info_;
  EventRecord record_;
  LiveEntry removed_[kMaxMappings];
  size_t indexes_[kMaxMappings];
  int count_ = 0;
};

// cuMemRelease: one reference fewer; the handle leaves the table once the last reference is
// released and nothing maps it. Undone if the call fails. OP_RELEASE with the result.
class PendingHandleRelease {
 public:
  explicit PendingHandleRelease(const HandleInfo& info);
  void End(int32_t result);

 private:
  HandleInfo info_;
  EventRecord record_;
  LiveEntry before_{};
  bool known_ = false;
  bool erased_ = false;
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_VMM_RECORDER_H_
