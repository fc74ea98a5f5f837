// Writes a fragscope stream: the header, then length-prefixed frames.
#ifndef FRAGSCOPE_TRACE_FRAME_WRITER_H_
#define FRAGSCOPE_TRACE_FRAME_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fragscope.pb.h"

namespace fragscope {

// Not thread-safe. Owns its file descriptor. Buffers internally; Flush() or Close() to push.
class FrameWriter {
 public:
  // Creates (truncates) `path` with mode 0644 at most (CreateOutputFile) and writes the header.
  static absl::StatusOr<FrameWriter> CreateFile(const std::string& path);

  FrameWriter(FrameWriter&& other) noexcept;
  FrameWriter& operator=(FrameWriter&& other) noexcept;
  FrameWriter(const FrameWriter&) = delete;
  FrameWriter& operator=(const FrameWriter&) = delete;
  ~FrameWriter();  // flushes and closes; errors are lost, so call Close() to see them

  absl::Status Write(const v1::Frame& frame);
  // Appends one frame whose serialized bytes the caller already has (forwarding a stream).
  absl::Status WriteSerialized(std::string_view frame_bytes);
  // Appends frames already framed (each its varint length and bytes), as FrameReader::set_copy
  // gives them: a stream copied without decoding.
  absl::Status WriteFramed(std::string_view framed_frames);
  absl::Status Flush();
  absl::Status Close();
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  FrameWriter(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  int fd_ = -1;
  std::string name_;
  std::string pending_;
  uint64_t bytes_written_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_FRAME_WRITER_H_
