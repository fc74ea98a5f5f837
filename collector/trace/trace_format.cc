#include "fragscope/trace/trace_format.h"

#include <cstring>

namespace fragscope {

namespace {
void PutLe32(uint32_t v, unsigned char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
}  // namespace

void EncodeTraceHeader(uint32_t major, uint32_t minor, unsigned char out[kTraceHeaderBytes]) {
  std::memcpy(out, kTraceMagic, sizeof(kTraceMagic));
  PutLe32(major, out + 8);
  PutLe32(minor, out + 12);
}

void AppendFramed(std::string_view frame_bytes, std::string* out) {
  uint64_t v = frame_bytes.size();
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
  out->append(frame_bytes);
}

}  // namespace fragscope
