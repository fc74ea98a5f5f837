#include "shipping/frame_encoder.h"

#include <cstring>

#include "fragscope/wire_events.h"

namespace fragscope::agent {
namespace {

using F = wire::Frame;

// The fields common to all event messages (the same numbers in each).
template <typename Writer>
[[gnu::always_inline]] inline void CommonEventFields(Writer& w, const EventRecord& r) {
  using E = wire::EventCommon;
  w.Uint64(E::kSeq, r.seq);
  w.Uint64(E::kTimeNs, r.time_ns);
  w.Uint32(E::kTid, r.tid);
  w.Enum(E::kApi, static_cast<uint32_t>(r.api));
  w.Int32(E::kResult, r.result);
  w.Uint64(E::kStackId, r.stack_id);
}

}  // namespace

FrameScope::FrameScope(WireWriter& w, uint32_t body_field) : w_(w), mark_(w.size()) {
  frame_ = w_.BeginLengthPrefixed();
  body_ = w_.BeginMessage(body_field);
}

bool FrameScope::Close() {
  w_.EndMessage(body_);
  w_.EndMessage(frame_);
  if (w_.ok()) return true;
  w_.Truncate(mark_);
  return false;
}

void EncodeStreamHeader(uint8_t out[kStreamHeaderSize]) {
  memcpy(out, kStreamMagic, 8);
  for (int i = 0; i < 4; ++i) {
    out[8 + i] = static_cast<uint8_t>(kFormatMajor >> (8 * i));
    out[12 + i] = static_cast<uint8_t>(kFormatMinor >> (8 * i));
  }
}

bool EncodeHello(WireWriter& w, const HelloInfo& h) {
  using H = wire::Hello;
  FrameScope frame(w, F::kHello);
  w.Uint32(H::kFormatMajor, kFormatMajor);
  w.Uint32(H::kFormatMinor, kFormatMinor);
  w.Uint32(H::kPid, h.pid);
  w.Uint32(H::kPpid, h.ppid);
  w.String(H::kHost, h.host);
  w.String(H::kExe, h.exe);
  for (int i = 0; i < h.argc; ++i) {
    // repeated string: an empty argument still occupies a position
    const char* arg = h.argv[i] != nullptr ? h.argv[i] : "";
    w.Tag(H::kArgv, WireWriter::kLengthDelimited);
    size_t len = strlen(arg);
    w.RawVarint(len);
    w.RawBytes(arg, len);
  }
  w.String(H::kAgentVersion, h.agent_version);
  w.Uint64(H::kRealtimeAtStartNs, h.realtime_at_start_ns);
  w.Uint64(H::kMonotonicAtStartNs, h.monotonic_at_start_ns);
  w.Enum(H::kBackend, static_cast<uint32_t>(h.backend));
  w.Bool(H::kAttached, h.attached);
  w.Uint32(H::kStreamIndex, h.stream_index);
  w.Uint32(H::kStackDepth, h.stack_depth);
  w.Uint64(H::kRingBytes, h.ring_bytes);
  w.Uint32(H::kResumed, h.resumed);
  w.Bool(H::kReleaseStacksOff, h.release_stacks_off);
  // Optional fields: present even when 0 (rank 0 is a rank), so not through Uint32, which
  // leaves zeros out as proto3 does.
  if (h.rank >= 0) w.PresentUint64(H::kRank, static_cast<uint64_t>(h.rank));
  if (h.world_size >= 0) w.PresentUint64(H::kWorldSize, static_cast<uint64_t>(h.world_size));
  w.Uint32(H::kExecImage, h.exec_image);
  return frame.Close();
}

bool EncodeDeviceInfo(WireWriter& w, const DeviceInfoData& d) {
  using D = wire::DeviceInfo;
  FrameScope frame(w, F::kDevice);
  w.Int32(D::kOrdinal, d.ordinal);
  if (d.has_uuid) w.Bytes(D::kUuid, d.uuid, sizeof(d.uuid));
  w.Uint64(D::kTotalBytes, d.total_bytes);
  w.String(D::kName, d.name);
  return frame.Close();
}

bool EncodeModuleMap(WireWriter& w, const ModuleData* modules, size_t count) {
  using M = wire::Module;
  FrameScope frame(w, F::kModuleMap);
  for (size_t i = 0; i < count; ++i) {
    const ModuleData& m = modules[i];
    size_t module = w.BeginMessage(wire::ModuleMap::kModules);
    w.String(M::kPath, m.path);
    w.Bytes(M::kBuildId, m.build_id, m.build_id_size);
    w.Uint64(M::kLoadAddress, m.load_address);
    w.Uint64(M::kSize, m.size);
    w.EndMessage(module);
  }
  return frame.Close();
}

bool EncodeStack(WireWriter& w, uint64_t id, const uint64_t* pcs, int count, StackEnd end) {
  FrameScope frame(w, F::kStacks);
  size_t stack = w.BeginMessage(wire::StackTable::kStacks);
  w.Uint64(wire::Stack::kId, id);
  w.PackedUint64(wire::Stack::kPcs, pcs, count > 0 ? static_cast<size_t>(count) : 0);
  w.Enum(wire::Stack::kEnd, static_cast<uint32_t>(end));
  w.EndMessage(stack);
  return frame.Close();
}

bool EncodeSymbolizedStack(WireWriter& w, uint64_t id, const uint8_t* frames, size_t size) {
  FrameScope frame(w, F::kSymbolizedStack);
  w.Uint64(wire::SymbolizedStack::kId, id);
  w.RawBytes(frames, size);  // already SymbolizedStack.frames entries
  return frame.Close();
}

namespace {

// The frame field of a record's message, 0 for none.
uint32_t BodyField(RecordType type) {
  switch (type) {
    case RecordType::kAlloc:
      return F::kAlloc;
    case RecordType::kFree:
      return F::kFree;
    case RecordType::kMap:
      return F::kMap;
    case RecordType::kHandle:
      return F::kHandle;
    case RecordType::kFailed:
      return F::kFailed;
    case RecordType::kMemInfo:
      return F::kMemInfo;
    case RecordType::kMark:
      return F::kMark;
    case RecordType::kBlock:
      return F::kBlock;
    case RecordType::kNone:
      break;
  }
  return 0;
}

// The record's message fields, with either writer (below: the same bytes).
template <typename Writer>
[[gnu::always_inline]] inline void EncodeEventBody(Writer& w, const EventRecord& r) {
  switch (r.type) {
    case RecordType::kAlloc: {
      using E = wire::AllocEvent;
      CommonEventFields(w, r);
      w.Uint64(E::kAddress, r.address);
      w.Uint64(E::kSize, r.size);
      w.Int32(E::kDevice, r.device);
      w.Uint64(E::kStream, r.stream);
      w.Uint64(E::kPool, r.pool);
      w.Enum(E::kKind, static_cast<uint32_t>(r.kind));
      w.Uint64(E::kPitch, r.aux0);
      w.Bool(E::kInCapture, (r.flags & kFlagInCapture) != 0);
      w.Int32(E::kFailedReleaseResult, static_cast<int32_t>(static_cast<uint32_t>(r.aux1)));
      return;
    }
    case RecordType::kFree: {
      using E = wire::FreeEvent;
      CommonEventFields(w, r);
      w.Uint64(E::kAddress, r.address);
      w.Uint64(E::kSize, r.size);
      w.Int32(E::kDevice, r.device);
      w.Uint64(E::kStream, r.stream);
      w.Uint64(E::kPool, r.pool);
      return;
    }
    case RecordType::kMap: {
      using E = wire::MapEvent;
      CommonEventFields(w, r);
      w.Enum(E::kOp, r.op);
      w.Uint64(E::kAddress, r.address);
      w.Uint64(E::kSize, r.size);
      w.Uint64(E::kOffset, r.aux0);
      w.Uint64(E::kHandle, r.pool);
      w.Int32(E::kDevice, r.device);
      w.Uint64(E::kAlignment, r.aux1);
      return;
    }
    case RecordType::kHandle: {
      using E = wire::HandleEvent;
      CommonEventFields(w, r);
      w.Enum(E::kOp, r.op);
      w.Uint64(E::kHandle, r.pool);
      w.Uint64(E::kSize, r.size);
      w.Int32(E::kDevice, r.device);
      w.Uint32(E::kHandleType, static_cast<uint32_t>(r.aux1));
      w.Uint64(E::kAddress, r.address);
      return;
    }
    case RecordType::kFailed: {
      using E = wire::FailedAlloc;
      CommonEventFields(w, r);
      w.Uint64(E::kSize, r.size);
      w.Int32(E::kDevice, r.device);
      w.Uint64(E::kStream, r.stream);
      w.Uint64(E::kPool, r.pool);
      w.Enum(E::kKind, static_cast<uint32_t>(r.kind));
      bool has_mem_info = (r.flags & kFlagHasMemInfo) != 0;
      w.Bool(E::kHasMemInfo, has_mem_info);
      if (has_mem_info) {
        w.Uint64(E::kDeviceFreeBytes, r.aux0);
        w.Uint64(E::kDeviceTotalBytes, r.aux1);
      }
      w.Bool(E::kFromSubAllocator, (r.flags & kFlagSubAllocator) != 0);
      return;
    }
    case RecordType::kMemInfo: {
      using E = wire::MemInfo;
      w.Uint64(E::kSeq, r.seq);
      w.Uint64(E::kTimeNs, r.time_ns);
      w.Int32(E::kDevice, r.device);
      w.Uint64(E::kFreeBytes, r.aux0);
      w.Uint64(E::kTotalBytes, r.aux1);
      w.Uint64(E::kPool, r.pool);
      w.Uint64(E::kPoolReservedBytes, r.aux2);
      w.Uint64(E::kPoolUsedBytes, r.aux3);
      return;
    }
    case RecordType::kMark: {
      using E = wire::Mark;
      w.Uint64(E::kSeq, r.seq);
      w.Uint64(E::kTimeNs, r.time_ns);
      w.Uint32(E::kTid, r.tid);
      const size_t capacity = (r.flags & kFlagRank) != 0 ? EventRecord::kRankLabelCapacity
                                                         : EventRecord::kLabelCapacity;
      size_t n = r.label_size <= capacity ? r.label_size : 0;
      w.Bytes(E::kLabel, r.label, n);
      w.Bool(E::kBlocksSynced, (r.flags & kFlagBlocksSynced) != 0);
      if ((r.flags & kFlagRank) != 0) {
        w.PresentUint64(E::kRank, static_cast<uint32_t>(r.rank_mark.rank));
        if (r.rank_mark.world_size >= 0) {
          w.PresentUint64(E::kWorldSize, static_cast<uint32_t>(r.rank_mark.world_size));
        }
      }
      return;
    }
    case RecordType::kBlock: {
      using E = wire::BlockEvent;
      CommonEventFields(w, r);
      w.Enum(E::kOp, r.op);
      w.Uint64(E::kAddress, r.address);
      w.Uint64(E::kSize, r.size);
      w.Int32(E::kDevice, r.device);
      w.Uint64(E::kStream, r.stream);
      w.Uint64(E::kPool, r.aux2);
      w.Uint64(E::kAllocator, r.pool);
      return;
    }
    case RecordType::kNone:
      break;
  }
}

// An event frame is at most its 3 header bytes (frame length, body tag, body length) and 15
// varint fields, or a Mark's 3 varint fields, label, blocks_synced and rank fields: one room check
// covers all of it.
constexpr size_t kMaxEventFrameBytes = 3 + 15 * RawWireWriter::kMaxVarintField;
static_assert(kMaxEventFrameBytes >=
              3 + 5 * RawWireWriter::kMaxVarintField + 2 + EventRecord::kLabelCapacity + 2);

}  // namespace

// The fast path below writes the body's tag as one byte.
static_assert(F::kAlloc < 16 && F::kFree < 16 && F::kMap < 16 && F::kHandle < 16 &&
              F::kFailed < 16 && F::kMemInfo < 16 && F::kMark < 16 && F::kBlock < 16);

bool EncodeRecord(WireWriter& w, const EventRecord& r) {
  const uint32_t field = BodyField(r.type);
  if (field == 0) return true;  // nothing to write
  // The drain thread's per-event path: without a bounds check per field. The body is written
  // after three bytes kept for the header, which fit as long as both lengths are below 128:
  // nearly every event frame (a longer one takes the checked path, which moves it up).
  if (uint8_t* start = w.Room(kMaxEventFrameBytes)) {
    RawWireWriter raw(start + 3);
    EncodeEventBody(raw, r);
    const size_t body = static_cast<size_t>(raw.end() - (start + 3));
    if (body + 2 < 0x80) {
      start[0] = static_cast<uint8_t>(body + 2);
      start[1] = static_cast<uint8_t>((field << 3) | WireWriter::kLengthDelimited);
      start[2] = static_cast<uint8_t>(body);
      w.Commit(raw.end());
      return true;
    }
  }
  FrameScope frame(w, field);
  EncodeEventBody(w, r);
  return frame.Close();
}

bool EncodeDrops(WireWriter& w, const DropsData& d) {
  using D = wire::Drops;
  FrameScope frame(w, F::kDrops);
  w.Uint64(D::kSeq, d.seq);
  w.Uint64(D::kTimeNs, d.time_ns);
  w.Uint64(D::kDroppedEvents, d.dropped_events);
  w.Uint64(D::kTotalDropped, d.total_dropped);
  w.Enum(D::kReason, static_cast<uint32_t>(d.reason));
  return frame.Close();
}

uint32_t PackedBody(const EventRecord& r) {
  const uint32_t body = BodyField(r.type);
  if (wire::packed::ShapeOf(body).address_field == 0) return 0;
  if (static_cast<uint32_t>(r.api) >= wire::packed::kApis) return 0;
  // EncodeEventBody's AllocEvent.failed_release_result (field 15), set on a failed release only.
  if (r.type == RecordType::kAlloc && static_cast<int32_t>(static_cast<uint32_t>(r.aux1)) != 0) {
    return 0;
  }
  return body;
}

bool AddPacked(PackedEventRun& run, WireWriter& w, const EventRecord& r) {
  return run.Add(w, PackedBody(r),
                 [&](PackedEventRun::EventWriter& fields) { EncodeEventBody(fields, r); });
}

namespace {

// Reads the varint at p (before end) into *value and moves p past it; false when it runs past
// end or past ten bytes.
bool TakeVarint(const uint8_t*& p, const uint8_t* end, uint64_t* value) {
  *value = 0;
  for (int shift = 0; p < end && shift < 64; shift += 7) {
    const uint8_t b = *p++;
    *value |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// The count of a PackedEvents body of `size` bytes at `p` (0 when it holds none or is not one).
size_t PackedEventCount(const uint8_t* p, size_t size) {
  const uint8_t* end = p + size;
  uint64_t count = 0;
  while (p < end) {
    uint64_t tag = 0, value = 0;
    if (!TakeVarint(p, end, &tag) || !TakeVarint(p, end, &value)) return 0;
    if ((tag & 7) == WireWriter::kLengthDelimited) {
      if (value > static_cast<uint64_t>(end - p)) return 0;
      p += value;
    } else if (tag == ((wire::PackedEvents::kCount << 3) | WireWriter::kVarint)) {
      count = value;
    }
  }
  return static_cast<size_t>(count);
}

}  // namespace

size_t CountWholeEventFrames(const uint8_t* data, size_t size) {
  size_t pos = 0;
  uint8_t header[kStreamHeaderSize];
  EncodeStreamHeader(header);
  if (size >= kStreamHeaderSize && memcmp(data, header, kStreamHeaderSize) == 0) {
    pos = kStreamHeaderSize;
  }
  size_t events = 0;
  while (pos < size) {
    uint64_t length = 0;  // the frame's length prefix
    const uint8_t* p = data + pos;
    if (!TakeVarint(p, data + size, &length)) return events;
    pos = static_cast<size_t>(p - data);
    if (length == 0 || length > size - pos) return events;  // cut inside this frame
    // The body's tag: field numbers up to 15 fit its first byte (16, SymbolizedStack, does not).
    const uint32_t field = (data[pos] & 0x80) == 0 ? data[pos] >> 3 : 0;
    switch (field) {
      case F::kAlloc:
      case F::kFree:
      case F::kMap:
      case F::kHandle:
      case F::kFailed:
      case F::kMark:
      case F::kBlock:
        ++events;
        break;
      default:
        // A packed run (two-byte tag) holds PackedEvents.count events.
        if (length > 2 &&
            data[pos] == (((F::kPacked << 3) | WireWriter::kLengthDelimited) | 0x80) &&
            data[pos + 1] == (F::kPacked >> 4)) {
          const uint8_t* at = data + pos + 2;
          const uint8_t* const frame_end = data + pos + length;
          uint64_t body = 0;
          if (TakeVarint(at, frame_end, &body) && body <= static_cast<uint64_t>(frame_end - at)) {
            events += PackedEventCount(at, body);
          }
        }
        break;
    }
    pos += length;
  }
  return events;
}

bool EncodeEnd(WireWriter& w, const EndData& e) {
  using E = wire::End;
  FrameScope frame(w, F::kEnd);
  w.Uint64(E::kSeq, e.seq);
  w.Uint64(E::kTimeNs, e.time_ns);
  w.Uint64(E::kEventsRecorded, e.events_recorded);
  w.Uint64(E::kTotalDropped, e.total_dropped);
  w.Int32(E::kExitStatus, e.exit_status);
  w.Uint64(E::kEventsInSnapshots, e.events_in_snapshots);
  w.Bool(E::kExec, e.exec);
  return frame.Close();
}

SnapshotEncoder::SnapshotEncoder(WireWriter& w, uint64_t time_ns, SnapshotReason reason,
                                 bool complete_history)
    : w_(w), frame_(w, F::kSnapshot) {
  w_.Uint64(wire::Snapshot::kTimeNs, time_ns);
  w_.Enum(wire::Snapshot::kReason, static_cast<uint32_t>(reason));
  w_.Bool(wire::Snapshot::kCompleteHistory, complete_history);
}

void SnapshotEncoder::Add(const LiveEntry& e) {
  using S = wire::Snapshot;
  switch (e.cls) {
    case LiveClass::kAllocation: {
      using L = wire::LiveAllocation;
      size_t m = w_.BeginMessage(S::kAllocations);
      w_.Uint64(L::kAddress, e.address);
      w_.Uint64(L::kSize, e.size);
      // A device still deferred (a wake's pass could not read it) is unknown, not a device.
      w_.Int32(L::kDevice, e.device == kDeviceDeferred ? -1 : e.device);
      w_.Uint64(L::kStream, e.stream);
      w_.Uint64(L::kPool, e.pool == kPoolDeferred ? 0 : e.pool);
      w_.Uint64(L::kStackId, e.stack_id);
      w_.Enum(L::kApi, static_cast<uint32_t>(e.api));
      w_.Enum(L::kKind, static_cast<uint32_t>(e.kind));
      w_.EndMessage(m);
      break;
    }
    case LiveClass::kReservation: {
      using L = wire::LiveReservation;
      size_t m = w_.BeginMessage(S::kReservations);
      w_.Uint64(L::kAddress, e.address);
      w_.Uint64(L::kSize, e.size);
      w_.Int32(L::kDevice, e.device);
      w_.Uint64(L::kStackId, e.stack_id);
      w_.EndMessage(m);
      break;
    }
    case LiveClass::kHandle: {
      using L = wire::LiveHandle;
      size_t m = w_.BeginMessage(S::kHandles);
      w_.Uint64(L::kHandle, e.address);  // a handle's entry is keyed by the handle
      w_.Uint64(L::kSize, e.size);
      w_.Int32(L::kDevice, e.device);
      w_.Bool(L::kImported, (e.flags & kLiveImported) != 0);
      w_.Bool(L::kReleased, e.refs <= 0);
      w_.Uint64(L::kStackId, e.stack_id);
      w_.EndMessage(m);
      break;
    }
    case LiveClass::kMapping: {
      using L = wire::LiveMapping;
      size_t m = w_.BeginMessage(S::kMappings);
      w_.Uint64(L::kAddress, e.address);
      w_.Uint64(L::kSize, e.size);
      w_.Uint64(L::kOffset, e.offset);
      w_.Uint64(L::kHandle, e.handle);
      w_.EndMessage(m);
      break;
    }
    case LiveClass::kBlock: {
      using L = wire::LiveBlock;
      size_t m = w_.BeginMessage(S::kBlocks);
      w_.Uint64(L::kAddress, e.address);
      w_.Uint64(L::kSize, e.size);
      w_.Int32(L::kDevice, e.device);
      w_.Uint64(L::kStream, e.stream);
      w_.Uint64(L::kPool, e.pool);
      w_.Uint64(L::kStackId, e.stack_id);
      w_.Bool(L::kPendingFree, (e.flags & kLivePendingFree) != 0);
      w_.Uint64(L::kAllocator, e.handle);  // a block's entry keeps its allocator there
      w_.EndMessage(m);
      break;
    }
  }
}

}  // namespace fragscope::agent
