#include "fragscope/trace/frame_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <zstd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "fragscope/trace/output_file.h"
#include "fragscope/trace/trace_format.h"

namespace fragscope {

namespace {
constexpr std::size_t kFlushThreshold = 1 << 20;
// zstd's level 3 (its default) compresses a trace to within 10 % of level 9 at 3 to 4 times
// its speed: the collector compresses as it receives.
constexpr int kZstdLevel = 3;
}  // namespace

void FrameWriter::FreeCompressor::operator()(ZSTD_CCtx_s* c) const { ZSTD_freeCCtx(c); }

absl::StatusOr<FrameWriter> FrameWriter::Open(const std::string& path,
                                              TraceCompression compression) {
  absl::StatusOr<int> fd = CreateOutputFile(path);
  if (!fd.ok()) return fd.status();
  FrameWriter writer(*fd, path);
  if (compression == TraceCompression::kZstd) {
    writer.compressor_.reset(ZSTD_createCCtx());
    // The checksum: a damaged file is refused where the damage is, not read as other numbers.
    if (writer.compressor_ == nullptr ||
        ZSTD_isError(ZSTD_CCtx_setParameter(writer.compressor_.get(), ZSTD_c_compressionLevel,
                                            kZstdLevel)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(writer.compressor_.get(), ZSTD_c_checksumFlag, 1))) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: cannot set up zstd compression (out of memory?)", path));
    }
  }
  return writer;
}

absl::StatusOr<FrameWriter> FrameWriter::CreateFile(const std::string& path,
                                                    TraceCompression compression) {
  absl::StatusOr<FrameWriter> writer = Open(path, compression);
  if (!writer.ok()) return writer.status();
  unsigned char header[kTraceHeaderBytes];
  EncodeTraceHeader(kFormatMajor, kFormatMinor, header);
  writer->pending_.append(reinterpret_cast<const char*>(header), sizeof(header));
  if (absl::Status s = writer->Flush(); !s.ok()) return s;
  return writer;
}

absl::StatusOr<FrameWriter> FrameWriter::CreateFileFrom(const std::string& path, int source,
                                                        TraceCompression compression,
                                                        uint64_t* copied) {
  *copied = 0;
  absl::StatusOr<FrameWriter> writer = Open(path, compression);
  if (!writer.ok()) return writer.status();
  // Whole zstd frames and whole trace frames both append: the copy is the source's bytes, its
  // header first.
  std::string chunk(1 << 20, '\0');
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(source, chunk.data(), chunk.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(
          absl::StrFormat("%s: reading the file to copy: %s", path, std::strerror(errno)));
    }
    if (n == 0) break;
    std::size_t done = 0;
    absl::Status s = writer->WriteAll(chunk.data(), static_cast<std::size_t>(n), &done);
    *copied += done;
    if (!s.ok()) return s;
    offset += n;
  }
  return writer;
}

FrameWriter::FrameWriter(FrameWriter&& other) noexcept { *this = std::move(other); }

FrameWriter& FrameWriter::operator=(FrameWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) (void)Close();
    fd_ = std::exchange(other.fd_, -1);
    name_ = std::move(other.name_);
    pending_ = std::move(other.pending_);
    compressor_ = std::move(other.compressor_);
    compressed_ = std::move(other.compressed_);
    bytes_written_ = other.bytes_written_;
  }
  return *this;
}

FrameWriter::~FrameWriter() {
  if (fd_ >= 0) (void)Close();
}

absl::Status FrameWriter::Write(const v1::Frame& frame) {
  std::string bytes;
  if (!frame.SerializeToString(&bytes)) {
    return absl::InternalError(absl::StrFormat("%s: cannot serialize frame", name_));
  }
  return WriteSerialized(bytes);
}

absl::Status FrameWriter::WriteSerialized(std::string_view frame_bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(name_ + ": writer is closed");
  if (frame_bytes.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: frame of %d bytes exceeds the format's limit", name_, frame_bytes.size()));
  }
  AppendFramed(frame_bytes, &pending_);
  if (pending_.size() >= kFlushThreshold) return Flush();
  return absl::OkStatus();
}

absl::Status FrameWriter::WriteFramed(std::string_view framed_frames) {
  if (fd_ < 0) return absl::FailedPreconditionError(name_ + ": writer is closed");
  pending_.append(framed_frames);
  if (pending_.size() >= kFlushThreshold) return Flush();
  return absl::OkStatus();
}

absl::Status FrameWriter::Flush() {
  if (pending_.empty()) return absl::OkStatus();
  if (compressor_ == nullptr) {
    std::size_t done = 0;
    absl::Status s = WriteAll(pending_.data(), pending_.size(), &done);
    pending_.erase(0, done);  // what did not reach the file stays for another Flush
    return s;
  }
  compressed_.resize(ZSTD_compressBound(pending_.size()));
  const std::size_t n = ZSTD_compress2(compressor_.get(), compressed_.data(), compressed_.size(),
                                       pending_.data(), pending_.size());
  if (ZSTD_isError(n)) {
    return absl::InternalError(
        absl::StrFormat("%s: zstd compression failed: %s", name_, ZSTD_getErrorName(n)));
  }
  pending_.clear();
  std::size_t done = 0;
  return WriteAll(compressed_.data(), n, &done);
}

absl::Status FrameWriter::WriteAll(const char* data, std::size_t size, std::size_t* written) {
  std::size_t& done = *written;
  while (done < size) {
    ssize_t n = ::write(fd_, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrFormat("%s: write failed after %d bytes: %s", name_,
                                                 bytes_written_, std::strerror(errno)));
    }
    done += static_cast<std::size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FrameWriter::Sync() {
  if (absl::Status s = Flush(); !s.ok()) return s;
  if (::fsync(fd_) != 0) {
    return absl::DataLossError(
        absl::StrFormat("%s: fsync failed: %s", name_, std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status FrameWriter::Close() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status s = Flush();
  if (::close(fd_) != 0 && s.ok()) {
    s = absl::DataLossError(absl::StrFormat("%s: close failed: %s", name_, std::strerror(errno)));
  }
  fd_ = -1;
  return s;
}

}  // namespace fragscope
