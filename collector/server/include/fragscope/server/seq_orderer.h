// Puts an agent stream's events back in sequence order before the model sees them.
//
// The agent takes a global sequence number per event (before a release, after an acquire), but
// threads push into its ring in whatever order the scheduler lets them, so frames can arrive
// out of seq order: a free of a reused address may arrive before the alloc that preceded it.
// The model must see them by seq (DESIGN.md "Nesting and order"), so this orderer holds events
// in a bounded min-heap and releases them when the sequence is contiguous, when the window is
// full (a seq that will never come: a drop), or at a Snapshot / Drops / End / end of stream.
#ifndef FRAGSCOPE_SERVER_SEQ_ORDERER_H_
#define FRAGSCOPE_SERVER_SEQ_ORDERER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "fragscope.pb.h"

namespace fragscope {

// Not thread-safe; one per stream. Memory: at most `window` frames.
class SeqOrderer {
 public:
  using Sink = std::function<void(const v1::Frame&)>;

  explicit SeqOrderer(std::size_t window = 65536) : window_(window) {}

  // Takes the next frame in arrival order; hands every frame that is ready to `sink`, in order.
  void Push(v1::Frame frame, const Sink& sink);
  // Releases everything held (end of stream).
  void Flush(const Sink& sink);

  // State events that arrived after a Snapshot already covering them (seq <= its seq): skipped.
  uint64_t covered_by_snapshot() const { return covered_; }
  // Events released before a smaller seq that was still in flight (a late straggler after a
  // forced release); they were applied late rather than dropped.
  uint64_t late() const { return late_; }

 private:
  struct Held {
    uint64_t seq;
    uint64_t arrival;  // ties (same seq) keep arrival order
    v1::Frame frame;
  };
  struct Later {
    bool operator()(const Held& a, const Held& b) const {
      return a.seq != b.seq ? a.seq > b.seq : a.arrival > b.arrival;
    }
  };
  void Release(const Sink& sink);
  void ReleaseUpTo(uint64_t seq, const Sink& sink);

  std::size_t window_;
  std::priority_queue<Held, std::vector<Held>, Later> held_;
  uint64_t next_ = 1;      // the seq expected next
  uint64_t floor_ = 0;     // seq of the last Snapshot: state events at or below are in it
  uint64_t released_ = 0;  // highest seq handed to the sink
  uint64_t arrivals_ = 0;
  uint64_t covered_ = 0;
  uint64_t late_ = 0;
};

// The seq of an event frame, or 0 for frames without one (metadata).
uint64_t EventSeq(const v1::Frame& frame);
// Whether the frame changes live state (and so is superseded by a later Snapshot).
bool IsStateEvent(const v1::Frame& frame);

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_SEQ_ORDERER_H_
