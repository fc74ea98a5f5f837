// The byte layout shared by trace files and live agent streams (see proto/fragscope.proto):
// a 16-byte header (magic, major, minor), then frames, each a varint length + a serialized
// fragscope.v1.Frame. A file and a socket carry exactly the same bytes.
#ifndef FRAGSCOPE_TRACE_TRACE_FORMAT_H_
#define FRAGSCOPE_TRACE_TRACE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fragscope {

inline constexpr char kTraceMagic[8] = {'F', 'R', 'A', 'G', 'S', 'C', 'P', '\x01'};
inline constexpr std::size_t kTraceHeaderBytes = 16;
// Readers accept any minor of their major; a newer major is refused.
inline constexpr uint32_t kFormatMajor = 2;
inline constexpr uint32_t kFormatMinor = 0;
// No frame the agent writes comes near this; a larger length means corruption, and refusing it
// keeps a crafted file from making the reader allocate without bound.
inline constexpr std::size_t kMaxFrameBytes = 64u << 20;

// Encodes the 16-byte header into `out`.
void EncodeTraceHeader(uint32_t major, uint32_t minor, unsigned char out[kTraceHeaderBytes]);
// Appends one frame as the stream carries it: the varint length of `frame_bytes` (a serialized
// fragscope.v1.Frame), then the bytes. The caller keeps frames within kMaxFrameBytes.
void AppendFramed(std::string_view frame_bytes, std::string* out);

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_TRACE_FORMAT_H_
