// Reads a fragscope stream (trace file or connected socket) frame by frame. A zstd-compressed
// trace file is read through its decompression: offsets in messages are then those of the
// decompressed trace.
#ifndef FRAGSCOPE_TRACE_FRAME_READER_H_
#define FRAGSCOPE_TRACE_FRAME_READER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fragscope.pb.h"
#include "fragscope/trace/decode_budget.h"
#include "fragscope/trace/hot_frame_decoder.h"
#include "fragscope/trace/packed_event_decoder.h"

struct ZSTD_DCtx_s;

namespace fragscope {

// Not thread-safe; one reader per stream. Owns its file descriptor. Memory is bounded by the
// largest frame (kMaxFrameBytes) plus a fixed read buffer, whatever the input.
class FrameReader {
 public:
  enum class Result {
    kFrame,      // *out holds the next frame
    kEnd,        // clean end: the stream ended on a frame boundary
    kTruncated,  // the stream ended inside a frame; everything before it was returned
    kError,      // malformed bytes or a read error; see error()
  };

  // Opens `path` and checks its header. Errors name the file and say what to do.
  static absl::StatusOr<FrameReader> OpenFile(const std::string& path);
  // Takes ownership of `fd` (a file or a connected stream socket) and reads the header from it,
  // blocking. `name` is used in messages.
  static absl::StatusOr<FrameReader> FromFd(int fd, std::string name);

  FrameReader(FrameReader&& other) noexcept;
  FrameReader& operator=(FrameReader&& other) noexcept;
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;
  ~FrameReader();

  Result Next(v1::Frame* out);
  // The same for replay loops that apply each frame and let it go (ArenaFrameReader): an event
  // frame is decoded into its type's frame of `hot` (no allocation), any other frame is parsed
  // into *other; *frame points to the one that holds it. The frames, errors and offsets are
  // exactly those of Next(out).
  Result Next(v1::Frame* other, HotFrameSet* hot, const v1::Frame** frame);
  // The same, with an event frame left as decoded in *event (read through hot_event_view.h)
  // and *frame set to nullptr; any other frame is parsed into *other and *frame points to it.
  Result Next(v1::Frame* other, HotEvent* event, const v1::Frame** frame);

  // Frames that cost DecodeBudget::kUnbudgetedBytes or more to parse take their cost from
  // `budget` first (waiting while other readers hold it) and give it back at the next call to
  // Next, before anything is read: the caller must have let the frame go by then, as
  // ArenaFrameReader does. `budget` (nullptr: none) must outlive the reader's use of it.
  void set_decode_budget(DecodeBudget* budget) { budget_ = budget; }

  // Whether the next frame is already whole in the read buffer, so that the next Next() returns
  // it without reading (and so without waiting on a socket). False says nothing: the frame may
  // still come at once, or the stream may end. Lets a caller holding a lock drop it before a read
  // that may block. With a decode budget, false too for a frame big enough to need the budget,
  // for which Next may wait on other streams.
  bool NextFrameBuffered() const {
    if (packed_.active()) return true;
    uint64_t length = 0;
    for (std::size_t i = 0; i < 10 && pos_ + i < end_; ++i) {
      const unsigned char b = buffer_[pos_ + i];
      length |= uint64_t{b & 0x7fu} << (7 * i);
      if (b < 0x80) {
        return length <= end_ - pos_ - i - 1 &&
               (budget_ == nullptr || length <= DecodeBudget::kUnbudgetedFrameBytes);
      }
    }
    return false;
  }

  // Every frame taken from now on is also appended to *copy as it was on the wire (its length
  // and bytes), before Next returns it: a caller that keeps a copy of the stream writes these
  // bytes rather than serializing each frame again (a copy built with libprotobuf cost more than
  // the model). Frames refused (kError) are not appended. nullptr stops it; *copy must outlive
  // the reader's use of it, and the caller empties it.
  void set_copy(std::string* copy) { copy_ = copy; }

  // For kTruncated and kError: what went wrong, with the stream name and byte offset.
  const std::string& error() const { return error_; }
  uint32_t major() const { return major_; }
  // Whether the stream is a zstd-compressed trace file.
  bool compressed() const { return decompressor_ != nullptr; }
  uint32_t minor() const { return minor_; }
  // Byte offset just past the last whole frame returned.
  uint64_t good_offset() const { return good_offset_; }
  uint64_t frames_read() const { return frames_read_; }
  const std::string& name() const { return name_; }

 private:
  FrameReader(int fd, std::string name);
  absl::Status ReadHeader();
  // Reads what comes next into [dst, dst + capacity): the file's bytes, or for a compressed
  // file what they decompress to. The count (0 at the end), or -1 with error_ set.
  ssize_t ReadSome(unsigned char* dst, std::size_t capacity);
  ssize_t ReadDecompressed(unsigned char* dst, std::size_t capacity);
  // Makes at least `n` bytes available at buffer_[pos_]; false at end of stream or error.
  bool Fill(std::size_t n);
  // Makes the next frame's bytes available: its body of *body_length bytes at *body, and the
  // frame's bytes with the length prefix in *frame_bytes (for Consume). kFrame, or what Next
  // returns at an end, a truncation or an error (error_ set).
  Result NextBody(const unsigned char** body, uint64_t* body_length, std::size_t* frame_bytes);
  // Steps past the frame NextBody returned, once it has been decoded.
  void Consume(std::size_t frame_bytes) {
    if (copy_ != nullptr) {
      copy_->append(reinterpret_cast<const char*>(buffer_.data() + pos_), frame_bytes);
    }
    pos_ += frame_bytes;
    good_offset_ = consumed_ + pos_;
    ++frames_read_;
  }
  // NextBody, except that a packed run (Frame.packed) is taken whole and its events returned
  // one by one: for those, kFrame with *body nullptr and the event in *event.
  Result NextBodyOrPacked(const unsigned char** body, uint64_t* length, std::size_t* frame_bytes,
                          HotEvent* event);
  // The next event of the packed run being read; kError (and the stream ends) when malformed.
  Result NextPacked(HotEvent* event);
  // Parses the frame body of `length` bytes at `body` (the frame at pos_) with libprotobuf,
  // after the limit check: every frame the hand decoder does not take. False with error_ set
  // when it is refused or malformed.
  bool ParseChecked(const unsigned char* body, uint64_t length, v1::Frame* out);

  int fd_ = -1;
  std::string name_;
  std::vector<unsigned char> buffer_;
  std::size_t pos_ = 0;    // next unread byte in buffer_
  std::size_t end_ = 0;    // one past the last valid byte in buffer_
  uint64_t consumed_ = 0;  // stream offset of buffer_[0]
  uint64_t good_offset_ = 0;
  uint64_t frames_read_ = 0;
  uint32_t major_ = 0;
  uint32_t minor_ = 0;
  bool read_error_ = false;
  std::string error_;
  DecodeBudget* budget_ = nullptr;
  DecodeBudget::Lease lease_;    // the cost of the last frame parsed, while the caller holds it
  std::string* copy_ = nullptr;  // set_copy
  struct FreeDecompressor {
    void operator()(ZSTD_DCtx_s* d) const;
  };
  std::unique_ptr<ZSTD_DCtx_s, FreeDecompressor> decompressor_;  // null: not compressed
  std::vector<unsigned char> compressed_;  // read from the file, not yet decompressed
  std::size_t compressed_pos_ = 0;
  std::size_t compressed_end_ = 0;
  uint64_t compressed_read_ = 0;  // bytes of the file read so far
  bool zstd_frame_open_ = false;  // the input so far ends inside a zstd frame
  PackedEventDecoder packed_;     // the packed run being read, if any
  uint64_t packed_offset_ = 0;    // its frame's byte offset, for messages
};

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_FRAME_READER_H_
