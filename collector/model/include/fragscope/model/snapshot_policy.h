// Whether a Snapshot frame replaces a reader's live state, or is only a seek point.
//
// The agent takes a snapshot of its live table exact at the hooks' current seq S, while its
// drain thread may still hold events at or below S that it writes after the snapshot (a ring
// backlog: tens of thousands of events under load). A reader that replaces its state with the
// snapshot must then skip those events (their effect is in it), and so loses their history:
// peaks, the timeline, sites at peak and recent events between the stream's position and S. In a
// demo run with FRAGSCOPE_SNAPSHOT_EVERY=20 the report lost 234 of 286 events and a third of the
// peak. Such a loss is the price of a snapshot that repairs something; a PERIODIC snapshot
// repairs nothing for a reader that has followed the stream from its start without losing
// events: it exists so that a reader can start in the middle (flight-recorder segments begin
// with one). So a PERIODIC snapshot replaces the state only when the reader has no baseline yet
// (no state event before it: the stream begins with it) or lost events since its last
// replacing snapshot (a Drops frame that added to the count). Every other reason (STREAM_START,
// RESYNC, IMPORTED) always replaces.
//
// The model and the seq orderer in front of it each keep one, fed with the same frames in the
// same order (the orderer with what it releases, the model with what it applies), so they
// decide alike. Not thread-safe; one per stream.
#ifndef FRAGSCOPE_MODEL_SNAPSHOT_POLICY_H_
#define FRAGSCOPE_MODEL_SNAPSHOT_POLICY_H_

#include <algorithm>
#include <cstdint>

#include "fragscope.pb.h"

namespace fragscope {

class SnapshotPolicy {
 public:
  // An alloc, free, map, handle or block event was applied.
  void OnStateEvent() { baseline_ = true; }
  // A Drops frame was applied. Returns the running total of dropped events it implies (frames
  // carry the increment and the total; either may be all a writer filled).
  uint64_t OnDrops(const v1::Drops& drops) {
    const uint64_t total = std::max(dropped_ + drops.dropped_events(), drops.total_dropped());
    if (total != dropped_) lost_ = true;
    dropped_ = total;
    return dropped_;
  }
  // Whether `snapshot` replaces the live state. Call once per snapshot, in stream order.
  bool Replaces(const v1::Snapshot& snapshot) {
    const bool replaces = snapshot.reason() != v1::Snapshot::REASON_PERIODIC || !baseline_ || lost_;
    if (replaces) {
      baseline_ = true;
      lost_ = false;
    }
    return replaces;
  }
  // Whether a PERIODIC snapshot now would replace because nothing came before it (rather than
  // because events were lost): the orderer then drops the state events at or below its seq that
  // it still holds instead of releasing them first, since releasing them would give the model
  // the baseline the orderer decided without.
  bool WithoutBaseline() const { return !baseline_; }

 private:
  bool baseline_ = false;  // a state event or a replacing snapshot was applied
  bool lost_ = false;      // events were lost since the last replacing snapshot
  uint64_t dropped_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_SNAPSHOT_POLICY_H_
