#include "shipping/frame_encoder.h"

#include <cstring>

namespace fragscope::agent {
namespace {

// fragscope.v1.Frame body fields.
enum FrameField : uint32_t {
  kHello = 1,
  kDevice = 2,
  kModuleMap = 3,
  kStacks = 4,
  kAlloc = 5,
  kFree = 6,
  kMap = 7,
  kHandle = 8,
  kFailed = 9,
  kMemInfo = 10,
  kMark = 11,
  kDrops = 12,
  kSnapshot = 13,
  kBlock = 14,
  kEnd = 15,
  kSymbolizedStack = 16,
};

// Fields 1..6, common to all event messages.
template <typename Writer>
void CommonEventFields(Writer& w, const EventRecord& r) {
  w.Uint64(1, r.seq);
  w.Uint64(2, r.time_ns);
  w.Uint32(3, r.tid);
  w.Enum(4, static_cast<uint32_t>(r.api));
  w.Int32(5, r.result);
  w.Uint64(6, r.stack_id);
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
  FrameScope frame(w, kHello);
  w.Uint32(1, kFormatMajor);
  w.Uint32(2, kFormatMinor);
  w.Uint32(3, h.pid);
  w.Uint32(4, h.ppid);
  w.String(5, h.host);
  w.String(6, h.exe);
  for (int i = 0; i < h.argc; ++i) {
    // repeated string: an empty argument still occupies a position
    const char* arg = h.argv[i] != nullptr ? h.argv[i] : "";
    w.Tag(7, WireWriter::kLengthDelimited);
    size_t len = strlen(arg);
    w.RawVarint(len);
    w.RawBytes(arg, len);
  }
  w.String(8, h.agent_version);
  w.Uint64(9, h.realtime_at_start_ns);
  w.Uint64(10, h.monotonic_at_start_ns);
  w.Enum(11, h.backend);
  w.Bool(12, h.attached);
  w.Uint32(13, h.stream_index);
  w.Uint32(14, h.stack_depth);
  w.Uint64(15, h.ring_bytes);
  w.Uint32(16, h.resumed);
  w.Bool(17, h.release_stacks_off);
  // Optional fields: present even when 0 (rank 0 is a rank), so not through Uint32, which
  // leaves zeros out as proto3 does.
  if (h.rank >= 0) w.PresentUint64(18, static_cast<uint64_t>(h.rank));
  if (h.world_size >= 0) w.PresentUint64(19, static_cast<uint64_t>(h.world_size));
  w.Uint32(20, h.exec_image);
  return frame.Close();
}

bool EncodeDeviceInfo(WireWriter& w, const DeviceInfoData& d) {
  FrameScope frame(w, kDevice);
  w.Int32(1, d.ordinal);
  if (d.has_uuid) w.Bytes(2, d.uuid, sizeof(d.uuid));
  w.Uint64(3, d.total_bytes);
  w.String(4, d.name);
  return frame.Close();
}

bool EncodeModuleMap(WireWriter& w, const ModuleData* modules, size_t count) {
  FrameScope frame(w, kModuleMap);
  for (size_t i = 0; i < count; ++i) {
    const ModuleData& m = modules[i];
    size_t module = w.BeginMessage(1);
    w.String(1, m.path);
    w.Bytes(2, m.build_id, m.build_id_size);
    w.Uint64(3, m.load_address);
    w.Uint64(4, m.size);
    w.EndMessage(module);
  }
  return frame.Close();
}

bool EncodeStack(WireWriter& w, uint64_t id, const uint64_t* pcs, int count) {
  FrameScope frame(w, kStacks);
  size_t stack = w.BeginMessage(1);
  w.Uint64(1, id);
  w.PackedUint64(2, pcs, count > 0 ? static_cast<size_t>(count) : 0);
  w.EndMessage(stack);
  return frame.Close();
}

bool EncodeSymbolizedStack(WireWriter& w, uint64_t id, const uint8_t* frames, size_t size) {
  FrameScope frame(w, kSymbolizedStack);
  w.Uint64(1, id);
  w.RawBytes(frames, size);  // already SymbolizedStack.frames entries (field 2)
  return frame.Close();
}

namespace {

// The frame field of a record's message, 0 for none.
uint32_t BodyField(RecordType type) {
  switch (type) {
    case RecordType::kAlloc:
      return kAlloc;
    case RecordType::kFree:
      return kFree;
    case RecordType::kMap:
      return kMap;
    case RecordType::kHandle:
      return kHandle;
    case RecordType::kFailed:
      return kFailed;
    case RecordType::kMemInfo:
      return kMemInfo;
    case RecordType::kMark:
      return kMark;
    case RecordType::kBlock:
      return kBlock;
    case RecordType::kNone:
      break;
  }
  return 0;
}

// The record's message fields, with either writer (below: the same bytes).
template <typename Writer>
void EncodeEventBody(Writer& w, const EventRecord& r) {
  switch (r.type) {
    case RecordType::kAlloc: {
      CommonEventFields(w, r);
      w.Uint64(7, r.address);
      w.Uint64(8, r.size);
      w.Int32(9, r.device);
      w.Uint64(10, r.stream);
      w.Uint64(11, r.pool);
      w.Enum(12, static_cast<uint32_t>(r.kind));
      w.Uint64(13, r.aux0);
      w.Bool(14, (r.flags & kFlagInCapture) != 0);
      w.Int32(15, static_cast<int32_t>(static_cast<uint32_t>(r.aux1)));  // failed_release_result
      return;
    }
    case RecordType::kFree: {
      CommonEventFields(w, r);
      w.Uint64(7, r.address);
      w.Uint64(8, r.size);
      w.Int32(9, r.device);
      w.Uint64(10, r.stream);
      w.Uint64(11, r.pool);
      return;
    }
    case RecordType::kMap: {
      CommonEventFields(w, r);
      w.Enum(7, r.op);
      w.Uint64(8, r.address);
      w.Uint64(9, r.size);
      w.Uint64(10, r.aux0);
      w.Uint64(11, r.pool);
      w.Int32(12, r.device);
      w.Uint64(13, r.aux1);
      return;
    }
    case RecordType::kHandle: {
      CommonEventFields(w, r);
      w.Enum(7, r.op);
      w.Uint64(8, r.pool);
      w.Uint64(9, r.size);
      w.Int32(10, r.device);
      w.Uint32(11, static_cast<uint32_t>(r.aux1));
      w.Uint64(12, r.address);
      return;
    }
    case RecordType::kFailed: {
      CommonEventFields(w, r);
      w.Uint64(7, r.size);
      w.Int32(8, r.device);
      w.Uint64(9, r.stream);
      w.Uint64(10, r.pool);
      w.Enum(11, static_cast<uint32_t>(r.kind));
      bool has_mem_info = (r.flags & kFlagHasMemInfo) != 0;
      w.Bool(12, has_mem_info);
      if (has_mem_info) {
        w.Uint64(13, r.aux0);
        w.Uint64(14, r.aux1);
      }
      w.Bool(15, (r.flags & kFlagSubAllocator) != 0);
      return;
    }
    case RecordType::kMemInfo: {
      w.Uint64(1, r.seq);
      w.Uint64(2, r.time_ns);
      w.Int32(3, r.device);
      w.Uint64(4, r.aux0);
      w.Uint64(5, r.aux1);
      w.Uint64(6, r.pool);
      w.Uint64(7, r.aux2);
      w.Uint64(8, r.aux3);
      return;
    }
    case RecordType::kMark: {
      w.Uint64(1, r.seq);
      w.Uint64(2, r.time_ns);
      w.Uint32(3, r.tid);
      const size_t capacity = (r.flags & kFlagRank) != 0 ? EventRecord::kRankLabelCapacity
                                                         : EventRecord::kLabelCapacity;
      size_t n = r.label_size <= capacity ? r.label_size : 0;
      w.Bytes(4, r.label, n);
      w.Bool(5, (r.flags & kFlagBlocksSynced) != 0);
      if ((r.flags & kFlagRank) != 0) {
        w.PresentUint64(6, static_cast<uint32_t>(r.rank_mark.rank));
        if (r.rank_mark.world_size >= 0) {
          w.PresentUint64(7, static_cast<uint32_t>(r.rank_mark.world_size));
        }
      }
      return;
    }
    case RecordType::kBlock: {
      CommonEventFields(w, r);
      w.Enum(7, r.op);
      w.Uint64(8, r.address);
      w.Uint64(9, r.size);
      w.Int32(10, r.device);
      w.Uint64(11, r.stream);
      w.Uint64(12, r.aux2);
      w.Uint64(13, r.pool);
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
  FrameScope frame(w, kDrops);
  w.Uint64(1, d.seq);
  w.Uint64(2, d.time_ns);
  w.Uint64(3, d.dropped_events);
  w.Uint64(4, d.total_dropped);
  w.Enum(5, static_cast<uint32_t>(d.reason));
  return frame.Close();
}

size_t CountWholeEventFrames(const uint8_t* data, size_t size) {
  size_t pos = 0;
  uint8_t header[kStreamHeaderSize];
  EncodeStreamHeader(header);
  if (size >= kStreamHeaderSize && memcmp(data, header, kStreamHeaderSize) == 0) {
    pos = kStreamHeaderSize;
  }
  size_t events = 0;
  while (pos < size) {
    uint64_t length = 0;
    int shift = 0;
    for (;;) {  // the frame's length prefix
      if (pos >= size || shift > 63) return events;
      const uint8_t byte = data[pos++];
      length |= uint64_t{byte & 0x7fu} << shift;
      shift += 7;
      if ((byte & 0x80) == 0) break;
    }
    if (length == 0 || length > size - pos) return events;  // cut inside this frame
    // The body's tag: field numbers up to 15 fit its first byte (16, SymbolizedStack, does not).
    const uint32_t field = (data[pos] & 0x80) == 0 ? data[pos] >> 3 : 0;
    switch (field) {
      case kAlloc:
      case kFree:
      case kMap:
      case kHandle:
      case kFailed:
      case kMark:
      case kBlock:
        ++events;
        break;
      default:
        break;
    }
    pos += length;
  }
  return events;
}

bool EncodeEnd(WireWriter& w, const EndData& e) {
  FrameScope frame(w, kEnd);
  w.Uint64(1, e.seq);
  w.Uint64(2, e.time_ns);
  w.Uint64(3, e.events_recorded);
  w.Uint64(4, e.total_dropped);
  w.Int32(5, e.exit_status);
  w.Uint64(6, e.events_in_snapshots);
  w.Bool(7, e.exec);
  return frame.Close();
}

SnapshotEncoder::SnapshotEncoder(WireWriter& w, uint64_t time_ns, SnapshotReason reason,
                                 bool complete_history)
    : w_(w), frame_(w, kSnapshot) {
  w_.Uint64(2, time_ns);
  w_.Enum(3, static_cast<uint32_t>(reason));
  w_.Bool(9, complete_history);
}

void SnapshotEncoder::Add(const LiveEntry& e) {
  switch (e.cls) {
    case LiveClass::kAllocation: {
      size_t m = w_.BeginMessage(4);
      w_.Uint64(1, e.address);
      w_.Uint64(2, e.size);
      // A device still deferred (a wake's pass could not read it) is unknown, not a device.
      w_.Int32(3, e.device == kDeviceDeferred ? -1 : e.device);
      w_.Uint64(4, e.stream);
      w_.Uint64(5, e.pool == kPoolDeferred ? 0 : e.pool);
      w_.Uint64(6, e.stack_id);
      w_.Enum(7, static_cast<uint32_t>(e.api));
      w_.Enum(8, static_cast<uint32_t>(e.kind));
      w_.EndMessage(m);
      break;
    }
    case LiveClass::kReservation: {
      size_t m = w_.BeginMessage(5);
      w_.Uint64(1, e.address);
      w_.Uint64(2, e.size);
      w_.Int32(3, e.device);
      w_.Uint64(4, e.stack_id);
      w_.EndMessage(m);
      break;
    }
    case LiveClass::kHandle: {
      size_t m = w_.BeginMessage(6);
      w_.Uint64(1, e.address);
      w_.Uint64(2, e.size);
      w_.Int32(3, e.device);
      w_.Bool(4, (e.flags & kLiveImported) != 0);
      w_.Bool(5, e.refs <= 0);
      w_.Uint64(6, e.stack_id);
      w_.EndMessage(m);
      break;
    }
    case LiveClass::kMapping: {
      size_t m = w_.BeginMessage(7);
      w_.Uint64(1, e.address);
      w_.Uint64(2, e.size);
      w_.Uint64(3, e.offset);
      w_.Uint64(4, e.handle);
      w_.EndMessage(m);
      break;
    }
    case LiveClass::kBlock: {
      size_t m = w_.BeginMessage(8);
      w_.Uint64(1, e.address);
      w_.Uint64(2, e.size);
      w_.Int32(3, e.device);
      w_.Uint64(4, e.stream);
      w_.Uint64(5, e.pool);
      w_.Uint64(6, e.stack_id);
      w_.Bool(7, (e.flags & kLivePendingFree) != 0);
      w_.Uint64(8, e.handle);
      w_.EndMessage(m);
      break;
    }
  }
}

}  // namespace fragscope::agent
