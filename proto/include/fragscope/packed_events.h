// The encoding of PackedEvents.events (fragscope.proto, format 2.0), shared by its writer (the
// agent's drain, which cannot link libprotobuf) and its reader (the collector's FrameReader).
// proto/README.md ("Packed events") describes it for people; this header is what both sides
// compile against, so they cannot disagree.
//
// An event is its message's field values by field number (1 seq .. 14), as libprotobuf would
// parse them from the event sent alone: int32 and enum fields sign-extended to 64 bits. Each
// packed event is written relative to the one before it in the same run (before the first: all
// zero):
//
//   header byte: bits 0-3 the event's Frame field number (kAlloc, kFree, kMap, kHandle, kBlock),
//                kSeqIsNext, kSameTid, kSameAddress, kSameFields
//   seq        zigzag varint of (seq - previous seq), absent with kSeqIsNext (previous + 1)
//   time_ns    zigzag varint of (time_ns - previous time_ns), always
//   tid        varint, absent with kSameTid
//   address    varint of the address field (AddressField), absent with kSameAddress (the
//              previous event's address field, whatever its message)
//   mask       varint, absent with kSameFields (then 0): bit (f - kFirstMaskedField) says field f
//              changed and follows: `api` (bit 0) against the previous event of the same
//              message, every other field against the previous event of the same api (so an
//              allocation compares with the last allocation, not with the free in between)
//   values     one varint per bit of the mask, by ascending field: the value itself, or for an
//              int32 or enum field the zigzag of the value as an int32; `api` below kApis
//
// Thread safety: constants and pure functions only.
#ifndef FRAGSCOPE_PACKED_EVENTS_H_
#define FRAGSCOPE_PACKED_EVENTS_H_

#include <cstdint>
#include <cstring>

#include "fragscope/wire_constants.h"
#include "fragscope/wire_events.h"

namespace fragscope::wire::packed {

inline constexpr uint8_t kBodyBits = 0x0f;
inline constexpr uint8_t kSeqIsNext = 0x10;
inline constexpr uint8_t kSameTid = 0x20;
inline constexpr uint8_t kSameAddress = 0x40;
inline constexpr uint8_t kSameFields = 0x80;

// The largest field number a packed event holds (AllocEvent.in_capture). An event with a
// larger field set (AllocEvent.failed_release_result) is sent as a frame of its own.
inline constexpr uint32_t kMaxField = AllocEvent::kInCapture;
// Fields 1..3 (seq, time, tid) have their own places; the mask covers kFirstMaskedField and up.
inline constexpr uint32_t kFirstMaskedField = EventCommon::kApi;
static_assert(EventCommon::kSeq == 1 && EventCommon::kTimeNs == 2 && EventCommon::kTid == 3 &&
              kFirstMaskedField == 4);

// What a reader needs to know of each packable message: its address field, its largest field
// number, and which of its fields are int32/enum (zigzag on the wire), uint32 or bool (refused
// when larger), as bit sets by field number.
struct Shape {
  uint32_t address_field = 0;  // 0: not a packable message
  uint32_t max_field = 0;
  uint32_t int32_fields = 0;
  uint32_t uint32_fields = 0;
  uint32_t bool_fields = 0;
};

constexpr uint32_t Bit(uint32_t field) { return uint32_t{1} << field; }

constexpr Shape ShapeOf(uint32_t body) {
  constexpr uint32_t kCommonInt32 = Bit(EventCommon::kApi) | Bit(EventCommon::kResult);
  constexpr uint32_t kCommonUint32 = Bit(EventCommon::kTid);
  switch (body) {
    case Frame::kAlloc:
      return {AllocEvent::kAddress, AllocEvent::kInCapture,
              kCommonInt32 | Bit(AllocEvent::kDevice) | Bit(AllocEvent::kKind), kCommonUint32,
              Bit(AllocEvent::kInCapture)};
    case Frame::kFree:
      return {FreeEvent::kAddress, FreeEvent::kPool, kCommonInt32 | Bit(FreeEvent::kDevice),
              kCommonUint32, 0};
    case Frame::kMap:
      return {MapEvent::kAddress, MapEvent::kAlignment,
              kCommonInt32 | Bit(MapEvent::kOp) | Bit(MapEvent::kDevice), kCommonUint32, 0};
    case Frame::kHandle:
      return {HandleEvent::kAddress, HandleEvent::kAddress,
              kCommonInt32 | Bit(HandleEvent::kOp) | Bit(HandleEvent::kDevice),
              kCommonUint32 | Bit(HandleEvent::kHandleType), 0};
    case Frame::kBlock:
      return {BlockEvent::kAddress, BlockEvent::kAllocator,
              kCommonInt32 | Bit(BlockEvent::kOp) | Bit(BlockEvent::kDevice), kCommonUint32, 0};
    default:
      return {};
  }
}

// Each body code fits the header's low bits, and no packable message has a field past kMaxField.
static_assert(Frame::kAlloc <= kBodyBits && Frame::kFree <= kBodyBits && Frame::kMap <= kBodyBits &&
              Frame::kHandle <= kBodyBits && Frame::kBlock <= kBodyBits);
static_assert(ShapeOf(Frame::kAlloc).max_field <= kMaxField &&
              ShapeOf(Frame::kFree).max_field <= kMaxField &&
              ShapeOf(Frame::kMap).max_field <= kMaxField &&
              ShapeOf(Frame::kHandle).max_field <= kMaxField &&
              ShapeOf(Frame::kBlock).max_field <= kMaxField);

// A packed event's api is below this (every Api value is); its state is kept per api.
inline constexpr uint32_t kApis = 128;
static_assert(EventCommon::kApi == kFirstMaskedField, "api is the mask's bit 0");

// A slot per packable message, for per-message state (0..4).
constexpr int SlotOf(uint32_t body) {
  switch (body) {
    case Frame::kAlloc:
      return 0;
    case Frame::kFree:
      return 1;
    case Frame::kMap:
      return 2;
    case Frame::kHandle:
      return 3;
    default:
      return 4;  // kBlock
  }
}
inline constexpr int kSlots = 5;

// What both sides keep while a run is written or read, so that they cannot keep it differently:
// the previous event's seq, time, tid and address, the last api of each message, and for each
// api the fields of its previous event. Start() begins a run. No allocation; not thread-safe.
class RunState {
 public:
  void Start() {
    seq = time = tid = address = 0;
    std::memset(last_api, 0, sizeof(last_api));
    if (++run_ == 0) {  // after 2^32 runs: no entry may look current by chance
      std::memset(api_run_, 0, sizeof(api_run_));
      run_ = 1;
    }
  }
  // The fields of the previous event of `api` (below kApis) in this run, all zero before the
  // first: an entry from an earlier run is cleared when first asked for.
  uint64_t* ApiFields(uint64_t api) {
    if (api_run_[api] != run_) {
      std::memset(api_fields_[api], 0, sizeof(api_fields_[api]));
      api_run_[api] = run_;
    }
    return api_fields_[api];
  }

  uint64_t seq = 0;
  uint64_t time = 0;
  uint64_t tid = 0;
  uint64_t address = 0;
  uint64_t last_api[kSlots] = {};  // by SlotOf(message)

 private:
  uint64_t api_fields_[kApis][kMaxField + 1] = {};
  uint32_t api_run_[kApis] = {};
  uint32_t run_ = 0;  // runs started
};

constexpr uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
constexpr int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

}  // namespace fragscope::wire::packed

#endif  // FRAGSCOPE_PACKED_EVENTS_H_
