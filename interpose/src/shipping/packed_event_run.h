// Writes a Frame.packed frame (PackedEvents, fragscope.proto format 2.0) into a WireWriter, one
// event at a time, in the encoding fragscope/packed_events.h defines. A run of events sent this
// way takes a tenth (one thread's alloc/free pairs) to a half (a random mix) of the bytes of the
// same events as frames of their own.
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

  // Takes one event's fields, as a WireWriter does (the same calls, so EncodeEventBody writes
  // them): every field of the message, zero or not, in ascending order, none past
  // packed::kMaxField, api below packed::kApis. Compares each with the previous event as the
  // encoding says (packed_events.h) as it comes and keeps only the values that changed, in their
  // packed form.
  class EventWriter {
   public:
    EventWriter(PackedEventRun& run, uint32_t body, uint8_t* values)
        : run_(run),
          slot_(wire::packed::SlotOf(body)),
          address_field_(wire::packed::ShapeOf(body).address_field),
          values_(values) {}
    void Uint64(uint32_t field, uint64_t value) { Field(field, value, value); }
    void Uint32(uint32_t field, uint32_t value) { Field(field, value, value); }
    void Bool(uint32_t field, bool value) { Field(field, value ? 1 : 0, value ? 1 : 0); }
    // int32 and enum fields: held sign-extended, as libprotobuf parses them, and sent as the
    // zigzag of the int32 (the agent's enumerations are small: an enum is an int32 here).
    void Int32(uint32_t field, int32_t value) {
      Field(field, static_cast<uint64_t>(static_cast<int64_t>(value)), wire::packed::ZigZag(value));
    }
    void Enum(uint32_t field, uint32_t value) { Int32(field, static_cast<int32_t>(value)); }
    // Not in the five packable messages.
    void PresentUint64(uint32_t, uint64_t) {}
    void Bytes(uint32_t, const void*, size_t) {}

   private:
    friend class PackedEventRun;
    void Field(uint32_t field, uint64_t value, uint64_t on_wire) {
      if (field < wire::packed::kFirstMaskedField) {
        common_[field] = value;  // seq, time, tid
      } else if (field == wire::EventCommon::kApi) {
        previous_ = run_.state_.ApiFields(value);
        previous_[field] = value;
        if (value != run_.state_.last_api[slot_]) {
          run_.state_.last_api[slot_] = value;
          mask_ |= 1;
          values_ = PutVarint(values_, on_wire);
        }
      } else if (field == address_field_) {
        address_ = value;
        previous_[field] = value;  // as the reader keeps it: another message's field may be here
      } else if (value != previous_[field]) {
        previous_[field] = value;
        mask_ |= 1u << (field - wire::packed::kFirstMaskedField);
        values_ = PutVarint(values_, on_wire);
      }
    }
    PackedEventRun& run_;
    int slot_;
    uint32_t address_field_;
    uint64_t* previous_ = nullptr;  // the api's fields, once the api came
    uint8_t* values_;
    uint64_t common_[wire::packed::kFirstMaskedField] = {};
    uint64_t address_ = 0;
    uint32_t mask_ = 0;
  };

  // Adds one event of message `body` (its Frame field number: kAlloc, kFree, kMap, kHandle,
  // kBlock), opening a run first if none is open; `write_fields(EventWriter&)` writes its fields.
  // False, with the writer and the run unchanged, when the run is full or the writer has no
  // room for it; the caller then closes the run, writes the writer out and adds it again.
  template <typename WriteFields>
  bool Add(WireWriter& w, uint32_t body, WriteFields&& write_fields) {
    uint8_t* p = Room(w);
    if (p == nullptr) return false;
    uint8_t values[kMaxValueBytes];
    EventWriter fields(*this, body, values);
    write_fields(fields);
    w.Commit(Finish(p, body, fields, values));
    ++count_;
    return true;
  }
  // Ends the run: fills in its lengths and count. No-op when none is open.
  void Close(WireWriter& w);
  // Forgets an open run without touching the writer (the caller cleared or truncated it).
  void Abandon() { open_ = false; }

 private:
  static constexpr size_t kMaxValueBytes = 11 * 10;
  bool Open(WireWriter& w);
  // Where the next event goes (opening the run if needed), or nullptr when it does not fit.
  uint8_t* Room(WireWriter& w);
  // Writes the event `fields` took at p: header, seq, time, tid, address, mask, then the values.
  uint8_t* Finish(uint8_t* p, uint32_t body, const EventWriter& fields, const uint8_t* values);

  bool open_ = false;
  size_t start_ = 0;   // where the run's frame begins in the writer
  size_t events_ = 0;  // where its events begin
  uint32_t count_ = 0;
  wire::packed::RunState state_;  // the encoding's "previous"
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_PACKED_EVENT_RUN_H_
