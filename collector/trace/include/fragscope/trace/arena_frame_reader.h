// Reads frames into a protobuf Arena, for replay loops that apply each frame and let it go.
//
// A v1::Frame on the heap frees its event sub-message whenever it is cleared or parsed again,
// and the next parse allocates a new one: a malloc and a free per frame, in the hottest loop of
// the collector. On an arena the same parse is a pointer bump, and the memory comes back all at
// once when the arena is reset.
//
//   ArenaFrameReader frames(reader);
//   const v1::Frame* frame;
//   while (frames.Next(&frame) == FrameReader::Result::kFrame) model.Apply(*frame);
//
// Guarantees: *frame is valid until the next call to Next (the arena may be reset then, which
// ends the life of every frame it returned before, and an event frame is reused by the next
// event of its type). Event frames (AllocEvent, FreeEvent, MapEvent, HandleEvent, BlockEvent)
// are decoded by hand into a frame kept per event type (hot_frame_decoder.h), the same message
// libprotobuf would build, without the arena. Memory: the arena is reset once the frames
// parsed into it since the last reset span kResetBytes of input, so it holds at most about
// kResetBytes plus one frame (bounded by kMaxFrameBytes) of input, times the in-memory
// expansion of protobuf messages; the first kInitialBlockBytes are allocated once and reused.
// The reset distance is small on purpose: the arena hands out fresh memory on every parse, and
// over 128 KiB of input that memory had left the cache before it was reused (cachegrind, 2 MiB
// last level, 300 000-event replay: 633 k last-level write misses with 128 KiB, 432 k with
// 4 KiB).
// Errors and offsets are the wrapped FrameReader's. Not thread-safe.
#ifndef FRAGSCOPE_TRACE_ARENA_FRAME_READER_H_
#define FRAGSCOPE_TRACE_ARENA_FRAME_READER_H_

#include <google/protobuf/arena.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fragscope.pb.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/hot_frame_decoder.h"

namespace fragscope {

class ArenaFrameReader {
 public:
  static constexpr std::size_t kInitialBlockBytes = std::size_t{64} << 10;
  static constexpr uint64_t kResetBytes = uint64_t{4} << 10;

  // `reader` must outlive this object.
  explicit ArenaFrameReader(FrameReader& reader)
      : reader_(&reader),
        initial_block_(new char[kInitialBlockBytes]),
        arena_(Options(initial_block_.get())),
        reset_offset_(reader.good_offset()) {}
  ArenaFrameReader(const ArenaFrameReader&) = delete;
  ArenaFrameReader& operator=(const ArenaFrameReader&) = delete;

  FrameReader::Result Next(const v1::Frame** frame) {
    ResetIfDue();
    // Event frames go to hot_ (decoded by hand into a frame kept per event type, no allocation
    // at all); the others are parsed into frame_, and parsing clears the previous frame first:
    // on an arena that abandons its sub-messages in the arena instead of freeing them, so the
    // parse allocates by bumping a pointer. The arena offset counts both, which only makes the
    // resets more frequent than the arena's own use needs.
    const FrameReader::Result r = reader_->Next(frame_, &hot_, frame);
    if (r != FrameReader::Result::kFrame) *frame = frame_;
    return r;
  }

  // The same, except that an event frame (alloc, free, map, handle, block) is left as decoded
  // in *event, read through hot_event_view.h, and no frame is built for it: on kFrame exactly
  // one of *frame and *event is set and the other is nullptr. *event is valid until the next
  // call.
  FrameReader::Result Next(const v1::Frame** frame, const HotEvent** event) {
    ResetIfDue();
    const FrameReader::Result r = reader_->Next(frame_, &event_, frame);
    if (r != FrameReader::Result::kFrame) {
      *frame = frame_;
      *event = nullptr;
    } else {
      *event = *frame == nullptr ? &event_ : nullptr;
    }
    return r;
  }

  FrameReader& reader() { return *reader_; }

 private:
  void ResetIfDue() {
    if (frame_ == nullptr || reader_->good_offset() - reset_offset_ >= kResetBytes) {
      // Reset keeps the initial block: a steady stream of small frames never calls malloc.
      frame_ = nullptr;
      arena_.Reset();
      reset_offset_ = reader_->good_offset();
      frame_ = google::protobuf::Arena::CreateMessage<v1::Frame>(&arena_);
    }
  }
  static google::protobuf::ArenaOptions Options(char* initial_block) {
    google::protobuf::ArenaOptions options;
    options.initial_block = initial_block;
    options.initial_block_size = kInitialBlockBytes;
    return options;
  }

  FrameReader* reader_;
  std::unique_ptr<char[]> initial_block_;
  google::protobuf::Arena arena_;
  uint64_t reset_offset_;
  v1::Frame* frame_ = nullptr;
  HotFrameSet hot_;
  HotEvent event_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_ARENA_FRAME_READER_H_
