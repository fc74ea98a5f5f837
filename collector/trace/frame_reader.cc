#include "fragscope/trace/frame_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <zstd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "fragscope/trace/frame_limits.h"
#include "fragscope/trace/hot_frame_decoder.h"
#include "fragscope/trace/packed_event_decoder.h"
#include "fragscope/trace/trace_format.h"

namespace fragscope {

namespace {
constexpr std::size_t kReadChunk = 1 << 20;

uint32_t GetLe32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
}  // namespace

FrameReader::FrameReader(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

FrameReader::FrameReader(FrameReader&& other) noexcept { *this = std::move(other); }

FrameReader& FrameReader::operator=(FrameReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    name_ = std::move(other.name_);
    buffer_ = std::move(other.buffer_);
    pos_ = other.pos_;
    end_ = other.end_;
    consumed_ = other.consumed_;
    good_offset_ = other.good_offset_;
    frames_read_ = other.frames_read_;
    major_ = other.major_;
    minor_ = other.minor_;
    read_error_ = other.read_error_;
    error_ = std::move(other.error_);
    budget_ = std::exchange(other.budget_, nullptr);
    lease_ = std::move(other.lease_);
    copy_ = std::exchange(other.copy_, nullptr);
    decompressor_ = std::move(other.decompressor_);
    compressed_ = std::move(other.compressed_);
    compressed_pos_ = other.compressed_pos_;
    compressed_end_ = other.compressed_end_;
    compressed_read_ = other.compressed_read_;
    zstd_frame_open_ = other.zstd_frame_open_;
    packed_ = other.packed_;
    packed_offset_ = other.packed_offset_;
  }
  return *this;
}

FrameReader::~FrameReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<FrameReader> FrameReader::OpenFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrFormat(
        "%s: cannot open trace: %s; check the path (traces are written by `fragscope run -o` or "
        "FRAGSCOPE_OUTPUT)",
        path, std::strerror(errno)));
  }
  return FromFd(fd, path);
}

absl::StatusOr<FrameReader> FrameReader::FromFd(int fd, std::string name) {
  SilenceProtobufLogging();  // our messages name the file and offset; libprotobuf's do not
  FrameReader reader(fd, std::move(name));
  if (absl::Status s = reader.ReadHeader(); !s.ok()) return s;
  return reader;
}

bool FrameReader::Fill(std::size_t n) {
  if (end_ - pos_ >= n) return true;
  // Compact, then grow to hold n bytes (n is bounded by kMaxFrameBytes + a varint).
  if (pos_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + pos_, end_ - pos_);
    consumed_ += pos_;
    end_ -= pos_;
    pos_ = 0;
  }
  if (buffer_.size() < std::max(n, kReadChunk)) buffer_.resize(std::max(n, kReadChunk));
  while (end_ < n) {
    const ssize_t got = ReadSome(buffer_.data() + end_, buffer_.size() - end_);
    if (got < 0) {
      read_error_ = true;
      return false;
    }
    if (got == 0) return false;
    end_ += static_cast<std::size_t>(got);
  }
  return true;
}

void FrameReader::FreeDecompressor::operator()(ZSTD_DCtx_s* d) const { ZSTD_freeDCtx(d); }

ssize_t FrameReader::ReadSome(unsigned char* dst, std::size_t capacity) {
  if (decompressor_ != nullptr) return ReadDecompressed(dst, capacity);
  for (;;) {
    const ssize_t got = ::read(fd_, dst, capacity);
    if (got >= 0) return got;
    if (errno == EINTR) continue;
    error_ = absl::StrFormat("%s: read error at byte %d: %s", name_, consumed_ + end_,
                             std::strerror(errno));
    return -1;
  }
}

ssize_t FrameReader::ReadDecompressed(unsigned char* dst, std::size_t capacity) {
  for (;;) {
    if (compressed_pos_ == compressed_end_) {
      const ssize_t got = ::read(fd_, compressed_.data(), compressed_.size());
      if (got < 0) {
        if (errno == EINTR) continue;
        error_ = absl::StrFormat("%s: read error at byte %d of the compressed file: %s", name_,
                                 compressed_read_, std::strerror(errno));
        return -1;
      }
      if (got == 0) return 0;
      compressed_pos_ = 0;
      compressed_end_ = static_cast<std::size_t>(got);
      compressed_read_ += static_cast<uint64_t>(got);
    }
    ZSTD_inBuffer in{compressed_.data(), compressed_end_, compressed_pos_};
    ZSTD_outBuffer out{dst, capacity, 0};
    const std::size_t hint = ZSTD_decompressStream(decompressor_.get(), &out, &in);
    compressed_pos_ = in.pos;
    if (ZSTD_isError(hint)) {
      // No offset in the compressed file: where zstd notices depends on how the bytes came.
      error_ = absl::StrFormat(
          "%s: the compressed trace is corrupt (zstd: %s); read %d whole frames up to byte %d of "
          "the decompressed trace",
          name_, ZSTD_getErrorName(hint), frames_read_, good_offset_);
      return -1;
    }
    zstd_frame_open_ = hint != 0;
    if (out.pos > 0) return static_cast<ssize_t>(out.pos);
  }
}

absl::Status FrameReader::ReadHeader() {
  // A compressed trace: what was read so far is its first compressed bytes.
  static constexpr unsigned char kZstdMagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  if (Fill(sizeof(kZstdMagic)) && std::memcmp(buffer_.data() + pos_, kZstdMagic, 4) == 0) {
    decompressor_.reset(ZSTD_createDCtx());
    if (decompressor_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: cannot set up zstd decompression (out of memory?)", name_));
    }
    compressed_.assign(buffer_.begin() + pos_, buffer_.begin() + end_);
    compressed_end_ = compressed_.size();
    compressed_read_ = compressed_.size();
    compressed_.resize(std::max(compressed_.size(), kReadChunk));
    end_ = pos_ = 0;
  }
  if (!Fill(kTraceHeaderBytes)) {
    if (read_error_) return absl::DataLossError(error_);
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not a fragscope trace (only %d bytes, a trace starts with a %d-byte header); was "
        "the program killed before the agent wrote anything?",
        name_, end_ - pos_, kTraceHeaderBytes));
  }
  const unsigned char* p = buffer_.data() + pos_;
  if (std::memcmp(p, kTraceMagic, sizeof(kTraceMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not a fragscope trace (bad magic); expected a file written by `fragscope run -o` or "
        "FRAGSCOPE_OUTPUT (PyTorch .pickle snapshots go through `fragscope import`)",
        name_));
  }
  major_ = GetLe32(p + 8);
  minor_ = GetLe32(p + 12);
  if (major_ == 0 || major_ > kFormatMajor) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: trace format %d.%d is not supported by this fragscope (reads %d.x); upgrade "
        "fragscope to read it",
        name_, major_, minor_, kFormatMajor));
  }
  pos_ += kTraceHeaderBytes;
  good_offset_ = consumed_ + pos_;
  return absl::OkStatus();
}

FrameReader::Result FrameReader::NextBody(const unsigned char** body, uint64_t* body_length,
                                          std::size_t* frame_bytes) {
  // The caller let the last frame go: its decode budget goes back before a read that may wait.
  lease_.Release();
  if (read_error_) return Result::kError;
  // Most frames are events: a one-byte length, the frame already in the buffer.
  if (pos_ < end_ && buffer_[pos_] < 0x80 && end_ - pos_ > buffer_[pos_]) [[likely]] {
    *body_length = buffer_[pos_];
    *body = buffer_.data() + pos_ + 1;
    *frame_bytes = 1 + *body_length;
    return Result::kFrame;
  }
  // Varint length: at most 10 bytes; fewer may be available at the end of the stream.
  uint64_t length = 0;
  std::size_t varint_bytes = 0;
  for (;;) {
    if (!Fill(varint_bytes + 1)) {
      if (read_error_) return Result::kError;
      if (varint_bytes == 0 && end_ == pos_) {
        if (!zstd_frame_open_) return Result::kEnd;
        // The writer ends a zstd frame at each flush: a file that stops inside one was cut
        // while it was written, and what that frame held is gone.
        error_ = absl::StrFormat(
            "%s: truncated: the compressed trace ends inside a zstd frame (the frames it held are "
            "lost); read %d whole frames up to byte %d of the decompressed trace",
            name_, frames_read_, good_offset_);
        return Result::kTruncated;
      }
      error_ = absl::StrFormat(
          "%s: truncated inside a frame length at byte %d; read %d whole frames up to byte %d",
          name_, consumed_ + pos_, frames_read_, good_offset_);
      return Result::kTruncated;
    }
    unsigned char b = buffer_[pos_ + varint_bytes];
    if (varint_bytes == 9 && b > 1) varint_bytes = 10;  // would overflow 64 bits
    if (varint_bytes >= 10) {
      error_ = absl::StrFormat("%s: malformed frame length at byte %d (varint too long)", name_,
                               consumed_ + pos_);
      return Result::kError;
    }
    length |= uint64_t{b & 0x7fu} << (7 * varint_bytes);
    ++varint_bytes;
    if ((b & 0x80) == 0) break;
  }
  if (length > kMaxFrameBytes) {
    error_ = absl::StrFormat(
        "%s: malformed frame at byte %d: length %d exceeds the %d-byte limit (corrupt trace)",
        name_, consumed_ + pos_, length, kMaxFrameBytes);
    return Result::kError;
  }
  if (!Fill(varint_bytes + length)) {
    if (read_error_) return Result::kError;
    error_ = absl::StrFormat(
        "%s: truncated: the frame at byte %d needs %d bytes, only %d remain; read %d whole "
        "frames up to byte %d",
        name_, consumed_ + pos_, varint_bytes + length, end_ - pos_, frames_read_, good_offset_);
    return Result::kTruncated;
  }
  *body = buffer_.data() + pos_ + varint_bytes;
  *body_length = length;
  *frame_bytes = varint_bytes + length;
  return Result::kFrame;
}

FrameReader::Result FrameReader::NextPacked(HotEvent* event) {
  std::string what;
  if (packed_.Next(event, &what)) return Result::kFrame;
  error_ = absl::StrFormat(
      "%s: malformed packed-events frame at byte %d: %s; read %d whole frames up to byte %d", name_,
      packed_offset_, what, frames_read_, good_offset_);
  read_error_ = true;  // nothing after a malformed frame is read
  return Result::kError;
}

FrameReader::Result FrameReader::NextBodyOrPacked(const unsigned char** body, uint64_t* length,
                                                  std::size_t* frame_bytes, HotEvent* event) {
  if (packed_.active()) {
    *body = nullptr;
    return NextPacked(event);
  }
  if (Result r = NextBody(body, length, frame_bytes); r != Result::kFrame) return r;
  if (!IsPackedFrame(*body, *length)) return Result::kFrame;
  // A run of events: its bytes stay where they are in the buffer until its last event is
  // returned (the buffer moves only in NextBody). The frame counts as taken once its first
  // event is read, so that a run refused outright leaves good_offset where it was.
  packed_offset_ = consumed_ + pos_;
  if (std::string what = packed_.Start(*body, *length); !what.empty()) {
    error_ =
        absl::StrFormat("%s: malformed frame at byte %d: %s; read %d whole frames up to byte %d",
                        name_, packed_offset_, what, frames_read_, good_offset_);
    return Result::kError;
  }
  const Result first = NextPacked(event);
  if (first == Result::kFrame) Consume(*frame_bytes);
  *body = nullptr;
  return first;
}

FrameReader::Result FrameReader::Next(v1::Frame* out) {
  const unsigned char* body = nullptr;
  uint64_t length = 0;
  std::size_t frame_bytes = 0;
  HotEvent event;
  if (Result r = NextBodyOrPacked(&body, &length, &frame_bytes, &event); r != Result::kFrame) {
    return r;
  }
  if (body == nullptr) {  // an event of a packed run
    StoreHotEvent(event, out);
    return Result::kFrame;
  }
  // Event frames, nearly all of a trace, are decoded by hand (hot_frame_decoder.h: the same
  // message libprotobuf would build, at a fraction of the instructions); the decoder takes only
  // frames that are within every limit and valid, and leaves all others to ParseChecked.
  if (!DecodeHotFrame(body, length, out) && !ParseChecked(body, length, out)) {
    return Result::kError;
  }
  Consume(frame_bytes);
  return Result::kFrame;
}

FrameReader::Result FrameReader::Next(v1::Frame* other, HotFrameSet* hot, const v1::Frame** frame) {
  HotEvent event;
  const Result r = Next(other, &event, frame);
  if (r == Result::kFrame && *frame == nullptr) *frame = hot->Store(event);
  return r;
}

FrameReader::Result FrameReader::Next(v1::Frame* other, HotEvent* event, const v1::Frame** frame) {
  const unsigned char* body = nullptr;
  uint64_t length = 0;
  std::size_t frame_bytes = 0;
  if (Result r = NextBodyOrPacked(&body, &length, &frame_bytes, event); r != Result::kFrame) {
    return r;
  }
  if (body == nullptr) {  // an event of a packed run
    *frame = nullptr;
    return Result::kFrame;
  }
  if (ParseHotEvent(body, length, event)) {
    *frame = nullptr;
  } else {
    if (!ParseChecked(body, length, other)) return Result::kError;
    *frame = other;
  }
  Consume(frame_bytes);
  return Result::kFrame;
}

bool FrameReader::ParseChecked(const unsigned char* body, uint64_t length, v1::Frame* out) {
  // Before parsing: libprotobuf would make an object per repeated entry (frame_limits.h). With a
  // decode budget, a frame that may be big is counted in the same pass, for its cost.
  const bool may_need_budget = budget_ != nullptr && length > DecodeBudget::kUnbudgetedFrameBytes;
  uint64_t entries = 0;
  if (std::string over =
          FrameLimitViolation(body, length, FrameLimits{}, may_need_budget ? &entries : nullptr);
      !over.empty()) {
    error_ = absl::StrFormat(
        "%s: frame at byte %d refused: %s (proto/README.md, \"Reader limits\"); no fragscope "
        "agent writes such a frame, so the trace is corrupt or crafted; read %d whole frames up "
        "to byte %d",
        name_, consumed_ + pos_, over, frames_read_, good_offset_);
    return false;
  }
  if (may_need_budget) {
    const uint64_t cost = DecodeBudget::FrameCost(entries, length);
    if (cost >= DecodeBudget::kUnbudgetedBytes) lease_ = budget_->Take(cost);
  }
  if (!out->ParseFromArray(body, static_cast<int>(length))) {
    error_ = absl::StrFormat("%s: malformed frame at byte %d (%d bytes do not parse as a Frame)",
                             name_, consumed_ + pos_, length);
    return false;
  }
  return true;
}

}  // namespace fragscope
