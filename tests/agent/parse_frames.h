// Test helper: splits length-prefixed fragscope frames (varint length + Frame) written by the
// agent's encoder and parses each with libprotobuf.
#ifndef FRAGSCOPE_TESTS_AGENT_PARSE_FRAMES_H_
#define FRAGSCOPE_TESTS_AGENT_PARSE_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fragscope.pb.h"

namespace fragscope::agent_test {

// Parses frames from data[0..size). Sets *ok to false (and stops) on a malformed frame or a
// frame cut short.
inline std::vector<v1::Frame> ParseFrames(const uint8_t* data, size_t size, bool* ok) {
  std::vector<v1::Frame> frames;
  *ok = true;
  size_t pos = 0;
  while (pos < size) {
    uint64_t length = 0;
    int shift = 0;
    while (true) {
      if (pos >= size || shift > 63) {
        *ok = false;
        return frames;
      }
      uint8_t byte = data[pos++];
      length |= uint64_t{byte & 0x7fu} << shift;
      shift += 7;
      if ((byte & 0x80) == 0) break;
    }
    if (length > size - pos) {
      *ok = false;
      return frames;
    }
    v1::Frame frame;
    if (!frame.ParseFromArray(data + pos, static_cast<int>(length))) {
      *ok = false;
      return frames;
    }
    frames.push_back(std::move(frame));
    pos += length;
  }
  return frames;
}

}  // namespace fragscope::agent_test

#endif  // FRAGSCOPE_TESTS_AGENT_PARSE_FRAMES_H_
