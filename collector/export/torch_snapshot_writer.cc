#include "fragscope/export/torch_snapshot_writer.h"

#include <algorithm>
#include <map>
#include <vector>

#include "fragscope/export/pickle_writer.h"
#include "fragscope/report/stack_cut.h"

namespace fragscope::exporter {
namespace {

// PyTorch's caching allocator puts requests up to 1 MiB in 2 MiB "small" segments.
constexpr uint64_t kSmallSegmentMax = uint64_t{2} << 20;

// One piece of a segment entry, in address order.
struct Piece {
  uint64_t address = 0;
  uint64_t size = 0;
  const char* state = "inactive";
  uint64_t stack_id = 0;
};

class SnapshotWriter {
 public:
  SnapshotWriter(const ExportInput& in, Symbolizer& symbolizer, TorchSnapshotStats* stats)
      : in_(in), symbolizer_(symbolizer), stats_(*stats) {}

  std::string Write() {
    w_.BeginDict();
    w_.String("segments");
    w_.BeginList();
    for (const auto& [device, segs] : in_.segments) {
      if (device < 0) continue;
      for (const SegmentLayout& s : segs) Segment(s);
    }
    w_.EndList();
    w_.String("device_traces");
    DeviceTraces();
    w_.EndDict();
    for (const auto& [device, n] : in_.segments_left_out) stats_.segments_left_out += n;
    for (const DeviceSummary& d : in_.summary.devices) {
      stats_.other_bytes_left_out += d.pool_reserved_bytes + d.managed_bytes + d.graph_bytes;
    }
    return w_.Finish();
  }

 private:
  void Frames(uint64_t stack_id) {
    w_.BeginList();
    if (stack_id != 0) {
      for (const SymbolizedFrame& f : SymbolizeStack(in_.summary, stack_id, symbolizer_)) {
        w_.BeginDict();
        w_.String("name");
        w_.String(!f.function.empty() ? f.function : FormatFrame(f));
        w_.String("filename");
        w_.String(!f.file.empty() ? f.file : f.module);
        w_.String("line");
        w_.Uint(f.line);
        w_.EndDict();
      }
      // A cut stack gets a synthetic outermost frame, so PyTorch's viewer (which shows frames
      // only) does not show it as whole; `fragscope import` reads it back as the stack's end.
      const std::string cut = StackCutFrameName(StackEndOf(in_.summary, stack_id));
      if (!cut.empty()) {
        w_.BeginDict();
        w_.String("name");
        w_.String(cut);
        w_.String("filename");
        w_.String("");
        w_.String("line");
        w_.Uint(0);
        w_.EndDict();
      }
    }
    w_.EndList();
  }

  void Segment(const SegmentLayout& s) {
    if (s.coverage == Coverage::kOpaque) {
      ++stats_.opaque_segments_left_out;
      stats_.opaque_bytes_left_out += s.backing_bytes;
      return;
    }
    // Pieces of the whole segment; each backed range becomes one entry.
    std::vector<Piece> pieces;
    if (s.coverage == Coverage::kExact) {
      for (const AddressRange& r : s.backed) {
        pieces.push_back({r.address, r.size, "active_allocated", s.stack_id});
      }
    } else {
      for (const BlockLayout& b : s.blocks) {
        pieces.push_back({b.address, b.size,
                          b.pending_free ? "active_pending_free" : "active_allocated", b.stack_id});
      }
      for (const AddressRange& r : s.free_ranges) {
        pieces.push_back({r.address, r.size, "inactive", 0});
      }
      std::sort(pieces.begin(), pieces.end(),
                [](const Piece& a, const Piece& b) { return a.address < b.address; });
    }
    // The segment's stream and pool: from its blocks (a sub-allocator keeps a segment for one).
    uint64_t stream = 0, pool = 0;
    if (!s.blocks.empty()) {
      stream = s.blocks.front().stream;
      pool = s.blocks.front().pool;
    }
    for (const AddressRange& r : s.backed) {
      std::vector<const Piece*> inside;
      uint64_t allocated = 0, active = 0;
      for (const Piece& p : pieces) {
        if (p.address < r.address || p.address >= r.address + r.size) continue;
        inside.push_back(&p);
        if (p.state[0] == 'a') active += p.size;
        if (p.state == std::string_view("active_allocated")) allocated += p.size;
      }
      ++stats_.segments;
      stats_.blocks += inside.size();
      w_.BeginDict();
      w_.String("device");
      w_.Int(s.device);
      w_.String("address");
      w_.Uint(r.address);
      w_.String("total_size");
      w_.Uint(r.size);
      w_.String("allocated_size");
      w_.Uint(allocated);
      w_.String("active_size");
      w_.Uint(active);
      w_.String("requested_size");
      w_.Uint(allocated);
      w_.String("stream");
      w_.Uint(stream);
      w_.String("segment_type");
      w_.String(r.size <= kSmallSegmentMax ? "small" : "large");
      w_.String("segment_pool_id");
      w_.BeginPair();
      w_.Uint(0);
      w_.Uint(pool);
      w_.EndPair();
      w_.String("is_expandable");
      w_.Bool(s.vmm_reservation);
      w_.String("frames");
      Frames(s.stack_id);
      w_.String("blocks");
      w_.BeginList();
      for (const Piece* p : inside) {
        w_.BeginDict();
        w_.String("address");
        w_.Uint(p->address);
        w_.String("size");
        w_.Uint(p->size);
        w_.String("requested_size");
        w_.Uint(p->size);
        w_.String("state");
        w_.String(p->state);
        w_.String("frames");
        Frames(p->stack_id);
        w_.EndDict();
      }
      w_.EndList();
      w_.EndDict();
    }
  }

  void DeviceTraces() {
    int max_device = -1;
    for (const auto& [device, segs] : in_.segments) max_device = std::max(max_device, device);
    for (const DeviceSummary& d : in_.summary.devices) max_device = std::max(max_device, d.ordinal);
    std::map<int, std::vector<const OomPostMortem*>> ooms;
    for (const OomPostMortem& o : in_.summary.ooms) {
      if (o.failure.device < 0) continue;
      ooms[o.failure.device].push_back(&o);
      max_device = std::max(max_device, o.failure.device);
    }
    for (const auto& [device, entries] : in_.record.history) {
      if (!entries.empty()) max_device = std::max(max_device, device);
    }
    static const std::vector<HistoryEntry> kNone;
    w_.BeginList();
    for (int device = 0; device <= max_device; ++device) {
      w_.BeginList();
      auto h = in_.record.history.find(device);
      const std::vector<HistoryEntry>& history = h != in_.record.history.end() ? h->second : kNone;
      // The history and the OOMs, merged by seq: the order the program met them.
      std::size_t next_oom = 0;
      const std::vector<const OomPostMortem*>& device_ooms = ooms[device];
      for (const HistoryEntry& e : history) {
        while (next_oom < device_ooms.size() && device_ooms[next_oom]->failure.seq < e.seq) {
          Oom(*device_ooms[next_oom++]);
        }
        Entry(e);
      }
      while (next_oom < device_ooms.size()) Oom(*device_ooms[next_oom++]);
      w_.EndList();
    }
    w_.EndList();
  }

  // One entry of PyTorch's device trace (TraceEntry: action, addr, size, stream, time_us,
  // frames).
  void Entry(const HistoryEntry& e) {
    ++stats_.history_entries;
    w_.BeginDict();
    w_.String("action");
    w_.String(HistoryActionName(e.action));
    w_.String("addr");
    w_.Uint(e.address);
    w_.String("size");
    w_.Uint(e.size);
    w_.String("stream");
    w_.Uint(e.stream);
    w_.String("time_us");
    w_.Uint(e.time_ns / 1000);
    w_.String("frames");
    Frames(e.stack_id);
    w_.EndDict();
  }

  void Oom(const OomPostMortem& o) {
    ++stats_.oom_entries;
    w_.BeginDict();
    w_.String("action");
    w_.String("oom");
    if (o.figures.device_free_bytes.value) {
      // PyTorch's oom entry has no `addr`: the allocator's TraceEntry keeps the device's
      // free bytes in addr_, and the snapshot names them `device_free` (torch.cuda.memory
      // _snapshot's docstring; torch.cuda._memory_viz.trace and MemoryViz read that key).
      w_.String("device_free");
      w_.Uint(*o.figures.device_free_bytes.value);
    }
    w_.String("size");
    w_.Uint(o.failure.requested_bytes);
    w_.String("stream");
    w_.Uint(o.failure.stream);
    w_.String("time_us");
    w_.Uint(o.failure.time_ns / 1000);
    w_.String("frames");
    Frames(o.failure.stack_id);
    w_.EndDict();
  }

  const ExportInput& in_;
  Symbolizer& symbolizer_;
  TorchSnapshotStats& stats_;
  PickleWriter w_;
};

}  // namespace

std::string WriteTorchSnapshot(const ExportInput& input, Symbolizer& symbolizer,
                               TorchSnapshotStats* stats) {
  TorchSnapshotStats local;
  return SnapshotWriter(input, symbolizer, stats != nullptr ? stats : &local).Write();
}

}  // namespace fragscope::exporter
