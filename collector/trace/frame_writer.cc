#include "fragscope/trace/frame_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "fragscope/trace/output_file.h"
#include "fragscope/trace/trace_format.h"

namespace fragscope {

namespace {
constexpr std::size_t kFlushThreshold = 1 << 20;
}  // namespace

absl::StatusOr<FrameWriter> FrameWriter::CreateFile(const std::string& path) {
  absl::StatusOr<int> fd = CreateOutputFile(path);
  if (!fd.ok()) return fd.status();
  FrameWriter writer(*fd, path);
  unsigned char header[kTraceHeaderBytes];
  EncodeTraceHeader(kFormatMajor, kFormatMinor, header);
  writer.pending_.append(reinterpret_cast<const char*>(header), sizeof(header));
  if (absl::Status s = writer.Flush(); !s.ok()) return s;
  return writer;
}

FrameWriter::FrameWriter(FrameWriter&& other) noexcept { *this = std::move(other); }

FrameWriter& FrameWriter::operator=(FrameWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) (void)Close();
    fd_ = std::exchange(other.fd_, -1);
    name_ = std::move(other.name_);
    pending_ = std::move(other.pending_);
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
  std::size_t done = 0;
  while (done < pending_.size()) {
    ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      pending_.erase(0, done);
      return absl::DataLossError(absl::StrFormat("%s: write failed after %d bytes: %s", name_,
                                                 bytes_written_, std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  pending_.clear();
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
