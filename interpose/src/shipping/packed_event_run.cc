#include "shipping/packed_event_run.h"

#include <cstring>

namespace fragscope::agent {
namespace {

namespace packed = wire::packed;

// A length reserved as a three-byte varint (values below 2^21), written once it is known.
constexpr size_t kLengthBytes = 3;
void PutPaddedLength(uint8_t* p, size_t value) {
  p[0] = static_cast<uint8_t>(value | 0x80);
  p[1] = static_cast<uint8_t>((value >> 7) | 0x80);
  p[2] = static_cast<uint8_t>(value >> 14);
}
static_assert(PackedEventRun::kMaxEventBytes + PackedEventRun::kOverheadBytes < (1u << 21));

constexpr uint8_t kPackedTag[2] = {
    static_cast<uint8_t>(((wire::Frame::kPacked << 3) | WireWriter::kLengthDelimited) | 0x80),
    static_cast<uint8_t>(wire::Frame::kPacked >> 4)};
static_assert(wire::Frame::kPacked >= 16 && wire::Frame::kPacked < 2048);
constexpr uint8_t kEventsTag = (wire::PackedEvents::kEvents << 3) | WireWriter::kLengthDelimited;
constexpr uint8_t kCountTag = (wire::PackedEvents::kCount << 3) | WireWriter::kVarint;

}  // namespace

bool PackedEventRun::Open(WireWriter& w) {
  uint8_t* p = w.Room(kOverheadBytes + kMaxPackedEventBytes);
  if (p == nullptr) return false;
  start_ = w.size();
  // frame length, body tag, body length, events tag, events length: filled in by Close
  p[kLengthBytes] = kPackedTag[0];
  p[kLengthBytes + 1] = kPackedTag[1];
  p[2 * kLengthBytes + 2] = kEventsTag;
  w.Commit(p + 3 * kLengthBytes + 3);
  events_ = w.size();
  count_ = 0;
  state_.Start();
  open_ = true;
  return true;
}

uint8_t* PackedEventRun::Room(WireWriter& w) {
  if (!open_ && !Open(w)) return nullptr;
  if (w.size() - events_ + kMaxPackedEventBytes > kMaxEventBytes) return nullptr;
  return w.Room(kMaxPackedEventBytes + kOverheadBytes);
}

uint8_t* PackedEventRun::Finish(uint8_t* p, uint32_t body, const EventWriter& fields,
                                const uint8_t* values) {
  const uint64_t seq = fields.common_[wire::EventCommon::kSeq];
  const uint64_t time = fields.common_[wire::EventCommon::kTimeNs];
  const uint64_t tid = fields.common_[wire::EventCommon::kTid];
  uint8_t header = static_cast<uint8_t>(body);
  if (seq == state_.seq + 1) header |= packed::kSeqIsNext;
  if (tid == state_.tid) header |= packed::kSameTid;
  if (fields.address_ == state_.address) header |= packed::kSameAddress;
  if (fields.mask_ == 0) header |= packed::kSameFields;
  *p++ = header;
  if ((header & packed::kSeqIsNext) == 0) {
    p = PutVarint(p, packed::ZigZag(static_cast<int64_t>(seq - state_.seq)));
  }
  p = PutVarint(p, packed::ZigZag(static_cast<int64_t>(time - state_.time)));
  if ((header & packed::kSameTid) == 0) p = PutVarint(p, tid);
  if ((header & packed::kSameAddress) == 0) p = PutVarint(p, fields.address_);
  if (fields.mask_ != 0) {
    p = PutVarint(p, fields.mask_);
    const size_t n = static_cast<size_t>(fields.values_ - values);
    memcpy(p, values, n);
    p += n;
  }
  state_.seq = seq;
  state_.time = time;
  state_.tid = tid;
  state_.address = fields.address_;
  return p;
}

void PackedEventRun::Close(WireWriter& w) {
  if (!open_) return;
  open_ = false;
  const size_t events = w.size() - events_;
  if (count_ == 0) {
    w.Truncate(start_);
    return;
  }
  // Add kept room for the count behind every event.
  uint8_t* p = w.Room(1 + 5);
  *p++ = kCountTag;
  w.Commit(PutVarint(p, count_));
  uint8_t* frame = const_cast<uint8_t*>(w.data()) + start_;
  const size_t total = w.size() - start_;
  PutPaddedLength(frame, total - kLengthBytes);
  PutPaddedLength(frame + kLengthBytes + 2, total - 2 * kLengthBytes - 2);
  PutPaddedLength(frame + 2 * kLengthBytes + 3, events);
}

}  // namespace fragscope::agent
