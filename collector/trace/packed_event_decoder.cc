#include "fragscope/trace/packed_event_decoder.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "varint_reader.h"

namespace fragscope {
namespace {

namespace packed = wire::packed;

static_assert(HotEvent::kMaxField == static_cast<int>(packed::kMaxField));

constexpr unsigned char kLengthDelimited = 2;
constexpr unsigned char kVarint = 0;

// Reads the varint at *p (before end) and moves *p past it; false when it runs past end, is
// longer than 10 bytes or holds more than 64 bits (*p then unchanged).
inline bool ReadVarint(const unsigned char** p, const unsigned char* end, uint64_t* value) {
  const unsigned char* after = internal::ReadVarint(*p, end, value);
  if (after == nullptr) return false;
  *p = after;
  return true;
}

// Per Frame field number (the header's low bits): the message's shape and the mask bits it may
// carry (its fields from kFirstMaskedField on, less its address), worked out once.
struct BodyInfo {
  packed::Shape shape;
  uint32_t allowed_mask = 0;
};
constexpr BodyInfo InfoOf(uint32_t body) {
  BodyInfo info{packed::ShapeOf(body), 0};
  if (info.shape.address_field == 0) return info;
  for (uint32_t f = packed::kFirstMaskedField; f <= info.shape.max_field; ++f) {
    if (f != info.shape.address_field) info.allowed_mask |= 1u << (f - packed::kFirstMaskedField);
  }
  return info;
}
constexpr BodyInfo kBodies[packed::kBodyBits + 1] = {
    InfoOf(0), InfoOf(1), InfoOf(2),  InfoOf(3),  InfoOf(4),  InfoOf(5),  InfoOf(6),  InfoOf(7),
    InfoOf(8), InfoOf(9), InfoOf(10), InfoOf(11), InfoOf(12), InfoOf(13), InfoOf(14), InfoOf(15)};

}  // namespace

bool IsPackedFrame(const unsigned char* data, std::size_t size) {
  return size >= 2 &&
         data[0] ==
             static_cast<unsigned char>(((wire::Frame::kPacked << 3) | kLengthDelimited) | 0x80) &&
         data[1] == (wire::Frame::kPacked >> 4);
}

std::string PackedEventDecoder::Start(const unsigned char* data, std::size_t size) {
  remaining_ = count_ = 0;
  const unsigned char* p = data + 2;
  const unsigned char* const end = data + size;
  uint64_t body = 0;
  if (!IsPackedFrame(data, size) || !ReadVarint(&p, end, &body) ||
      body != static_cast<uint64_t>(end - p)) {
    return "a packed-events frame whose length does not match its bytes";
  }
  // PackedEvents: `events` and `count`, in any order; a field this reader does not know is
  // skipped (a newer minor may add one).
  const unsigned char* events = nullptr;
  uint64_t events_size = 0;
  uint64_t count = 0;
  while (p < end) {
    uint64_t tag = 0;
    uint64_t value = 0;
    if (!ReadVarint(&p, end, &tag)) return "a packed-events frame with a malformed field tag";
    const uint64_t type = tag & 7;
    if (type == kVarint) {
      if (!ReadVarint(&p, end, &value)) return "a packed-events frame with a malformed varint";
      if ((tag >> 3) == wire::PackedEvents::kCount) count = value;
    } else if (type == kLengthDelimited) {
      if (!ReadVarint(&p, end, &value) || value > static_cast<uint64_t>(end - p)) {
        return "a packed-events frame whose field runs past its end";
      }
      if ((tag >> 3) == wire::PackedEvents::kEvents) {
        events = p;
        events_size = value;
      }
      p += value;
    } else if (type == 1 || type == 5) {  // fixed64, fixed32
      const uint64_t n = type == 1 ? 8 : 4;
      if (n > static_cast<uint64_t>(end - p)) return "a packed-events frame cut inside a field";
      p += n;
    } else {
      return absl::StrFormat("a packed-events frame with a field of wire type %d", type);
    }
  }
  if (count == 0 || events_size == 0) {
    return absl::StrFormat("a packed-events frame that says %d events in %d bytes", count,
                           events_size);
  }
  // Every event takes at least its header and its time: more events than half the bytes is a
  // count no writer made.
  if (count > events_size / 2) {
    return absl::StrFormat("a packed-events frame that says %d events in only %d bytes", count,
                           events_size);
  }
  p_ = events;
  end_ = events + events_size;
  remaining_ = count_ = count;
  state_.Start();
  return std::string();
}

bool PackedEventDecoder::Fail(const std::string& what, std::string* error) {
  *error = absl::StrFormat("packed event %d of %d: %s", count_ - remaining_ + 1, count_, what);
  remaining_ = 0;
  return false;
}

bool PackedEventDecoder::Next(HotEvent* event, std::string* error) {
  if (remaining_ == 0) return Fail("no event left in the run", error);
  if (p_ >= end_) return Fail("the run's bytes end before its count", error);
  const unsigned char header = *p_++;
  const uint32_t body = header & packed::kBodyBits;
  const BodyInfo& info = kBodies[body];
  if (info.shape.address_field == 0) {
    return Fail(absl::StrFormat("message %d is not one a run holds", body), error);
  }
  uint64_t v = 0;
  uint64_t seq = state_.seq + 1;
  if ((header & packed::kSeqIsNext) == 0) {
    if (!ReadVarint(&p_, end_, &v)) return Fail("malformed seq", error);
    seq = state_.seq + static_cast<uint64_t>(packed::UnZigZag(v));
  }
  if (!ReadVarint(&p_, end_, &v)) return Fail("malformed time", error);
  const uint64_t time = state_.time + static_cast<uint64_t>(packed::UnZigZag(v));
  uint64_t tid = state_.tid;
  if ((header & packed::kSameTid) == 0) {
    if (!ReadVarint(&p_, end_, &tid) || tid > UINT32_MAX) return Fail("malformed thread id", error);
  }
  uint64_t address = state_.address;
  if ((header & packed::kSameAddress) == 0) {
    if (!ReadVarint(&p_, end_, &address)) return Fail("malformed address", error);
  }
  uint64_t mask = 0;
  if ((header & packed::kSameFields) == 0) {
    if (!ReadVarint(&p_, end_, &mask)) return Fail("malformed field mask", error);
    // Only fields the message has, and not the address (it has its own place).
    if (mask == 0 || (mask & ~uint64_t{info.allowed_mask}) != 0) {
      return Fail(
          absl::StrFormat("field mask 0x%x names fields message %d does not have", mask, body),
          error);
    }
  }
  // The api first (bit 0, against the message's last): the other fields are the api's.
  uint64_t& last_api = state_.last_api[packed::SlotOf(body)];
  if ((mask & 1) != 0) {
    if (!ReadVarint(&p_, end_, &v)) return Fail("malformed api", error);
    const int64_t api = packed::UnZigZag(v);
    if (api < 0 || api >= static_cast<int64_t>(packed::kApis)) {
      return Fail(absl::StrFormat("api %d is out of range", api), error);
    }
    last_api = static_cast<uint64_t>(api);
  }
  // The event starts as the api's previous one, then takes what changed; each change is stored
  // in both places. (Decoding into the state and copying it out after read it back right after
  // storing it, in wider loads than the stores: a stall on every event.)
  uint64_t* const prev = state_.ApiFields(last_api);
  uint64_t* const f = event->field;
  std::memcpy(f, prev, sizeof(event->field));
  auto set = [&](uint32_t field, uint64_t value) {
    f[field] = value;
    prev[field] = value;
  };
  set(wire::EventCommon::kSeq, seq);
  set(wire::EventCommon::kTimeNs, time);
  set(wire::EventCommon::kTid, tid);
  set(wire::EventCommon::kApi, last_api);
  set(info.shape.address_field, address);
  for (uint32_t bits = static_cast<uint32_t>(mask) & ~1u; bits != 0; bits &= bits - 1) {
    const uint32_t field = packed::kFirstMaskedField + static_cast<uint32_t>(__builtin_ctz(bits));
    if (!ReadVarint(&p_, end_, &v))
      return Fail(absl::StrFormat("malformed field %d", field), error);
    const uint32_t bit = packed::Bit(field);
    if ((info.shape.int32_fields & bit) != 0) {
      const int64_t s = packed::UnZigZag(v);
      if (s < INT32_MIN || s > INT32_MAX) {
        return Fail(absl::StrFormat("field %d holds %d, not an int32", field, s), error);
      }
      v = static_cast<uint64_t>(s);
    } else if (((info.shape.uint32_fields & bit) != 0 && v > UINT32_MAX) ||
               ((info.shape.bool_fields & bit) != 0 && v > 1)) {
      return Fail(absl::StrFormat("field %d holds %d, more than its type holds", field, v), error);
    }
    set(field, v);
  }
  state_.seq = seq;
  state_.time = time;
  state_.tid = tid;
  state_.address = address;
  event->body = body;
  if (--remaining_ == 0 && p_ != end_) {
    return Fail(absl::StrFormat("%d bytes after the run's last event", end_ - p_), error);
  }
  return true;
}

}  // namespace fragscope
