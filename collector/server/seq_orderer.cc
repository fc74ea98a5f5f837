#include "fragscope/server/seq_orderer.h"

#include <algorithm>

namespace fragscope {

uint64_t EventSeq(const v1::Frame& f) {
  switch (f.body_case()) {
    case v1::Frame::kAlloc:
      return f.alloc().seq();
    case v1::Frame::kFree:
      return f.free().seq();
    case v1::Frame::kMap:
      return f.map().seq();
    case v1::Frame::kHandle:
      return f.handle().seq();
    case v1::Frame::kFailed:
      return f.failed().seq();
    case v1::Frame::kBlock:
      return f.block().seq();
    case v1::Frame::kMark:
      return f.mark().seq();
    case v1::Frame::kMemInfo:
      return f.mem_info().seq();
    default:
      return 0;
  }
}

bool IsStateEvent(const v1::Frame& f) {
  switch (f.body_case()) {
    case v1::Frame::kAlloc:
    case v1::Frame::kFree:
    case v1::Frame::kMap:
    case v1::Frame::kHandle:
    case v1::Frame::kBlock:
      return true;
    default:
      return false;
  }
}

bool OwnsSeq(const v1::Frame& f) { return EventSeq(f) != 0 && !f.has_mem_info(); }

bool SeqOrderer::Ready() const {
  const Held& top = held_.top();
  return top.seq < next_ || (top.seq == next_ && top.owns_seq);
}

void SeqOrderer::Release(const Sink& sink) {
  Held h = std::move(const_cast<Held&>(held_.top()));
  held_.pop();
  if (h.seq < released_) ++late_;
  released_ = std::max(released_, h.seq);
  // A sample's seq is not its own: releasing it (forced) says nothing about that event.
  next_ = std::max(next_, h.owns_seq ? h.seq + 1 : h.seq);
  sink(h.frame);
}

void SeqOrderer::ReleaseUpTo(uint64_t seq, const Sink& sink) {
  while (!held_.empty() && held_.top().seq <= seq) Release(sink);
}

void SeqOrderer::Push(v1::Frame frame, const Sink& sink) {
  const uint64_t seq = EventSeq(frame);
  if (seq == 0) {
    switch (frame.body_case()) {
      case v1::Frame::kSnapshot: {
        // Everything at or below the snapshot's seq goes first (state events there are replaced
        // by it anyway; failures and marks keep their place), then the snapshot.
        const uint64_t s = frame.snapshot().seq();
        ReleaseUpTo(s, sink);
        floor_ = std::max(floor_, s);
        next_ = std::max(next_, s + 1);
        break;
      }
      case v1::Frame::kDrops:
      case v1::Frame::kEnd:
        // Dropped seqs will never come, and End closes the stream: release everything.
        Flush(sink);
        break;
      default:
        break;  // metadata (Hello, devices, modules, stacks) applies at once
    }
    sink(frame);
    return;
  }
  if (IsStateEvent(frame) && seq <= floor_) {
    ++covered_;
    return;
  }
  const bool owns = OwnsSeq(frame);
  held_.push(Held{seq, owns, arrivals_++, std::move(frame)});
  while (!held_.empty() && (Ready() || held_.size() > window_)) Release(sink);
}

void SeqOrderer::Flush(const Sink& sink) {
  while (!held_.empty()) Release(sink);
}

}  // namespace fragscope
