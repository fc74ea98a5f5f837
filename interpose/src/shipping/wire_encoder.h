// A tiny protobuf wire-format writer that never allocates: it writes into a caller-owned buffer
// and records overflow instead of growing. Only what fragscope.proto needs: varints (uint32/64,
// int32, bool, enum), length-delimited bytes/strings, packed repeated varints and nested
// messages. Fields holding their proto3 default (0, false, empty) are omitted, as libprotobuf
// does; a nested message is always written, since an empty one still marks presence (oneof).
//
// Thread safety: none; one writer per thread. Units: bytes.
#ifndef FRAGSCOPE_INTERPOSE_WIRE_ENCODER_H_
#define FRAGSCOPE_INTERPOSE_WIRE_ENCODER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fragscope::agent {

// Number of bytes `value` takes as a base-128 varint (1..10).
constexpr size_t VarintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

// Writes `value` at `p` as a varint, returns the byte after it. A free function over a local
// pointer: byte stores through a member pointer may alias the writer's own members, so a
// member-based loop reloaded buf_ and pos_ for every byte (a third of the drain thread's
// instructions).
inline uint8_t* PutVarint(uint8_t* p, uint64_t value) {
  while (value >= 0x80) {
    *p++ = static_cast<uint8_t>(value | 0x80);
    value >>= 7;
  }
  *p++ = static_cast<uint8_t>(value);
  return p;
}

// The varint field types in terms of the writer's Uint64 (Derived::Uint64), so that both
// writers below encode them alike.
template <typename Derived>
class VarintFieldForms {
 public:
  void Uint32(uint32_t field, uint32_t value) { Self().Uint64(field, value); }
  void Enum(uint32_t field, uint32_t value) { Self().Uint64(field, value); }
  void Bool(uint32_t field, bool value) { Self().Uint64(field, value ? 1 : 0); }
  // int32 is sign-extended to 64 bits on the wire: -1 takes 10 bytes.
  void Int32(uint32_t field, int32_t value) {
    Self().Uint64(field, static_cast<uint64_t>(static_cast<int64_t>(value)));
  }

 private:
  Derived& Self() { return static_cast<Derived&>(*this); }
};

class WireWriter : public VarintFieldForms<WireWriter> {
 public:
  // A nested length is reserved as one byte, which holds every length below 128 (nearly every
  // event frame and its body); a longer message is moved up by the extra bytes when it ends.
  // (Reserving five bytes and compacting cost two memmove calls per event frame: ~20 % of the
  // drain thread's encoding time.)
  static constexpr size_t kLengthReserve = 1;

  constexpr WireWriter(uint8_t* buffer, size_t capacity) : buf_(buffer), cap_(capacity) {}

  // Field types, as the wire format numbers them.
  static constexpr uint32_t kVarint = 0;
  static constexpr uint32_t kLengthDelimited = 2;

  void Uint64(uint32_t field, uint64_t value) {
    if (value == 0) return;
    if (!overflow_ && cap_ - pos_ >= 2 * kMaxVarint) {  // common case: tag and value fit
      uint8_t* p = buf_ + pos_;
      p = PutVarint(p, (uint64_t{field} << 3) | kVarint);
      p = PutVarint(p, value);
      pos_ = static_cast<size_t>(p - buf_);
      return;
    }
    Tag(field, kVarint);
    RawVarint(value);
  }
  void Bytes(uint32_t field, const void* data, size_t size) {
    if (size == 0) return;
    Tag(field, kLengthDelimited);
    RawVarint(size);
    RawBytes(data, size);
  }
  void String(uint32_t field, const char* str) {
    if (str != nullptr) Bytes(field, str, strlen(str));
  }
  // `repeated uint64` in packed form (the proto3 default).
  void PackedUint64(uint32_t field, const uint64_t* values, size_t count) {
    if (count == 0) return;
    size_t payload = 0;
    for (size_t i = 0; i < count; ++i) payload += VarintSize(values[i]);
    Tag(field, kLengthDelimited);
    RawVarint(payload);
    for (size_t i = 0; i < count; ++i) RawVarint(values[i]);
  }

  // Starts a nested message in `field`; pass the result to EndMessage. Nests freely.
  size_t BeginMessage(uint32_t field) {
    Tag(field, kLengthDelimited);
    return BeginLengthPrefixed();
  }
  // Starts a length-prefixed region with no tag (the stream's frame framing).
  size_t BeginLengthPrefixed() {
    size_t start = pos_;
    Reserve(kLengthReserve);
    return start;
  }
  void EndMessage(size_t start) {
    if (overflow_) return;
    const size_t body = start + kLengthReserve;
    const size_t length = pos_ - body;
    if (length < 0x80) {  // fits the reserved byte
      buf_[start] = static_cast<uint8_t>(length);
      return;
    }
    const size_t n = VarintSize(length);
    if (!Reserve(n - kLengthReserve)) return;
    memmove(buf_ + start + n, buf_ + body, length);
    WriteVarintAt(start, length);
  }

  bool ok() const { return !overflow_; }
  size_t size() const { return pos_; }
  const uint8_t* data() const { return buf_; }
  // Forgets everything written (keeps the buffer).
  void Clear() {
    pos_ = 0;
    overflow_ = false;
  }
  // Drops everything written after `mark` (a size() taken earlier) and clears overflow, so a
  // caller can back out of a frame that did not fit.
  void Truncate(size_t mark) {
    pos_ = mark;
    overflow_ = false;
  }

  void Tag(uint32_t field, uint32_t wire_type) { RawVarint((uint64_t{field} << 3) | wire_type); }
  // A varint field written even when 0 (proto3 `optional`: present means set).
  void PresentUint64(uint32_t field, uint64_t value) {
    Tag(field, kVarint);
    RawVarint(value);
  }
  void RawVarint(uint64_t value) {
    if (!overflow_ && cap_ - pos_ >= kMaxVarint) {  // common case: room for the longest varint
      pos_ = static_cast<size_t>(PutVarint(buf_ + pos_, value) - buf_);
      return;
    }
    if (!Reserve(VarintSize(value))) return;
    pos_ -= VarintSize(value);
    pos_ += WriteVarintAt(pos_, value);
  }
  void RawBytes(const void* data, size_t size) {
    if (!Reserve(size)) return;
    memcpy(buf_ + pos_ - size, data, size);
  }

  // For a caller that writes a region of known maximum size itself (RawWireWriter): where it
  // starts, or nullptr when `bound` bytes do not fit (or the writer overflowed). Nothing is
  // claimed until Commit(end), with `end` at most `bound` bytes past the start.
  uint8_t* Room(size_t bound) { return !overflow_ && cap_ - pos_ >= bound ? buf_ + pos_ : nullptr; }
  void Commit(const uint8_t* end) { pos_ = static_cast<size_t>(end - buf_); }

 private:
  // Claims `n` bytes at the end; false (and overflow) when they do not fit.
  bool Reserve(size_t n) {
    if (overflow_ || cap_ - pos_ < n) {
      overflow_ = true;
      return false;
    }
    pos_ += n;
    return true;
  }
  static constexpr size_t kMaxVarint = 10;
  size_t WriteVarintAt(size_t at, uint64_t value) {
    return static_cast<size_t>(PutVarint(buf_ + at, value) - (buf_ + at));
  }

  uint8_t* buf_;
  size_t cap_;
  size_t pos_ = 0;
  bool overflow_ = false;
};

// WireWriter's field methods without bounds checks, over room the caller has made sure of
// (WireWriter::Room). For small messages of bounded size (event frames): one check per frame
// instead of one per field. Fields numbered below 16 only (their tag is one byte).
class RawWireWriter : public VarintFieldForms<RawWireWriter> {
 public:
  explicit RawWireWriter(uint8_t* p) : p_(p) {}

  void Uint64(uint32_t field, uint64_t value) {
    if (value == 0) return;
    *p_++ = static_cast<uint8_t>((field << 3) | WireWriter::kVarint);
    p_ = PutVarint(p_, value);
  }
  void PresentUint64(uint32_t field, uint64_t value) {
    *p_++ = static_cast<uint8_t>((field << 3) | WireWriter::kVarint);
    p_ = PutVarint(p_, value);
  }
  void Bytes(uint32_t field, const void* data, size_t size) {
    if (size == 0) return;
    *p_++ = static_cast<uint8_t>((field << 3) | WireWriter::kLengthDelimited);
    p_ = PutVarint(p_, size);
    memcpy(p_, data, size);
    p_ += size;
  }

  uint8_t* end() const { return p_; }

  // Bytes one field takes at most: a one-byte tag and a 10-byte varint.
  static constexpr size_t kMaxVarintField = 11;

 private:
  uint8_t* p_;
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_WIRE_ENCODER_H_
