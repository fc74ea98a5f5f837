// Reads a PackedEvents frame (fragscope.proto format 2.0) back into its events, one at a time,
// as the HotEvent each would have been read as had it come as a frame of its own: the encoding
// is fragscope/packed_events.h's.
//
// Guarantees: never reads outside the bytes it was given; malformed input (an unknown message,
// a field the message does not have, a value its type cannot hold, a varint past the end, more
// or fewer events than the run's count) stops the run with a message saying what and which
// event; no allocation. Not thread-safe; one per stream.
#ifndef FRAGSCOPE_TRACE_PACKED_EVENT_DECODER_H_
#define FRAGSCOPE_TRACE_PACKED_EVENT_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "fragscope/packed_events.h"
#include "fragscope/trace/hot_frame_decoder.h"

namespace fragscope {

// Whether the serialized Frame of `size` bytes at `data` is a Frame.packed frame (its tag).
bool IsPackedFrame(const unsigned char* data, std::size_t size);

class PackedEventDecoder {
 public:
  // Starts on the Frame.packed frame of `size` bytes at `data`, which must stay valid while
  // events remain. Empty string on success, else what is wrong with the frame.
  std::string Start(const unsigned char* data, std::size_t size);
  // Whether events remain in the run started last.
  bool active() const { return remaining_ > 0; }
  // Decodes the next event into *event. False, with *error set and the run ended, when it is
  // malformed.
  bool Next(HotEvent* event, std::string* error);

 private:
  bool Fail(const std::string& what, std::string* error);

  const unsigned char* p_ = nullptr;
  const unsigned char* end_ = nullptr;
  uint64_t remaining_ = 0;
  uint64_t count_ = 0;
  wire::packed::RunState state_;  // the encoding's "previous"
};

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_PACKED_EVENT_DECODER_H_
