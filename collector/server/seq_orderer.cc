#include "fragscope/server/seq_orderer.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

namespace fragscope {

uint64_t EventSeq(const v1::Frame& f) {
  switch (f.body_case()) {
    case v1::Frame::kFailed:
      return f.failed().seq();
    case v1::Frame::kMark:
      return f.mark().seq();
    case v1::Frame::kMemInfo:
      return f.mem_info().seq();
    default:
      return StateEventSeq(f);
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

bool SeqOrderer::Ready() const {
  const Held& top = held_.top();
  return top.seq < next_ || (top.seq == next_ && top.owns_seq);
}

const AddressBtree<uint64_t>& SeqOrderer::LiveOrdered() {
  if (!ordered_) {
    std::vector<std::pair<uint64_t, uint64_t>> sorted(live_.begin(), live_.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [address, size] : sorted) {
      live_ordered_.emplace_hint(live_ordered_.end(), address, size);
    }
    ordered_ = true;
  }
  return live_ordered_;
}

bool SeqOrderer::Fits(const v1::Frame& f) {
  if (f.has_free()) return f.free().result() != 0 || live_.contains(f.free().address());
  if (!f.has_alloc()) return true;
  const uint64_t begin = f.alloc().address();
  const uint64_t end = begin + std::max<uint64_t>(f.alloc().size(), 1);
  const AddressBtree<uint64_t>& live = LiveOrdered();
  auto next = live.lower_bound(begin);
  if (next != live.end() && next->first < end) return false;
  return next == live.begin() || std::prev(next)->first + std::prev(next)->second <= begin;
}

void SeqOrderer::Arrived(uint64_t seq) {
  auto it = missing_.upper_bound(seq);
  if (it == missing_.begin()) return;
  --it;
  const auto [first, last] = *it;
  if (seq > last) return;
  missing_.erase(it);
  if (first < seq) missing_.emplace(first, seq - 1);
  if (seq < last) missing_.emplace(seq + 1, last);
}

void SeqOrderer::NotMissingUpTo(uint64_t seq) {
  while (!missing_.empty() && missing_.begin()->first <= seq) {
    const uint64_t last = missing_.begin()->second;
    missing_.erase(missing_.begin());
    if (last > seq) missing_.emplace(seq + 1, last);
  }
}

void SeqOrderer::Emit(uint64_t seq, bool owns_seq, const v1::Frame& frame, const Sink& sink) {
  if (seq < released_) ++late_;
  released_ = std::max(released_, seq);
  // A sample's seq is not its own: releasing it says nothing about that event.
  Advance(seq);
  if (owns_seq) next_ = std::max(next_, seq + 1);
  if (IsStateEvent(frame)) policy_.OnStateEvent();
  UpdateLive(frame);
  sink(frame);
  if (!parked_.empty()) ReleaseParked(sink);
}

void SeqOrderer::Park(Held h) {
  Advance(h.seq);  // it came: the seqs after it may go
  next_ = std::max(next_, h.seq + 1);
  const std::pair<uint64_t, uint64_t> key{h.seq, h.arrival};
  parked_.emplace(key, std::move(h));
}

void SeqOrderer::ReleaseParked(const Sink& sink) {
  if (emitting_parked_) return;
  emitting_parked_ = true;
  // In seq order, each as soon as it fits; all of them once nothing is missing any more (what
  // still does not fit then is the model's to count).
  for (bool progress = true; progress;) {
    progress = false;
    for (auto it = parked_.begin(); it != parked_.end(); ++it) {
      if (!missing_.empty() && !Fits(it->second.frame)) continue;
      Held h = std::move(it->second);
      parked_.erase(it);
      Emit(h.seq, h.owns_seq, h.frame, sink);
      progress = true;
      break;
    }
  }
  emitting_parked_ = false;
}

void SeqOrderer::Release(const Sink& sink) {
  Held h = std::move(const_cast<Held&>(held_.top()));
  held_.pop();
  if (!missing_.empty() && !Fits(h.frame) && parked_.size() < window_ / 16 + 64) {
    Park(std::move(h));
    return;
  }
  Emit(h.seq, h.owns_seq, h.frame, sink);
}

void SeqOrderer::OnSnapshot(const v1::Frame& frame, const Sink& sink) {
  const uint64_t s = frame.snapshot().seq();
  const bool without_baseline = policy_.WithoutBaseline();
  if (!policy_.Replaces(frame.snapshot())) {
    // A seek point (SnapshotPolicy): the events at or below its seq still to come are applied
    // as they come, in order, and nothing is covered. The model, fed the same frames, ignores it
    // too.
    sink(frame);
    return;
  }
  // A PERIODIC snapshot that replaces because no state event came before it: held state events
  // at or below it are covered rather than released first, which would give the model a
  // baseline and make it take the snapshot for a seek point.
  const bool cover_held_state =
      frame.snapshot().reason() == v1::Snapshot::REASON_PERIODIC && without_baseline;
  // Everything at or below the snapshot's seq goes first, in seq order, except an alloc or
  // free that does not fit past a gap: the snapshot holds its effect.
  while (!held_.empty() && held_.top().seq <= s) {
    Held h = std::move(const_cast<Held&>(held_.top()));
    held_.pop();
    if ((cover_held_state && IsStateEvent(h.frame)) ||
        ((h.seq > next_ || !missing_.empty()) && !Fits(h.frame))) {
      ++covered_;
      Advance(h.seq);
      next_ = std::max(next_, h.seq + 1);
    } else {
      Emit(h.seq, h.owns_seq, h.frame, sink);
    }
  }
  for (auto it = parked_.begin(); it != parked_.end() && it->first.first <= s;) {
    ++covered_;  // parked: an alloc/free that still does not fit
    it = parked_.erase(it);
  }
  floor_ = std::max(floor_, s);
  next_ = std::max(next_, s + 1);
  NotMissingUpTo(s);
  sink(frame);
  live_.clear();
  DropLiveOrdered();
  for (const v1::LiveAllocation& a : frame.snapshot().allocations()) {
    live_.insert_or_assign(a.address(), a.size());
  }
  ReleaseParked(sink);
  while (!held_.empty() && Ready()) Release(sink);
}

void SeqOrderer::PushGeneral(const v1::Frame& frame, const Sink& sink) {
  const uint64_t seq = EventSeq(frame);
  if (seq == 0) {
    switch (frame.body_case()) {
      case v1::Frame::kSnapshot:
        OnSnapshot(frame, sink);
        return;
      case v1::Frame::kDrops:
      case v1::Frame::kEnd:
        // Dropped seqs will never come, and End closes the stream: release everything.
        Flush(sink);
        if (frame.has_drops()) policy_.OnDrops(frame.drops());
        break;
      default:
        break;  // metadata (Hello, devices, modules, stacks) applies at once
    }
    sink(frame);
    return;
  }
  if (seq <= floor_ && IsStateEvent(frame)) {
    ++covered_;
    return;
  }
  // Whether the seq was taken for this event: every event but a MemInfo sample, which quotes
  // the last seq handed out.
  const bool owns = !frame.has_mem_info();
  // In order with nothing waiting: what the heap below would do at once (the top is this event
  // and it is ready; nothing missing, so it fits), without copying the frame into it.
  if (held_.empty() && parked_.empty() && missing_.empty() && (owns ? seq == next_ : seq < next_)) {
    ++arrivals_;
    if (ordered_) [[unlikely]] {
      DropLiveOrdered();  // in order again: Fits has nothing to judge
    }
    Emit(seq, owns, frame, sink);
    return;
  }
  if (owns && seq < next_) Arrived(seq);  // a straggler
  held_.push(Held{seq, owns, arrivals_++, frame});
  for (;;) {
    while (!held_.empty() && Ready()) Release(sink);
    if (held_.size() <= window_) break;
    Advance(held_.top().seq);  // full: past the gap, whose seqs are remembered as missing
    Release(sink);
  }
}

void SeqOrderer::Flush(const Sink& sink) {
  // Nothing is awaited any more: parked frames go back in seq order with the rest, and what
  // still does not fit is the model's to count.
  missing_.clear();
  for (auto& [key, h] : parked_) held_.push(std::move(h));
  parked_.clear();
  while (!held_.empty()) Release(sink);
}

}  // namespace fragscope
