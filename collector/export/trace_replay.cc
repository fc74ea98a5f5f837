#include "fragscope/export/trace_replay.h"

#include <cstdint>
#include <deque>
#include <utility>

#include "fragscope/model/segment_layout.h"

#include "fragscope/model/snapshot_policy.h"
#include "fragscope/server/seq_orderer.h"

namespace fragscope::exporter {

const char* HistoryActionName(HistoryEntry::Action action) {
  switch (action) {
    case HistoryEntry::Action::kAlloc:
      return "alloc";
    case HistoryEntry::Action::kFreeRequested:
      return "free_requested";
    case HistoryEntry::Action::kFreeCompleted:
      return "free_completed";
    case HistoryEntry::Action::kSegmentAlloc:
      return "segment_alloc";
    case HistoryEntry::Action::kSegmentFree:
      return "segment_free";
    case HistoryEntry::Action::kSegmentMap:
      return "segment_map";
    case HistoryEntry::Action::kSegmentUnmap:
      return "segment_unmap";
  }
  return "?";
}

namespace {

using Action = HistoryEntry::Action;

// Follows the frames the model applies and writes the history entries.
class Recorder {
 public:
  Recorder(std::size_t max_history, ReplayRecord& record)
      : max_history_(max_history), record_(record) {}

  void Observe(const v1::Frame& f) {
    switch (f.body_case()) {
      case v1::Frame::kMark:
        record_.marks.push_back({f.mark().seq(), f.mark().time_ns(), f.mark().label()});
        return;
      case v1::Frame::kBlock:
        policy_.OnStateEvent();
        Block(f.block());
        return;
      case v1::Frame::kAlloc:
        policy_.OnStateEvent();
        Alloc(f.alloc());
        return;
      case v1::Frame::kFree:
        policy_.OnStateEvent();
        Free(f.free());
        return;
      case v1::Frame::kMap:
        policy_.OnStateEvent();
        Map(f.map());
        return;
      case v1::Frame::kHandle:
        policy_.OnStateEvent();
        return;
      case v1::Frame::kDrops:
        policy_.OnDrops(f.drops());
        return;
      case v1::Frame::kSnapshot:
        if (policy_.Replaces(f.snapshot())) Restart(f.snapshot());
        return;
      default:
        return;
    }
  }

  // Segments still held: a driver allocation that never held a block is one allocation, and an
  // opaque one is left out (as the snapshot leaves it out: its inside is unknown).
  void Finish(const ProcessModel& model) {
    for (auto& [device, segs] : segments_) {
      std::map<uint64_t, Coverage> coverage;
      for (const SegmentLayout& l : model.SegmentLayouts(device, SIZE_MAX)) {
        coverage[l.base] = l.coverage;
      }
      for (auto& [address, seg] : segs) {
        auto open = open_.find(seg.id);
        if (open == open_.end()) continue;
        auto c = coverage.find(address);
        if (c != coverage.end() && c->second == Coverage::kOpaque) {
          open->second.second->omit = true;
        } else if (!seg.has_blocks) {
          open->second.second->whole = true;
        }
      }
    }
    for (auto& [device, entries] : pending_) {
      std::vector<HistoryEntry>& out = record_.history[device];
      out.reserve(entries.size());
      for (Pending& p : entries) {
        if (p.omit) continue;
        out.push_back(p.entry);
        if (p.whole && p.entry.action == Action::kSegmentAlloc) {
          HistoryEntry alloc = p.entry;
          alloc.action = Action::kAlloc;
          out.push_back(alloc);
        }
      }
    }
    pending_.clear();
  }

 private:
  struct Pending {
    HistoryEntry entry;
    bool whole = false;  // a segment_alloc whose segment held no block: also an alloc
    bool omit = false;   // a segment_alloc of a segment still held and opaque
    uint64_t id = 0;     // segment_alloc: the segment it opened
  };
  struct Segment {
    uint64_t size = 0;
    uint64_t id = 0;  // the Pending::id of its segment_alloc
    bool has_blocks = false;
  };
  struct LiveBlock {
    uint64_t size = 0;
    uint64_t stream = 0;
    uint64_t stack_id = 0;
    bool pending = false;
  };

  void Push(int device, const HistoryEntry& e, uint64_t id = 0) {
    if (device < 0) return;  // the format has one list per CUDA ordinal
    std::deque<Pending>& list = pending_[device];
    list.push_back({e, false, false, id});
    if (list.size() > max_history_) {
      if (list.front().id != 0) open_.erase(list.front().id);
      list.pop_front();
      ++record_.history_entries_dropped;
    }
    if (id != 0) open_[id] = {device, &list.back()};
  }

  void MarkWhole(int device, const Segment& seg) {
    (void)device;
    if (auto it = open_.find(seg.id); it != open_.end()) it->second.second->whole = true;
  }

  Segment* SegmentAt(int device, uint64_t address) {
    auto d = segments_.find(device);
    if (d == segments_.end() || d->second.empty()) return nullptr;
    auto it = d->second.upper_bound(address);
    if (it == d->second.begin()) return nullptr;
    --it;
    return address < it->first + it->second.size ? &it->second : nullptr;
  }

  void Block(const v1::BlockEvent& b) {
    const int device = b.device();
    auto& live = blocks_[device];
    HistoryEntry e{Action::kAlloc, b.seq(),    b.time_ns(), b.address(),
                   b.size(),       b.stream(), b.stack_id()};
    switch (b.op()) {
      case v1::BlockEvent::OP_ALLOC:
        live[b.address()] = {b.size(), b.stream(), b.stack_id(), false};
        if (Segment* s = SegmentAt(device, b.address())) s->has_blocks = true;
        Push(device, e);
        return;
      case v1::BlockEvent::OP_FREE_PENDING:
      case v1::BlockEvent::OP_FREE: {
        auto it = live.find(b.address());
        if (it != live.end()) {
          // The free's size and stream may be unset: the block's own are PyTorch's.
          e.size = it->second.size;
          e.stream = it->second.stream;
          if (e.stack_id == 0) e.stack_id = it->second.stack_id;
        }
        const bool was_pending = it != live.end() && it->second.pending;
        if (!was_pending) {
          e.action = Action::kFreeRequested;
          Push(device, e);
        }
        if (b.op() == v1::BlockEvent::OP_FREE_PENDING) {
          if (it != live.end()) it->second.pending = true;
          return;
        }
        e.action = Action::kFreeCompleted;
        Push(device, e);
        if (it != live.end()) live.erase(it);
        return;
      }
      default:
        return;  // site updates change no memory
    }
  }

  void Alloc(const v1::AllocEvent& a) {
    if (a.result() != 0 || a.pool() != 0 || a.in_capture()) return;
    if (a.kind() != v1::MEMORY_KIND_DEVICE && a.kind() != v1::MEMORY_KIND_PITCHED &&
        a.kind() != v1::MEMORY_KIND_UNSPECIFIED) {
      return;  // managed, pool, graph and imported memory are not segments in PyTorch's sense
    }
    const uint64_t id = ++next_id_;
    segments_[a.device()][a.address()] = {a.size(), id, false};
    Push(a.device(),
         {Action::kSegmentAlloc, a.seq(), a.time_ns(), a.address(), a.size(), a.stream(),
          a.stack_id()},
         id);
  }

  void Free(const v1::FreeEvent& f) {
    if (f.result() != 0) return;
    for (auto& [device, segs] : segments_) {
      auto it = segs.find(f.address());
      if (it == segs.end()) continue;
      const Segment seg = it->second;
      segs.erase(it);
      HistoryEntry e{Action::kFreeRequested,
                     f.seq(),
                     f.time_ns(),
                     f.address(),
                     seg.size,
                     f.stream(),
                     f.stack_id()};
      // Blocks still live go with their segment (a program that frees a segment its allocator
      // never emptied, at exit say): freed first, as PyTorch only frees empty segments.
      auto& live = blocks_[device];
      const auto first = live.lower_bound(f.address());
      const auto last = live.lower_bound(f.address() + seg.size);
      for (auto b = first; b != last; ++b) {
        HistoryEntry bf{Action::kFreeRequested, f.seq(),          f.time_ns(),       b->first,
                        b->second.size,         b->second.stream, b->second.stack_id};
        if (!b->second.pending) Push(device, bf);
        bf.action = Action::kFreeCompleted;
        Push(device, bf);
      }
      live.erase(first, last);
      if (!seg.has_blocks) {
        MarkWhole(device, seg);
        Push(device, e);
        e.action = Action::kFreeCompleted;
        Push(device, e);
      }
      e.action = Action::kSegmentFree;
      Push(device, e);
      open_.erase(seg.id);
      return;
    }
  }

  void Map(const v1::MapEvent& m) {
    if (m.result() != 0) return;
    int device = m.device();
    switch (m.op()) {
      case v1::MapEvent::OP_RESERVE:
        reservations_[m.address()] = {m.size(), m.device()};
        return;
      case v1::MapEvent::OP_FREE_RANGE:
        reservations_.erase(m.address());
        return;
      case v1::MapEvent::OP_MAP:
      case v1::MapEvent::OP_UNMAP: {
        if (device < 0) {
          auto it = reservations_.upper_bound(m.address());
          if (it != reservations_.begin()) device = std::prev(it)->second.second;
        }
        uint64_t size = m.size();
        if (m.op() == v1::MapEvent::OP_MAP) {
          mapped_[m.address()] = size;
        } else if (auto it = mapped_.find(m.address()); it != mapped_.end()) {
          if (size == 0) size = it->second;
          mapped_.erase(it);
        }
        Push(device, {m.op() == v1::MapEvent::OP_MAP ? Action::kSegmentMap : Action::kSegmentUnmap,
                      m.seq(), m.time_ns(), m.address(), size, 0, m.stack_id()});
        return;
      }
      default:
        return;
    }
  }

  // A replacing snapshot: the history so far no longer leads to the state; start again from
  // what the snapshot holds.
  void Restart(const v1::Snapshot& s) {
    pending_.clear();
    open_.clear();
    segments_.clear();
    blocks_.clear();
    mapped_.clear();
    reservations_.clear();
    record_.history_restarted_at_seq = s.seq();
    for (const v1::LiveAllocation& a : s.allocations()) {
      if (a.pool() != 0) continue;
      segments_[a.device()][a.address()] = {a.size(), 0, false};
    }
    for (const v1::LiveReservation& r : s.reservations()) {
      reservations_[r.address()] = {r.size(), r.device()};
    }
    for (const v1::LiveMapping& m : s.mappings()) mapped_[m.address()] = m.size();
    for (const v1::LiveBlock& b : s.blocks()) {
      blocks_[b.device()][b.address()] = {b.size(), b.stream(), b.stack_id(), b.pending_free()};
      if (Segment* seg = SegmentAt(b.device(), b.address())) seg->has_blocks = true;
    }
  }

  std::size_t max_history_;
  ReplayRecord& record_;
  SnapshotPolicy policy_;
  std::map<int, std::deque<Pending>> pending_;
  // Open segment_alloc entries by segment id: deque elements stay put on push_back/pop_front.
  std::map<uint64_t, std::pair<int, Pending*>> open_;
  std::map<int, std::map<uint64_t, Segment>> segments_;
  std::map<int, std::map<uint64_t, LiveBlock>> blocks_;
  std::map<uint64_t, uint64_t> mapped_;                        // address -> size
  std::map<uint64_t, std::pair<uint64_t, int>> reservations_;  // address -> (size, device)
  uint64_t next_id_ = 0;
};

// The events a stop seq may name: those that change live state, and failed allocations (an
// OOM's seq).
bool IsStopEvent(const v1::Frame& f) { return IsStateEvent(f) || f.has_failed(); }

}  // namespace

bool ReplayStream(const FrameSource& next, const ReplayOptions& options, ProcessModel& model,
                  ReplayRecord& record) {
  Recorder recorder(options.max_history, record);
  SeqOrderer orderer;
  bool reached = false;  // the stop seq was applied
  bool done = false;     // and what belongs with it
  auto apply = [&](const v1::Frame& f) {
    if (done) return;
    if (reached) {
      // After the stop event, only the blocks placed for it directly.
      const bool block_alloc = f.has_block() && f.block().op() == v1::BlockEvent::OP_ALLOC;
      if (!options.stop_after_blocks || (IsStopEvent(f) && !block_alloc)) {
        done = true;
        return;
      }
    }
    model.Apply(f);
    recorder.Observe(f);
    if (options.stop_at_seq && !reached && EventSeq(f) == *options.stop_at_seq && IsStopEvent(f)) {
      reached = true;
      done = !options.stop_after_blocks;
    }
  };
  v1::Frame frame;
  while (!done && next(&frame)) orderer.Push(frame, apply);
  if (!done) orderer.Flush(apply);
  recorder.Finish(model);
  return !options.stop_at_seq || reached;
}

}  // namespace fragscope::exporter
