#include "fragscope/trace/hot_frame_decoder.h"

#include <google/protobuf/message.h>
#include <google/protobuf/unknown_field_set.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "fragscope/wire_constants.h"
#include "fragscope/wire_events.h"
#include "varint_reader.h"

namespace fragscope {
namespace {

using internal::ReadVarint;
using internal::ReadVarintFar;

// Every field the decoder takes has a one-byte tag.
static_assert(HotEvent::kMaxField < 16);

// For each one-byte tag: 1 << its field number when it is a varint tag (wire type 0, no
// continuation bit) of a field below 16, else 0.
constexpr auto kTagBit = [] {
  std::array<uint16_t, 256> bits{};
  for (uint32_t tag = 0; tag < 256; ++tag) {
    if ((tag & 0x87) == 0) bits[tag] = static_cast<uint16_t>(1u << (tag >> 3));
  }
  return bits;
}();

// libprotobuf's conversions from the varint read (generated _InternalParse): 32-bit fields keep
// the low 32 bits (ReadVarint32), enums the low 32 bits of the 64 read, bools "not zero".
inline uint32_t U32(uint64_t v) { return static_cast<uint32_t>(v); }
inline int32_t I32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }
inline v1::Api ApiOf(uint64_t v) { return static_cast<v1::Api>(I32(v)); }

// The fields common to every event message (the same numbers in all of them).
template <typename Event>
inline void SetCommon(Event* e, const uint64_t* f) {
  using A = wire::EventCommon;
  e->set_seq(f[A::kSeq]);
  e->set_time_ns(f[A::kTimeNs]);
  e->set_tid(U32(f[A::kTid]));
  e->set_api(ApiOf(f[A::kApi]));
  e->set_result(I32(f[A::kResult]));
  e->set_stack_id(f[A::kStackId]);
}

// Sets every field of out's event from `f`. A message from an earlier parse may also hold
// unknown fields, which a parse would have cleared: `clear` says whether to clear the message
// first (a message only this decoder ever fills has none, and every field is set below).
template <typename Event>
inline Event* Prepare(Event* e, bool clear) {
  if (clear) e->Clear();
  return e;
}

void StoreInto(const HotEvent& event, bool clear, v1::Frame* out) {
  const uint64_t* f = event.field;
  switch (event.body) {
    case v1::Frame::kAlloc: {
      using W = wire::AllocEvent;
      v1::AllocEvent* e = Prepare(out->mutable_alloc(), clear);
      SetCommon(e, f);
      e->set_address(f[W::kAddress]);
      e->set_size(f[W::kSize]);
      e->set_device(I32(f[W::kDevice]));
      e->set_stream(f[W::kStream]);
      e->set_pool(f[W::kPool]);
      e->set_kind(static_cast<v1::MemoryKind>(I32(f[W::kKind])));
      e->set_pitch(f[W::kPitch]);
      e->set_in_capture(f[W::kInCapture] != 0);
      return;
    }
    case v1::Frame::kFree: {
      using W = wire::FreeEvent;
      v1::FreeEvent* e = Prepare(out->mutable_free(), clear);
      SetCommon(e, f);
      e->set_address(f[W::kAddress]);
      e->set_size(f[W::kSize]);
      e->set_device(I32(f[W::kDevice]));
      e->set_stream(f[W::kStream]);
      e->set_pool(f[W::kPool]);
      return;
    }
    case v1::Frame::kMap: {
      using W = wire::MapEvent;
      v1::MapEvent* e = Prepare(out->mutable_map(), clear);
      SetCommon(e, f);
      e->set_op(static_cast<v1::MapEvent::Op>(I32(f[W::kOp])));
      e->set_address(f[W::kAddress]);
      e->set_size(f[W::kSize]);
      e->set_offset(f[W::kOffset]);
      e->set_handle(f[W::kHandle]);
      e->set_device(I32(f[W::kDevice]));
      e->set_alignment(f[W::kAlignment]);
      return;
    }
    case v1::Frame::kHandle: {
      using W = wire::HandleEvent;
      v1::HandleEvent* e = Prepare(out->mutable_handle(), clear);
      SetCommon(e, f);
      e->set_op(static_cast<v1::HandleEvent::Op>(I32(f[W::kOp])));
      e->set_handle(f[W::kHandle]);
      e->set_size(f[W::kSize]);
      e->set_device(I32(f[W::kDevice]));
      e->set_handle_type(U32(f[W::kHandleType]));
      e->set_address(f[W::kAddress]);
      return;
    }
    case v1::Frame::kBlock: {
      using W = wire::BlockEvent;
      v1::BlockEvent* e = Prepare(out->mutable_block(), clear);
      SetCommon(e, f);
      e->set_op(static_cast<v1::BlockEvent::Op>(I32(f[W::kOp])));
      e->set_address(f[W::kAddress]);
      e->set_size(f[W::kSize]);
      e->set_device(I32(f[W::kDevice]));
      e->set_stream(f[W::kStream]);
      e->set_pool(f[W::kPool]);
      e->set_allocator(f[W::kAllocator]);
      return;
    }
    default:
      return;  // not reached: ParseHotEvent only passes the five above
  }
}

}  // namespace

bool ParseHotEvent(const unsigned char* data, std::size_t size, HotEvent* event) {
  if (size < 2) return false;
  const unsigned char* p = data;
  const unsigned char* const end = data + size;
  // The Frame's one field: a one-byte tag, length-delimited (wire type 2), of a hot event.
  uint32_t body = 0;
  uint32_t max_field = 0;
  // max_field: the last field StoreInto sets (a frame with a later one is left to libprotobuf).
  switch (*p++) {
    case (v1::Frame::kAlloc << 3) | 2:
      body = v1::Frame::kAlloc;
      max_field = wire::AllocEvent::kInCapture;
      break;
    case (v1::Frame::kFree << 3) | 2:
      body = v1::Frame::kFree;
      max_field = wire::FreeEvent::kPool;
      break;
    case (v1::Frame::kMap << 3) | 2:
      body = v1::Frame::kMap;
      max_field = wire::MapEvent::kAlignment;
      break;
    case (v1::Frame::kHandle << 3) | 2:
      body = v1::Frame::kHandle;
      max_field = wire::HandleEvent::kAddress;
      break;
    case (v1::Frame::kBlock << 3) | 2:
      body = v1::Frame::kBlock;
      max_field = wire::BlockEvent::kAllocator;
      break;
    default:
      return false;
  }
  uint64_t length = 0;
  p = ReadVarint(p, end, &length);
  // At most 4 bytes: libprotobuf reads a length in at most 5 and refuses some 5-byte ones, and
  // a length that fits a frame needs 4 (kMaxFrameBytes < 2^28). The sub-message must fill the
  // rest of the frame exactly: anything after it is another top-level field (a second body
  // field, an unknown one), which libprotobuf merges or keeps.
  if (p == nullptr || p - data > 5 || length != static_cast<uint64_t>(end - p)) return false;
  // Field values by number; absent fields are 0, as after Clear(). A field given twice keeps
  // the last value, as libprotobuf does for singular scalars.
  uint64_t* f = event->field;
  // Unrolled stores, not memset: GCC turns a 120-byte memset (or a plain loop) into `rep
  // stosq`, whose start-up was a fifth of this function's time in perf.
#pragma GCC unroll 16
  for (int i = 0; i <= HotEvent::kMaxField; ++i) f[i] = 0;
  // One-byte tags of varint fields only (every field of these messages is a varint below 16);
  // field 0, other wire types and unknown numbers go to libprotobuf. One table load and one
  // branch per field (kTagBit), where three tests took two more instructions of every field.
  const uint32_t allowed = (2u << max_field) - 2;  // field numbers 1..max_field
  auto tag_ok = [allowed](uint32_t tag) { return (kTagBit[tag] & allowed) != 0; };
  // A tag and the longest varint after it (11 bytes) fit before the end: no end checks.
  while (end - p >= 11) {
    const uint32_t tag = *p++;
    if (!tag_ok(tag)) return false;
    p = ReadVarintFar(p, end, &f[tag >> 3]);
    if (p == nullptr) return false;
  }
  while (p != end) {
    const uint32_t tag = *p++;
    if (!tag_ok(tag)) return false;
    p = ReadVarint(p, end, &f[tag >> 3]);
    if (p == nullptr) return false;
  }
  event->body = body;
  return true;
}

void StoreHotEvent(const HotEvent& event, v1::Frame* out) {
  // The frame's own unknown fields (from an earlier libprotobuf parse into *out) would not
  // survive a parse any more than its previous body. (Generated proto3 classes have no
  // unknown_fields() of their own: through reflection, looked up once.)
  static const google::protobuf::Reflection* const reflection = v1::Frame::GetReflection();
  if (!reflection->GetUnknownFields(*out).empty()) reflection->MutableUnknownFields(out)->Clear();
  StoreInto(event, /*clear=*/true, out);
}

bool DecodeHotFrame(const unsigned char* data, std::size_t size, v1::Frame* out) {
  HotEvent event;
  if (!ParseHotEvent(data, size, &event)) return false;
  StoreHotEvent(event, out);
  return true;
}

const v1::Frame* HotFrameSet::Store(const HotEvent& event) {
  v1::Frame* out = &frames_[Slot(event.body)];
  // Only Store ever fills these frames, and it sets every field: nothing to clear.
  StoreInto(event, /*clear=*/false, out);
  return out;
}

}  // namespace fragscope
