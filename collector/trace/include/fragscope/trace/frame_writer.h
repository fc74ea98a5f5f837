// Writes a fragscope stream: the header, then length-prefixed frames, into a file, plain or
// zstd-compressed (proto/README.md, "Compressed trace files").
#ifndef FRAGSCOPE_TRACE_FRAME_WRITER_H_
#define FRAGSCOPE_TRACE_FRAME_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fragscope.pb.h"

struct ZSTD_CCtx_s;

namespace fragscope {

enum class TraceCompression {
  kNone,
  // Each Flush writes what it holds as one whole zstd frame, so the file is readable up to its
  // last flush whatever happens to the writer after it, and a reader can tell a file cut inside
  // compressed data (data lost) from one that stopped between flushes.
  kZstd,
};

// Not thread-safe. Owns its file descriptor. Buffers internally; Flush() or Close() to push.
class FrameWriter {
 public:
  // Creates (truncates) `path` with mode 0644 at most (CreateOutputFile) and writes the header.
  // Traces fragscope keeps are compressed: a varied workload's events take 5 to 8 bytes each
  // on disk instead of 8 to 12.
  static absl::StatusOr<FrameWriter> CreateFile(
      const std::string& path, TraceCompression compression = TraceCompression::kZstd);

  // Creates (truncates) `path` as CreateFile does, but with every byte of the file open at
  // `source` (a trace this kind of writer wrote, read from its start; the caller keeps `source`)
  // instead of a header, then appends to it. Errors name `path`; on one, what reached `path`
  // is in *copied (bytes).
  static absl::StatusOr<FrameWriter> CreateFileFrom(const std::string& path, int source,
                                                    TraceCompression compression, uint64_t* copied);

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
  // Flush, then fsync: the bytes are on the disk (before a rename over an existing trace).
  absl::Status Sync();
  absl::Status Close();
  // Bytes written to the file (compressed, when it is).
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  struct FreeCompressor {
    void operator()(ZSTD_CCtx_s* c) const;
  };
  FrameWriter(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  // Creates `path` as CreateFile does and sets up the compression, writing nothing.
  static absl::StatusOr<FrameWriter> Open(const std::string& path, TraceCompression compression);
  // Writes [data, data + size) to the file; *written counts what reached it.
  absl::Status WriteAll(const char* data, std::size_t size, std::size_t* written);
  int fd_ = -1;
  std::string name_;
  std::string pending_;
  std::unique_ptr<ZSTD_CCtx_s, FreeCompressor> compressor_;  // null: plain
  std::string compressed_;
  uint64_t bytes_written_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_FRAME_WRITER_H_
