// Puts an agent stream's events back in sequence order before the model sees them.
//
// The agent takes a global sequence number per event (before a release, after an acquire), but
// threads push into its ring in whatever order the scheduler lets them, so frames can arrive
// out of seq order: a free of a reused address may arrive before the alloc that preceded it.
// The model must see them by seq (interpose/README.md, "What an event is"), so this orderer holds events
// in a bounded min-heap and releases them when the sequence is contiguous, when the window is
// full (a seq that will never come: a drop), or at a Snapshot / Drops / End / end of stream.
//
// Only events that take a seq of their own (alloc, free, map, handle, failed, block, mark) make
// the sequence contiguous. A MemInfo sample carries the last seq handed out when it was taken,
// which is another event's seq, possibly one still in flight: it waits until that event has
// been released and never advances the expected seq itself (it once did, and the events after
// it were then released over the gap, ahead of the one still in flight).
//
// A seq can stay in flight for long: the agent takes a release's seq before the real free,
// which may wait on the driver's lock while other threads make tens of thousands of events. When
// the window fills, the orderer releases past such a gap and remembers the seqs it skipped.
// While any is missing, an alloc or free is released only if it fits the live allocations
// released so far (an alloc over a live range, or a free of an address not live, depends on a
// missing seq): one that does not is parked until it fits (its straggler came, late), a
// Snapshot covers it, or the stream ends or drops events. At a Snapshot S that replaces the
// state (SnapshotPolicy: not a PERIODIC one while the stream is followed without loss, which is
// only a seek point and passes through), seqs at or below S are no longer missing (it holds
// their effect), and an alloc/free at or below S that does not fit is dropped rather than
// applied out of order (the model would count it as unplaceable).
#ifndef FRAGSCOPE_SERVER_SEQ_ORDERER_H_
#define FRAGSCOPE_SERVER_SEQ_ORDERER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <queue>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "fragscope.pb.h"
#include "fragscope/model/address_btree.h"
#include "fragscope/model/snapshot_policy.h"
#include "fragscope/trace/hot_event_view.h"
#include "fragscope/trace/hot_frame_decoder.h"

namespace fragscope {

// The seq of a state event frame (alloc, free, map, handle, block; see IsStateEvent), 0 for any
// other frame. Inline: SeqOrderer::Push reads it for every frame; EventSeq covers the rest.
inline uint64_t StateEventSeq(const v1::Frame& frame) {
  switch (frame.body_case()) {
    case v1::Frame::kAlloc:
      return frame.alloc().seq();
    case v1::Frame::kFree:
      return frame.free().seq();
    case v1::Frame::kMap:
      return frame.map().seq();
    case v1::Frame::kHandle:
      return frame.handle().seq();
    case v1::Frame::kBlock:
      return frame.block().seq();
    default:
      return 0;
  }
}

// Not thread-safe; one per stream. Memory: at most `window` frames held plus at most
// `window` / 16 + 64 parked, and the live allocations (address, size) as released.
class SeqOrderer {
 public:
  // Called once per released frame. A reference to the caller's callable, not a copy (a
  // std::function cost an indirect call and a copy per frame): pass a named lambda, never store
  // a Sink made from a temporary.
  using Sink = absl::FunctionRef<void(const v1::Frame&)>;

  explicit SeqOrderer(std::size_t window = 65536) : window_(window) {}

  // Takes the next frame in arrival order; hands every frame that is ready to `sink` (any
  // callable taking a const v1::Frame&), in order. `frame` need only live for the call: an event
  // that is next in sequence with nothing held (nearly every event of a trace) goes to the sink
  // as it is, and only an event that must wait is copied.
  //
  // Inline, for that common case with a state event: the sink called directly (a lambda inlines)
  // and no calls through the general path, which is PushGeneral's.
  template <typename F>
  void Push(const v1::Frame& frame, F&& sink) {
    if (TakeInOrder(frame)) {
      sink(frame);
      return;
    }
    PushGeneral(frame, Sink(sink));
  }
  // The same for an event frame as decoded (ArenaFrameReader::Next(frame, event)): one that is
  // next in sequence with nothing held goes to `hot_sink` (any callable taking a const
  // HotEvent&) as it is, with no frame built; any other is built into the frame StoreHotEvent
  // makes and goes the general way, reaching `sink` as a frame like every frame Push takes.
  template <typename H, typename F>
  void Push(const HotEvent& event, H&& hot_sink, F&& sink) {
    if (TakeInOrder(event)) {
      hot_sink(event);
      return;
    }
    StoreHotEvent(event, &built_);
    PushGeneral(built_, Sink(sink));
  }
  // Releases everything held (end of stream).
  void Flush(const Sink& sink);

  // State events a Snapshot made redundant (seq <= its seq): those that arrived after it, and
  // allocs/frees past a gap that did not fit when it came. Skipped.
  uint64_t covered_by_snapshot() const { return covered_; }
  // Events released before a smaller seq that was still in flight (a late straggler after a
  // forced release); they were applied late rather than dropped.
  uint64_t late() const { return late_; }

 private:
  struct Held {
    uint64_t seq;
    bool owns_seq;     // false: a MemInfo sample quoting another event's seq
    uint64_t arrival;  // ties (same seq) keep arrival order
    v1::Frame frame;
  };
  struct Later {
    // By seq; at one seq the event that owns it first (a sample taken after it follows it).
    bool operator()(const Held& a, const Held& b) const {
      if (a.seq != b.seq) return a.seq > b.seq;
      if (a.owns_seq != b.owns_seq) return b.owns_seq;
      return a.arrival > b.arrival;
    }
  };
  void PushGeneral(const v1::Frame& frame, const Sink& sink);
  // PushGeneral's in-order case for a state event above the last Snapshot's seq, and Emit of an
  // event that owns its seq, with nothing held or parked: when `event` (a frame or a decoded
  // event) is that case, does their bookkeeping and returns true; the caller hands it on.
  template <typename Event>
  bool TakeInOrder(const Event& event) {
    if (!held_.empty() || !parked_.empty() || !missing_.empty() || ordered_) return false;
    const uint64_t seq = SeqOf(event);
    if (seq == 0 || seq != next_ || seq <= floor_) return false;
    ++arrivals_;
    released_ = std::max(released_, seq);
    next_ = seq + 1;
    policy_.OnStateEvent();
    UpdateLive(event);
    return true;
  }
  static uint64_t SeqOf(const v1::Frame& frame) { return StateEventSeq(frame); }
  static uint64_t SeqOf(const HotEvent& event) {
    return HotCommonView(event).seq();  // every decoded event is a state event
  }
  // The live allocations after `frame` (or a decoded event) is released.
  void UpdateLive(const v1::Frame& frame) {
    if (frame.has_alloc()) {
      AddLive(frame.alloc().address(), frame.alloc().size());
    } else if (frame.has_free() && frame.free().result() == 0) {
      RemoveLive(frame.free().address());
    }
  }
  void UpdateLive(const HotEvent& event) {
    if (event.body == v1::Frame::kAlloc) {
      AddLive(HotAllocView(event).address(), HotAllocView(event).size());
    } else if (event.body == v1::Frame::kFree && HotFreeView(event).result() == 0) {
      RemoveLive(HotFreeView(event).address());
    }
  }
  void AddLive(uint64_t address, uint64_t size) {
    live_.insert_or_assign(address, size);
    if (ordered_) live_ordered_.insert_or_assign(address, size);
  }
  void RemoveLive(uint64_t address) {
    if (auto it = live_.find(address); it != live_.end()) {
      live_.erase(it);
      if (ordered_) EraseOrdered(address);
    }
  }
  // Whether the top of the heap can go now: everything before it has been released.
  bool Ready() const;
  // The top of the heap goes: to the sink, or parked if it does not fit while seqs are missing.
  void Release(const Sink& sink);
  // Hands the event to the sink and keeps the live allocations up to date; then releases what
  // parked frames now fit.
  void Emit(uint64_t seq, bool owns_seq, const v1::Frame& frame, const Sink& sink);
  void Park(Held h);
  void ReleaseParked(const Sink& sink);
  // Whether an alloc/free fits the live allocations released so far (others always do).
  bool Fits(const v1::Frame& frame);
  void OnSnapshot(const v1::Frame& frame, const Sink& sink);
  // Moves the expected seq to `seq`, remembering the seqs skipped. Inline: every released
  // event calls it, and in a stream in order it does nothing.
  void Advance(uint64_t seq) {
    if (seq > next_) [[unlikely]] {
      missing_.emplace(next_, seq - 1);
      next_ = seq;
    }
  }
  void Arrived(uint64_t seq);         // a skipped seq came after all
  void NotMissingUpTo(uint64_t seq);  // a snapshot holds everything up to it

  std::size_t window_;
  std::priority_queue<Held, std::vector<Held>, Later> held_;
  uint64_t next_ = 1;      // the seq expected next
  uint64_t floor_ = 0;     // seq of the last Snapshot: state events at or below are in it
  uint64_t released_ = 0;  // highest seq handed to the sink
  uint64_t arrivals_ = 0;
  uint64_t covered_ = 0;
  uint64_t late_ = 0;
  std::map<std::pair<uint64_t, uint64_t>, Held> parked_;  // by (seq, arrival)
  // Allocation address -> size, as released: it changes at every alloc and free. A hash map,
  // because only an alloc past a gap (Fits) needs them in address order, and that is rare: in
  // an ordered map, every alloc and free of a stream in order paid a tree insert or erase (the
  // hash map made a report x1.09 faster; tests/bench/RESULTS.md).
  absl::flat_hash_map<uint64_t, uint64_t> live_;
  // live_ in address order, built when a Fits needs it and kept while seqs are missing; dropped
  // once the stream is in order again.
  AddressBtree<uint64_t> live_ordered_;
  bool ordered_ = false;
  const AddressBtree<uint64_t>& LiveOrdered();
  // The view mirrors live_, so the address is there; checked anyway, since erasing end() would
  // be undefined behaviour, and the view only exists past a gap, where the check costs nothing.
  void EraseOrdered(uint64_t address) {
    if (auto it = live_ordered_.find(address); it != live_ordered_.end()) live_ordered_.erase(it);
  }
  void DropLiveOrdered() {
    live_ordered_.clear();
    ordered_ = false;
  }
  std::map<uint64_t, uint64_t> missing_;  // seqs skipped and not come: first -> last
  // Fed what is released, like the model behind it, so both take a snapshot alike.
  SnapshotPolicy policy_;
  bool emitting_parked_ = false;
  v1::Frame built_;  // a decoded event built into a frame for the general path
};

// The seq of an event frame, or 0 for frames without one (metadata).
uint64_t EventSeq(const v1::Frame& frame);
// Whether the frame changes live state (and so is superseded by a later Snapshot).
bool IsStateEvent(const v1::Frame& frame);

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_SEQ_ORDERER_H_
