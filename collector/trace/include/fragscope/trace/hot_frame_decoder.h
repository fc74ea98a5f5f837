// A hand-written decoder for the frames that make up nearly all of a trace: the five event
// messages AllocEvent, FreeEvent, MapEvent, HandleEvent and BlockEvent.
//
// libprotobuf's generic parser spent about 900 instructions on each of these frames (a parse
// context, a limit pushed per sub-message, a call per varint, a sub-message allocated per
// frame), most of the collector's decoding time. These messages have a fixed shape: one
// sub-message of at most 14 varint fields with one-byte tags. Decoding exactly that shape takes
// a loop over bytes.
//
// Guarantees:
// - Same result: when DecodeHotFrame returns true, *out is exactly the message that
//   out->ParseFromArray(data, size) would have left (same body case, same field values, no
//   unknown fields), whatever *out held before.
// - Narrow on purpose: anything outside that shape returns false with *out unchanged, and the
//   caller parses the frame with libprotobuf, which then decides, exactly as before, whether it
//   is valid and what it means. That covers every other frame type, unknown or repeated
//   top-level fields, multi-byte or non-varint tags, unknown field numbers (libprotobuf keeps
//   them as unknown fields), varints running past the frame or longer than 64 bits, and
//   malformed bytes of any kind. So a malformed frame is reported with the same error as before,
//   and the decoder never reads outside [data, data + size).
// - No allocation, except the event sub-message when *out does not already hold one of that
//   type (then as mutable_<event>() does: on out's arena if it has one).
// - Frames it accepts hold no repeated and no unknown field, so they are within every
//   FrameLimits limit: a caller may skip FrameLimitViolation for them.
// Thread-safe (no state).
#ifndef FRAGSCOPE_TRACE_HOT_FRAME_DECODER_H_
#define FRAGSCOPE_TRACE_HOT_FRAME_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "fragscope.pb.h"
#include "fragscope/wire_constants.h"

namespace fragscope {

// One hot event as read from the wire: which event (its Frame body case) and its fields by
// field number (absent fields 0).
struct HotEvent {
  // The largest field number the decoder takes: AllocEvent's in_capture (its
  // failed_release_result, set only on a failed release, is left to libprotobuf).
  static constexpr int kMaxField = wire::AllocEvent::kInCapture;
  uint32_t body = 0;  // v1::Frame::kAlloc, kFree, kMap, kHandle or kBlock
  uint64_t field[kMaxField + 1];
};

// Reads the serialized Frame in [data, data + size) into *event when it is one of the five hot
// event frames in the shape described above; otherwise returns false (*event then unspecified).
bool ParseHotEvent(const unsigned char* data, std::size_t size, HotEvent* event);
// Makes *out exactly the frame that `event` was read from (see "Same result" above).
void StoreHotEvent(const HotEvent& event, v1::Frame* out);
// ParseHotEvent then StoreHotEvent; false, with *out unchanged, when the frame is not taken.
bool DecodeHotFrame(const unsigned char* data, std::size_t size, v1::Frame* out);

// One frame per hot event type, for replay loops that apply each frame and let it go: each
// frame keeps its event sub-message from one event to the next, so a decode allocates nothing
// and does not even clear the message (it only ever holds what Store wrote, and Store writes
// every field). Not thread-safe.
class HotFrameSet {
 public:
  // The frame of event.body type, now holding the event. Valid until the next Store of an
  // event of the same type; the frames live as long as the set.
  const v1::Frame* Store(const HotEvent& event);

 private:
  static int Slot(uint32_t body) {
    switch (body) {
      case v1::Frame::kAlloc:
        return 0;
      case v1::Frame::kFree:
        return 1;
      case v1::Frame::kMap:
        return 2;
      case v1::Frame::kHandle:
        return 3;
      default:
        return 4;  // kBlock
    }
  }
  v1::Frame frames_[5];
};

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_HOT_FRAME_DECODER_H_
