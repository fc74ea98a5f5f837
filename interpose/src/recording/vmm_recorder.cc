#include "recording/vmm_recorder.h"

namespace fragscope::agent {
namespace {

// A MapEvent / HandleEvent record, stack captured now (a release's only when release stacks
// are on).
EventRecord MapRecord(const MapInfo& info) {
  const bool release = info.op == MapOp::kUnmap || info.op == MapOp::kFreeRange;
  return release ? NewReleaseRecord(RecordType::kMap, info.api)
                 : NewRecord(RecordType::kMap, info.api);
}
EventRecord HandleRecord(const HandleInfo& info) {
  return info.op == HandleOp::kRelease ? NewReleaseRecord(RecordType::kHandle, info.api)
                                       : NewRecord(RecordType::kHandle, info.api);
}

// The live entry of a reservation, handle or mapping.
LiveEntry VmmEntry(LiveClass cls, Api api, int32_t device, uint64_t key, uint64_t size,
                   uint64_t stack_id) {
  LiveEntry e = ZeroLiveEntry();
  e.cls = cls;
  e.api = api;
  e.device = device;
  e.address = key;
  e.size = size;
  e.stack_id = stack_id;
  return e;
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

void RecordReserve(const MapInfo& info, int32_t result) {
  if (result != 0 || info.address == 0) {
    RecordFailure(FailureInfo{info.api, result, info.size});
    return;
  }
  EventRecord rec = MapRecord(info);
  FillMapRecord(rec, info);
  LiveEntry e =
      VmmEntry(LiveClass::kReservation, info.api, -1, info.address, info.size, rec.stack_id);
  rec.seq = InsertLive(e);
  Submit(rec);
}

void RecordMap(const MapInfo& info, int32_t result) {
  if (result != 0) {
    RecordFailure(FailureInfo{info.api, result, info.size, HandleDevice(info.handle)});
    return;
  }
  // The handle's device and its mapping count in one claim of its slot (a separate lookup
  // was a second compare-and-swap per map).
  MapInfo mapped = info;
  Agent().live.Update(LiveClass::kHandle, info.handle, [&mapped](LiveEntry& e) {
    ++e.maps;
    mapped.device = e.device;
    return true;
  });
  EventRecord rec = MapRecord(mapped);
  FillMapRecord(rec, mapped);
  LiveEntry e =
      VmmEntry(LiveClass::kMapping, info.api, mapped.device, info.address, info.size, rec.stack_id);
  e.offset = info.offset;
  e.handle = info.handle;
  rec.seq = InsertLive(e);
  Submit(rec);
}

void RecordHandleCreate(const HandleInfo& info, int32_t result) {
  if (result != 0 || info.handle == 0) {
    RecordFailure(FailureInfo{info.api, result, info.size, info.device});
    return;
  }
  EventRecord rec = HandleRecord(info);
  FillHandleRecord(rec, info);
  LiveEntry e =
      VmmEntry(LiveClass::kHandle, info.api, info.device, info.handle, info.size, rec.stack_id);
  e.refs = 1;
  rec.seq = InsertLive(e);
  Submit(rec);
  MaybeSampleMemInfo(info.device);
}

void RecordHandleImport(const HandleInfo& info, int32_t result) {
  if (result != 0 || info.handle == 0) {
    RecordFailure(FailureInfo{info.api, result});
    return;
  }
  EventRecord rec = HandleRecord(info);
  FillHandleRecord(rec, info);
  LiveEntry e = VmmEntry(LiveClass::kHandle, info.api, -1, info.handle, 0, rec.stack_id);
  e.flags = kLiveImported;
  e.refs = 1;
  rec.seq = InsertLive(e);
  Submit(rec);
}

void RecordHandleRetain(const HandleInfo& info, int32_t result) {
  EventRecord rec = HandleRecord(info);
  HandleInfo retained = info;
  if (result == 0 && info.handle != 0) {
    LiveEntry e = ZeroLiveEntry();
    if (Agent().live.Update(LiveClass::kHandle, info.handle, [&](LiveEntry& x) {
          ++x.refs;
          e = x;
          return true;
        })) {
      retained.size = e.size;
      retained.device = e.device;
    }
  }
  FillHandleRecord(rec, retained);
  rec.result = result;
  rec.seq = NextSeq();
  Submit(rec);
}

void RecordHandleExport(const HandleInfo& info, int32_t result) {
  EventRecord rec = HandleRecord(info);
  HandleInfo exported = info;
  LiveEntry e;
  if (Agent().live.Find(LiveClass::kHandle, info.handle, &e)) {
    exported.size = e.size;
    exported.device = e.device;
  }
  FillHandleRecord(rec, exported);
  rec.result = result;
  rec.seq = NextSeq();
  Submit(rec);
}

void PendingAddressFree::End(int32_t result) {
  if (result != 0) release_.Restore();
  EventRecord rec = MapRecord(info_);
  FillMapRecord(rec, info_);
  rec.seq = release_.seq();
  rec.result = result;
  Submit(rec);
}

PendingUnmap::PendingUnmap(const MapInfo& info) : info_(info) {
  const uint64_t ptr = info.address;
  const uint64_t size = info.size;
  LiveTable& live = Agent().live;
  for (uint64_t at = ptr; at < ptr + size && count_ < kMaxMappings;) {
    if (!live.Erase(LiveClass::kMapping, at, &removed_[count_], &indexes_[count_])) break;
    at += removed_[count_].size > 0 ? removed_[count_].size : size;
    ++count_;
  }
  record_ = MapRecord(info);
  record_.seq = NextSeq();
  for (int i = 0; i < count_; ++i) live.SetRemovedSeq(indexes_[i], record_.seq);
}

void PendingUnmap::End(int32_t result) {
  LiveTable& live = Agent().live;
  for (int i = 0; i < count_; ++i) {
    if (result == 0) {
      UnmapHandle(removed_[i].handle, record_.seq);
    } else {
      live.Insert(removed_[i]);
    }
  }
  MapInfo unmapped = info_;
  unmapped.handle = count_ > 0 ? removed_[0].handle : 0;
  unmapped.device = count_ > 0 ? removed_[0].device : -1;
  FillMapRecord(record_, unmapped);
  record_.result = result;
  Submit(record_);
}

PendingHandleRelease::PendingHandleRelease(const HandleInfo& info) : info_(info) {
  // The physical memory goes once the last reference is released and nothing maps it.
  LiveTable& live = Agent().live;
  size_t index = 0;
  known_ = live.Find(LiveClass::kHandle, info.handle, &before_);
  erased_ = known_ && before_.refs <= 1 && before_.maps <= 0 &&
            live.Erase(LiveClass::kHandle, info.handle, nullptr, &index);
  if (known_ && !erased_) {
    live.Update(LiveClass::kHandle, info.handle, [](LiveEntry& e) {
      --e.refs;
      return true;
    });
  }
  record_ = HandleRecord(info);
  record_.seq = NextSeq();
  if (erased_) live.SetRemovedSeq(index, record_.seq);
}

void PendingHandleRelease::End(int32_t result) {
  LiveTable& live = Agent().live;
  if (result != 0 && known_) {
    if (erased_) {
      live.Insert(before_);
    } else {
      live.Update(LiveClass::kHandle, info_.handle, [](LiveEntry& e) {
        ++e.refs;
        return true;
      });
    }
  }
  HandleInfo released = info_;
  released.size = known_ ? before_.size : 0;
  released.device = known_ ? before_.device : -1;
  FillHandleRecord(record_, released);
  record_.result = result;
  Submit(record_);
}

}  // namespace fragscope::agent
