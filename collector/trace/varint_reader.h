// Varint readers for the collector's hand-written decoders (hot_frame_decoder.cc,
// packed_event_decoder.cc): bounds-checked, no allocation, tuned for the short values event
// fields mostly are. Private to collector/trace.
#ifndef FRAGSCOPE_TRACE_VARINT_READER_H_
#define FRAGSCOPE_TRACE_VARINT_READER_H_

#include <cstdint>
#include <cstring>

#include "absl/base/internal/endian.h"
#include "absl/numeric/bits.h"

namespace fragscope::internal {

// Reads one varint at p (p < end not required). Returns the byte after it, or nullptr when it
// runs past `end`, is longer than 10 bytes, or carries bits beyond 64 in its 10th byte. The last
// two are left to libprotobuf to judge: the decoder only takes what has one obvious meaning.
inline const unsigned char* ReadVarintSlow(const unsigned char* p, const unsigned char* end,
                                           uint64_t* value) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return nullptr;
    const uint64_t b = *p++;
    if (shift == 63 && b > 1) return nullptr;
    result |= (b & 0x7f) << shift;
    if (b < 0x80) {
      *value = result;
      return p;
    }
  }
  return nullptr;
}

// A varint of any length at p, with at least 8 bytes left from p: all of up to 8 bytes at once
// from one unaligned load (a byte loop took about 8 instructions a byte, a third of the
// decoding); 9 and 10 bytes (rare) byte by byte.
inline const unsigned char* ReadVarintWord(const unsigned char* p, const unsigned char* end,
                                           uint64_t* value) {
  uint64_t word;
  std::memcpy(&word, p, sizeof(word));
  word = absl::little_endian::ToHost64(word);
  // Bit 7 of each byte is "more follows": the first byte without it ends the varint.
  const uint64_t stops = ~word & 0x8080808080808080u;
  if (stops == 0) return ReadVarintSlow(p, end, value);  // 9 or 10 bytes: rare
  const int bits = absl::countr_zero(stops) + 1;         // up to and with the last byte's bit 7
  // Keep the varint's bytes (bits is 8 to 64: both shifts are defined), drop the flags, then
  // close the 1-bit gaps between the 7-bit groups.
  uint64_t x = (word << (64 - bits)) >> (64 - bits);
  x &= 0x7f7f7f7f7f7f7f7fu;
  x = ((x & 0x7f007f007f007f00u) >> 1) | (x & 0x007f007f007f007fu);
  x = ((x & 0x3fff00003fff0000u) >> 2) | (x & 0x00003fff00003fffu);
  x = ((x & 0x0fffffff00000000u) >> 4) | (x & 0x000000000fffffffu);
  *value = x;
  return p + bits / 8;
}

// The same, when at least 10 bytes (the longest varint) are left from p: no end checks on the
// paths below 9 bytes. (Most fields of a frame are that far from its end.)
inline const unsigned char* ReadVarintFar(const unsigned char* p, const unsigned char* end,
                                          uint64_t* value) {
  if (*p < 0x80) [[likely]] {
    *value = *p;
    return p + 1;
  }
  if (p[1] < 0x80) {
    *value = (uint64_t{p[0]} & 0x7f) | uint64_t{p[1]} << 7;
    return p + 2;
  }
  if (p[2] < 0x80) {
    *value = (uint64_t{p[0]} & 0x7f) | (uint64_t{p[1]} & 0x7f) << 7 | uint64_t{p[2]} << 14;
    return p + 3;
  }
  return ReadVarintWord(p, end, value);
}

// The same anywhere in the frame. Event fields are mostly one or two bytes (ops, devices, thread
// and stack ids) or 3 to 8 (sequence numbers, times, addresses, sizes): tests for one to three
// bytes, then ReadVarintWord when 8 bytes are left in the frame.
inline const unsigned char* ReadVarint(const unsigned char* p, const unsigned char* end,
                                       uint64_t* value) {
  if (p != end && *p < 0x80) [[likely]] {
    *value = *p;
    return p + 1;
  }
  if (end - p < 8) return ReadVarintSlow(p, end, value);
  if (p[1] < 0x80) {  // two bytes (thread ids, stack ids): cheaper than the word below
    *value = (uint64_t{p[0]} & 0x7f) | uint64_t{p[1]} << 7;
    return p + 2;
  }
  if (p[2] < 0x80) {  // three (sequence numbers below 2^21, sizes below 2 MiB)
    *value = (uint64_t{p[0]} & 0x7f) | (uint64_t{p[1]} & 0x7f) << 7 | uint64_t{p[2]} << 14;
    return p + 3;
  }
  return ReadVarintWord(p, end, value);
}

}  // namespace fragscope::internal

#endif  // FRAGSCOPE_TRACE_VARINT_READER_H_
