// Writes a Frame.packed frame (PackedEvents, fragscope.proto format 2.0) into a WireWriter, one
// event at a time, in the encoding fragscope/packed_events.h defines. A run of events sent this
// way takes about a third of the bytes of the same events as frames of their own, and costs
// the drain thread fewer stores.
//
// The run stays open in the writer while events are added; nothing else may be written to the
// writer until Close (the drain closes the run before any other frame and before each write).
// Lengths are reserved as fixed three-byte varints (a run is at most kMaxEventBytes), so Close
// moves nothing. Thread safety: none (drain thread only). No allocation.
#ifndef FRAGSCOPE_INTERPOSE_PACKED_EVENT_RUN_H_
#define FRAGSCOPE_INTERPOSE_PACKED_EVENT_RUN_H_

#include <cstddef>
#include <cstdint>

#include "fragscope/packed_events.h"
#include "shipping/wire_encoder.h"

namespace fragscope::agent {

class PackedEventRun {
 public:
  // PackedEvents.events bytes per run at most: a run is a frame the collector reads whole.
  static constexpr size_t kMaxEventBytes = 60 << 10;
  // Bytes one event takes at most: header, seq, time, tid, address, mask and 11 values.
  static constexpr size_t kMaxPackedEventBytes = 1 + 10 + 10 + 5 + 10 + 2 + 11 * 10;
  // What a run costs besides its events: frame length, body tag and length, events tag and
  // length, count tag and value.
  static constexpr size_t kOverheadBytes = 3 + 2 + 3 + 1 + 3 + 1 + 5;

  bool open() const { return open_; }
  uint32_t count() const { return count_; }

  // Adds one event (`body`: its Frame field number; `field`: its values by field number, 1 to
  // packed::kMaxField, as libprotobuf would parse them), opening a run first if none is open.
  // False, with the writer unchanged, when the run is full or the writer has no room for it;
  // the caller then closes the run, writes the writer out and adds it again.
  bool Add(WireWriter& w, uint32_t body, const uint64_t* field);
  // Ends the run: fills in its lengths and count. No-op when none is open.
  void Close(WireWriter& w);
  // Forgets an open run without touching the writer (the caller cleared or truncated it).
  void Abandon() { open_ = false; }

 private:
  bool Open(WireWriter& w);

  bool open_ = false;
  size_t start_ = 0;   // where the run's frame begins in the writer
  size_t events_ = 0;  // where its events begin
  uint32_t count_ = 0;
  // The previous event's values (the encoding's "previous").
  uint64_t seq_ = 0;
  uint64_t time_ = 0;
  uint64_t tid_ = 0;
  uint64_t address_ = 0;
  uint64_t fields_[wire::packed::kSlots][wire::packed::kMaxField + 1] = {};
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_PACKED_EVENT_RUN_H_
