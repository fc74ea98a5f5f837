// PyTorch snapshot -> fragscope frames. Field names and meanings follow PyTorch's
// CUDACachingAllocator snapshot (see scripts/adapter/README.md).
#include "fragscope/torch/snapshot_importer.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope::torch {
namespace {

using Kind = PickleValue::Kind;

constexpr int32_t kCudaErrorMemoryAllocation = 2;  // cudaErrorMemoryAllocation
constexpr uint64_t kMaxCudaOrdinal = 1u << 20;     // far above any real device count

// The synthetic outermost frame `fragscope export --torch-snapshot` writes for a cut stack
// (StackCutFrameName, fragscope/report/stack_cut.h; this library does not link the reports, and
// tests/export's round trip keeps the two in step): the stack's end, or UNSPECIFIED.
v1::StackEnd CutFrameEnd(std::string_view function) {
  if (function == "[stack cut: depth limit]") return v1::STACK_END_DEPTH_LIMIT;
  if (function == "[stack cut: no unwind info]") return v1::STACK_END_NO_UNWIND_INFO;
  if (function == "[stack cut: unreadable frame]") return v1::STACK_END_UNREADABLE;
  if (function == "[stack cut: unsupported frame]") return v1::STACK_END_UNSUPPORTED;
  return v1::STACK_END_UNSPECIFIED;
}

// Frames of PyTorch's own stack capture and of the interpreter's call machinery, which say
// nothing about the program: PyTorch's memory viewer (torch/cuda/_memory_viz.py, _frame_filter,
// as of PyTorch 2.15) leaves out frames whose function or file contains one of these, and so do
// the sites imported here.
bool IsCaptureMachinery(const v1::SourceFrame& frame) {
  static constexpr std::string_view kFunctions[] = {
      "unwind::unwind",    "CapturedTraceback::gather",
      "gather_with_cpp",   "_start",
      "__libc_start_main", "PyEval_",
      "PyObject_",         "PyFunction_"};
  static constexpr std::string_view kFiles[] = {"core/boxing",
                                                "/Register",
                                                "/Redispatch",
                                                "pythonrun.c",
                                                "Modules/main.c",
                                                "Objects/call.c",
                                                "Objects/methodobject.c",
                                                "pycore_ceval.h",
                                                "ceval.c",
                                                "cpython/abstract.h"};
  for (std::string_view f : kFunctions) {
    if (frame.function().find(f) != std::string::npos) return true;
  }
  for (std::string_view f : kFiles) {
    if (frame.file().find(f) != std::string::npos) return true;
  }
  return false;
}

class Converter {
  // One device_traces entry, as read (the history replay below).
  enum class TraceAction {
    kAlloc,
    kFreeRequested,
    kFreeCompleted,
    kSegmentAlloc,
    kSegmentFree,
    kSegmentMapping,
    kOom
  };
  static const char* ActionName(TraceAction a) {
    switch (a) {
      case TraceAction::kAlloc:
        return "alloc";
      case TraceAction::kFreeRequested:
        return "free_requested";
      case TraceAction::kFreeCompleted:
        return "free_completed";
      case TraceAction::kSegmentAlloc:
        return "segment_alloc";
      case TraceAction::kSegmentFree:
        return "segment_free";
      case TraceAction::kSegmentMapping:
        return "segment_map/unmap";
      case TraceAction::kOom:
        return "oom";
    }
    return "?";
  }
  struct TraceEntry {
    TraceAction action = TraceAction::kOom;
    int32_t device = 0;
    uint64_t address = 0;  // for oom: the device's free bytes (has_device_free)
    uint64_t size = 0;
    uint64_t stream = 0;
    uint64_t time_ns = 0;
    uint64_t stack_id = 0;
    bool has_device_free = false;
    std::string path;  // where in the snapshot, for messages
  };
  struct SegmentState {
    uint64_t size = 0;
    uint64_t stream = 0;
    uint64_t pool = 0;
    uint64_t stack_id = 0;
    bool expandable = false;
  };
  struct BlockState {
    uint64_t size = 0;
    uint64_t stream = 0;
    uint64_t pool = 0;
    uint64_t stack_id = 0;
    bool pending = false;
  };
  struct DeviceState {
    std::map<uint64_t, SegmentState> segments;
    std::map<uint64_t, BlockState> blocks;
    // The segment holding [address, address + size), or null.
    const SegmentState* SegmentOf(uint64_t address, uint64_t size) const {
      auto it = segments.upper_bound(address);
      if (it == segments.begin()) return nullptr;
      --it;
      const uint64_t end = it->first + it->second.size;
      return address < end && size <= end - address ? &it->second : nullptr;
    }
  };

 public:
  Converter(std::string_view source, const ImportOptions& options)
      : source_(source), options_(options) {}

  absl::StatusOr<ImportResult> Run(const PickleValue& root) {
    if (root.kind() == Kind::kList) {
      // torch.cuda.memory_snapshot() returns the segments alone (no device_traces).
      for (size_t i = 0; i < root.items().size(); ++i) {
        if (absl::Status s = Segment(*root.items()[i], i, absl::StrCat("[", i, "]")); !s.ok()) {
          return s;
        }
      }
      return Assemble();
    }
    if (root.kind() != Kind::kDict) {
      return Error("<top level>",
                   absl::StrCat("expected a dict (torch.cuda.memory._snapshot()) or a list of "
                                "segments (torch.cuda.memory_snapshot()), got ",
                                PickleValue::KindName(root.kind())));
    }
    const PickleValue* segments = root.Find("segments");
    if (segments == nullptr) {
      return Error("<top level>",
                   "no 'segments' key: not a torch.cuda.memory._dump_snapshot() file");
    }
    if (absl::Status s = ExpectKind(segments, Kind::kList, "segments"); !s.ok()) return s;
    for (size_t i = 0; i < segments->items().size(); ++i) {
      if (absl::Status s = Segment(*segments->items()[i], i, absl::StrCat("segments[", i, "]"));
          !s.ok()) {
        return s;
      }
    }
    if (const PickleValue* traces = root.Find("device_traces");
        traces != nullptr && !traces->is_none()) {
      if (absl::Status s = ExpectKind(traces, Kind::kList, "device_traces"); !s.ok()) return s;
      if (traces->items().size() > kMaxCudaOrdinal) {
        return Error("device_traces",
                     absl::StrCat("implausible device count ", traces->items().size()));
      }
      for (size_t d = 0; d < traces->items().size(); ++d) {
        if (absl::Status s = DeviceTrace(*traces->items()[d], static_cast<int32_t>(d)); !s.ok()) {
          return s;
        }
      }
    }
    return Assemble();
  }

 private:
  // --- errors and typed access ----------------------------------------------------------
  absl::Status Error(const std::string& path, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", path, ": ", what));
  }
  absl::Status ExpectKind(const PickleValue* v, Kind kind, const std::string& path) const {
    if (v->kind() == kind) return absl::OkStatus();
    return Error(path, absl::StrCat("expected ", PickleValue::KindName(kind), ", got ",
                                    PickleValue::KindName(v->kind())));
  }
  absl::StatusOr<const PickleValue*> Required(const PickleValue& dict, const char* key,
                                              const std::string& path) const {
    const PickleValue* v = dict.Find(key);
    if (v == nullptr) return Error(path, absl::StrCat("missing required key '", key, "'"));
    return v;
  }
  absl::StatusOr<uint64_t> ToUint(const PickleValue* v, const std::string& path) const {
    if (absl::Status s = ExpectKind(v, Kind::kInt, path); !s.ok()) return s;
    if (v->int_value() < 0) {
      return Error(path, absl::StrCat("expected a non-negative int, got ",
                                      static_cast<int64_t>(v->int_value())));
    }
    return absl::Uint128Low64(absl::uint128(v->int_value()));
  }
  // Optional unsigned int: `fallback` when the key is absent or None.
  absl::StatusOr<uint64_t> UintOr(const PickleValue& dict, const char* key, uint64_t fallback,
                                  const std::string& path) const {
    const PickleValue* v = dict.Find(key);
    if (v == nullptr || v->is_none()) return fallback;
    return ToUint(v, absl::StrCat(path, ".", key));
  }
  absl::StatusOr<uint64_t> RequiredUint(const PickleValue& dict, const char* key,
                                        const std::string& path) const {
    absl::StatusOr<const PickleValue*> v = Required(dict, key, path);
    if (!v.ok()) return v.status();
    return ToUint(*v, absl::StrCat(path, ".", key));
  }
  absl::StatusOr<int32_t> Device(const PickleValue& dict, const std::string& path) const {
    absl::StatusOr<uint64_t> d = RequiredUint(dict, "device", path);
    if (!d.ok()) return d.status();
    if (*d > kMaxCudaOrdinal) {
      return Error(absl::StrCat(path, ".device"), absl::StrCat("implausible device ordinal ", *d));
    }
    return static_cast<int32_t>(*d);
  }

  // Every Live* entry of the Snapshot frame goes through here, before it is added.
  absl::Status CountEntries(uint64_t n, const std::string& path) {
    if (n > options_.max_snapshot_entries - std::min(entries_, options_.max_snapshot_entries)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          source_, ": ", path, ": the snapshot lists more than ", options_.max_snapshot_entries,
          " blocks and segments, the import limit (ImportOptions::max_snapshot_entries, chosen "
          "so the Snapshot frame stays under the 64 MiB frame limit); raise it to import this "
          "snapshot"));
    }
    entries_ += n;
    return absl::OkStatus();
  }

  // A segment is memory the allocator got from the driver once: the same range listed twice
  // (the pickle memo makes that one byte per repeat) or two segments sharing bytes cannot
  // both be real, and would make the model count their blocks twice.
  absl::Status CheckSegmentRange(int32_t device, uint64_t address, uint64_t total, size_t index,
                                 const std::string& path) {
    std::map<uint64_t, SeenSegment>& seen = segments_by_device_[device];
    auto next = seen.lower_bound(address);
    if (next != seen.end() && next->first == address) {
      return Error(path, absl::StrFormat("segment address 0x%x repeats segments[%d] on device %d",
                                         address, next->second.index, device));
    }
    const SeenSegment* other = nullptr;
    uint64_t other_address = 0;
    if (next != seen.begin() && std::prev(next)->second.end > address) {
      other_address = std::prev(next)->first;
      other = &std::prev(next)->second;
    } else if (next != seen.end() && next->first < address + total) {
      other_address = next->first;
      other = &next->second;
    }
    if (other != nullptr) {
      return Error(path, absl::StrFormat("segment [0x%x, +%d) overlaps segments[%d] [0x%x, +%d) on "
                                         "device %d",
                                         address, total, other->index, other_address,
                                         other->end - other_address, device));
    }
    seen.emplace(address, SeenSegment{address + total, index});
    return absl::OkStatus();
  }

  DeviceSummary& Summary(int32_t device) {
    DeviceSummary& s = result_.devices[device];
    s.device = device;
    return s;
  }

  // --- stacks ---------------------------------------------------------------------------
  // Interns a list of {name, filename, line} dicts; 0 for no or an empty list.
  absl::StatusOr<uint64_t> StackId(const PickleValue* frames, const std::string& path) {
    if (!options_.include_stacks || frames == nullptr || frames->is_none()) return 0;
    if (!frames->is_sequence()) {
      return Error(path, absl::StrCat("expected a list of frames, got ",
                                      PickleValue::KindName(frames->kind())));
    }
    if (frames->items().empty()) return 0;
    // The memo often shares one frames list among many blocks: look it up by identity first.
    if (auto it = stack_by_value_.find(frames); it != stack_by_value_.end()) return it->second;
    v1::SymbolizedStack stack;
    std::string key;
    for (size_t i = 0; i < frames->items().size(); ++i) {
      const PickleValue* f = frames->items()[i];
      const std::string fpath = absl::StrCat(path, "[", i, "]");
      if (absl::Status s = ExpectKind(f, Kind::kDict, fpath); !s.ok()) return s;
      v1::SourceFrame frame;
      if (const PickleValue* name = f->Find("name"); name != nullptr && !name->is_none()) {
        if (absl::Status s = ExpectKind(name, Kind::kString, fpath + ".name"); !s.ok()) return s;
        frame.set_function(name->string_value());
      }
      if (const PickleValue* file = f->Find("filename"); file != nullptr && !file->is_none()) {
        if (absl::Status s = ExpectKind(file, Kind::kString, fpath + ".filename"); !s.ok()) {
          return s;
        }
        frame.set_file(file->string_value());
      }
      absl::StatusOr<uint64_t> line = UintOr(*f, "line", 0, fpath);
      if (!line.ok()) return line.status();
      frame.set_line(static_cast<uint32_t>(std::min<uint64_t>(*line, UINT32_MAX)));
      if (IsCaptureMachinery(frame)) continue;
      // fragscope's own export marks a cut stack by a last synthetic frame: its end again.
      if (i + 1 == frames->items().size() && frame.file().empty() && frame.line() == 0) {
        if (const v1::StackEnd end = CutFrameEnd(frame.function());
            end != v1::STACK_END_UNSPECIFIED) {
          stack.set_end(end);
          absl::StrAppend(&key, "\x1d", static_cast<int>(end));
          continue;
        }
      }
      absl::StrAppend(&key, frame.function(), "\x1f", frame.file(), "\x1f", frame.line(), "\x1e");
      *stack.add_frames() = std::move(frame);
    }
    if (stack.frames_size() == 0) {
      stack_by_value_.emplace(frames, 0);
      return 0;
    }
    uint64_t id;
    if (auto it = stack_by_content_.find(key); it != stack_by_content_.end()) {
      id = it->second;
    } else {
      id = stacks_.size() + 1;
      stack.set_id(id);
      stacks_.push_back(std::move(stack));
      stack_by_content_.emplace(std::move(key), id);
    }
    stack_by_value_.emplace(frames, id);
    return id;
  }

  // Pool ids: (0, 0) is PyTorch's default pool -> 0; others numbered from 1.
  absl::StatusOr<uint64_t> PoolId(const PickleValue& segment, const std::string& path) {
    const PickleValue* v = segment.Find("segment_pool_id");
    if (v == nullptr || v->is_none()) return 0;
    const std::string ppath = path + ".segment_pool_id";
    if (!v->is_sequence() || v->items().size() != 2) {
      return Error(ppath, "expected a pair of ints");
    }
    absl::StatusOr<uint64_t> a = ToUint(v->items()[0], ppath + "[0]");
    if (!a.ok()) return a.status();
    absl::StatusOr<uint64_t> b = ToUint(v->items()[1], ppath + "[1]");
    if (!b.ok()) return b.status();
    if (*a == 0 && *b == 0) return 0;
    auto [it, inserted] = pool_ids_.try_emplace(std::make_pair(*a, *b), pool_ids_.size() + 1);
    return it->second;
  }

  // --- segments and blocks --------------------------------------------------------------
  absl::Status Segment(const PickleValue& seg, size_t index, const std::string& path) {
    if (absl::Status s = ExpectKind(&seg, Kind::kDict, path); !s.ok()) return s;
    absl::StatusOr<int32_t> device = Device(seg, path);
    if (!device.ok()) return device.status();
    absl::StatusOr<uint64_t> address = RequiredUint(seg, "address", path);
    if (!address.ok()) return address.status();
    absl::StatusOr<uint64_t> total = RequiredUint(seg, "total_size", path);
    if (!total.ok()) return total.status();
    if (*address + *total < *address) {
      return Error(path, "address + total_size overflows 64 bits");
    }
    if (absl::Status s = CheckSegmentRange(*device, *address, *total, index, path); !s.ok()) {
      return s;
    }
    absl::StatusOr<uint64_t> stream = UintOr(seg, "stream", 0, path);
    if (!stream.ok()) return stream.status();
    absl::StatusOr<uint64_t> pool = PoolId(seg, path);
    if (!pool.ok()) return pool.status();
    bool expandable = false;
    if (const PickleValue* e = seg.Find("is_expandable"); e != nullptr && !e->is_none()) {
      if (absl::Status s = ExpectKind(e, Kind::kBool, path + ".is_expandable"); !s.ok()) return s;
      expandable = e->bool_value();
    }
    absl::StatusOr<uint64_t> seg_stack = StackId(seg.Find("frames"), path + ".frames");
    if (!seg_stack.ok()) return seg_stack.status();

    if (absl::Status s = CountEntries(expandable ? 3 : 1, path); !s.ok()) return s;
    state_[*device].segments[*address] = {*total, *stream, *pool, *seg_stack, expandable};
    DeviceSummary& summary = Summary(*device);
    ++summary.segment_count;
    summary.reserved_bytes += *total;
    if (expandable) {
      ++summary.expandable_segment_count;
      const uint64_t handle = ++handle_count_;
      v1::LiveReservation* r = snapshot_.add_reservations();
      r->set_address(*address);
      r->set_size(*total);
      r->set_device(*device);
      r->set_stack_id(*seg_stack);
      r->set_sub_allocated(true);  // PyTorch lists every block; inactive ones are free space
      v1::LiveHandle* h = snapshot_.add_handles();
      h->set_handle(handle);
      h->set_size(*total);
      h->set_device(*device);
      h->set_stack_id(*seg_stack);
      v1::LiveMapping* m = snapshot_.add_mappings();
      m->set_address(*address);
      m->set_size(*total);
      m->set_offset(0);
      m->set_handle(handle);
    } else {
      v1::LiveAllocation* a = snapshot_.add_allocations();
      a->set_address(*address);
      a->set_size(*total);
      a->set_device(*device);
      a->set_stream(*stream);
      a->set_pool(0);  // a cudaMalloc segment, not a CUDA memory pool
      a->set_stack_id(*seg_stack);
      a->set_api(v1::API_torch_snapshot);
      a->set_kind(v1::MEMORY_KIND_DEVICE);
      a->set_sub_allocated(true);  // PyTorch lists every block; inactive ones are free space
    }

    const PickleValue* blocks = seg.Find("blocks");
    if (blocks == nullptr || blocks->is_none()) return absl::OkStatus();
    const std::string bpath = path + ".blocks";
    if (absl::Status s = ExpectKind(blocks, Kind::kList, bpath); !s.ok()) return s;

    const uint64_t seg_end = *address + *total;
    uint64_t cursor = *address;          // where the next block starts when it has no address
    uint64_t run_end = 0, run_size = 0;  // current run of adjacent inactive blocks
    uint64_t block_bytes = 0;
    for (size_t j = 0; j < blocks->items().size(); ++j) {
      const PickleValue& block = *blocks->items()[j];
      const std::string path_j = absl::StrCat(bpath, "[", j, "]");
      if (absl::Status s = ExpectKind(&block, Kind::kDict, path_j); !s.ok()) return s;
      absl::StatusOr<uint64_t> size = RequiredUint(block, "size", path_j);
      if (!size.ok()) return size.status();
      if (*size == 0) {
        // PyTorch never makes an empty block; one would not advance the legacy address walk,
        // so any number of them could sit at one address.
        return Error(path_j + ".size", "a block of 0 bytes is malformed");
      }
      uint64_t block_address = cursor;
      if (const PickleValue* a = block.Find("address"); a != nullptr && !a->is_none()) {
        absl::StatusOr<uint64_t> given = ToUint(a, path_j + ".address");
        if (!given.ok()) return given.status();
        block_address = *given;
      } else {
        result_.format = SnapshotFormat::kLegacyHistory;
      }
      if (block_address < *address || block_address > seg_end || *size > seg_end - block_address) {
        return Error(path_j, absl::StrFormat("block [0x%x, +%d) lies outside its segment "
                                             "[0x%x, +%d)",
                                             block_address, *size, *address, *total));
      }
      if (block_address < cursor) {
        return Error(path_j, absl::StrFormat("block at 0x%x overlaps the previous block, which "
                                             "ends at 0x%x",
                                             block_address, cursor));
      }
      const PickleValue* history = block.Find("history");
      const PickleValue* latest = nullptr;  // newest history entry: the current allocation
      if (history != nullptr && !history->is_none()) {
        if (absl::Status s = ExpectKind(history, Kind::kList, path_j + ".history"); !s.ok()) {
          return s;
        }
        if (!history->items().empty()) {
          latest = history->items().back();
          const std::string hpath =
              absl::StrCat(path_j, ".history[", history->items().size() - 1, "]");
          if (absl::Status s = ExpectKind(latest, Kind::kDict, hpath); !s.ok()) return s;
          absl::StatusOr<uint64_t> addr = UintOr(*latest, "addr", block_address, hpath);
          if (!addr.ok()) return addr.status();
          if (*addr != block_address) {
            result_.warnings.push_back(absl::StrFormat(
                "%s: %s.addr is 0x%x but the block starts at 0x%x; using the block start", source_,
                hpath, *addr, block_address));
          }
        }
      }
      cursor = block_address + *size;
      block_bytes += *size;

      absl::StatusOr<const PickleValue*> state_v = Required(block, "state", path_j);
      if (!state_v.ok()) return state_v.status();
      if (absl::Status s = ExpectKind(*state_v, Kind::kString, path_j + ".state"); !s.ok()) {
        return s;
      }
      const std::string& state = (*state_v)->string_value();
      if (state == "inactive") {
        summary.inactive_bytes += *size;
        ++summary.inactive_block_count;
        if (run_size > 0 && run_end == block_address) {
          run_size += *size;
        } else {
          run_size = *size;
        }
        run_end = block_address + *size;
        summary.largest_inactive_range = std::max(summary.largest_inactive_range, run_size);
        continue;
      }
      run_size = 0;
      bool pending = false;
      if (state == "active_pending_free" || state == "active_awaiting_free") {
        pending = true;
        summary.pending_free_bytes += *size;
      } else {
        if (state != "active_allocated") {
          // Not free as far as we know: count it as allocated rather than claim it is free.
          result_.warnings.push_back(absl::StrFormat(
              "%s: %s.state '%s' is unknown; counted as allocated", source_, path_j, state));
        }
        summary.allocated_bytes += *size;
      }
      ++summary.active_block_count;
      const PickleValue* frames = block.Find("frames");
      std::string fpath = path_j + ".frames";
      if ((frames == nullptr || frames->is_none()) && latest != nullptr) {
        frames = latest->Find("frames");
        fpath = absl::StrCat(path_j, ".history[", history->items().size() - 1, "].frames");
      }
      absl::StatusOr<uint64_t> stack = StackId(frames, fpath);
      if (!stack.ok()) return stack.status();
      if (absl::Status s = CountEntries(1, path_j); !s.ok()) return s;
      state_[*device].blocks[block_address] = {*size, *stream, *pool, *stack, pending};
      v1::LiveBlock* b = snapshot_.add_blocks();
      b->set_address(block_address);
      b->set_size(*size);
      b->set_device(*device);
      b->set_stream(*stream);
      b->set_pool(*pool);
      b->set_stack_id(*stack);
      b->set_pending_free(pending);
    }
    if (!blocks->items().empty() && block_bytes != *total) {
      result_.warnings.push_back(
          absl::StrFormat("%s: %s: blocks add up to %d bytes but total_size is %d", source_, path,
                          block_bytes, *total));
    }
    return absl::OkStatus();
  }

  // --- trace ----------------------------------------------------------------------------
  absl::Status DeviceTrace(const PickleValue& entries, int32_t device) {
    const std::string path = absl::StrCat("device_traces[", device, "]");
    if (entries.is_none()) return absl::OkStatus();
    if (absl::Status s = ExpectKind(&entries, Kind::kList, path); !s.ok()) return s;
    DeviceSummary& summary = Summary(device);
    for (size_t i = 0; i < entries.items().size(); ++i) {
      const PickleValue& e = *entries.items()[i];
      const std::string epath = absl::StrCat(path, "[", i, "]");
      if (absl::Status s = ExpectKind(&e, Kind::kDict, epath); !s.ok()) return s;
      ++summary.trace_entry_count;
      absl::StatusOr<const PickleValue*> action = Required(e, "action", epath);
      if (!action.ok()) return action.status();
      if (absl::Status s = ExpectKind(*action, Kind::kString, epath + ".action"); !s.ok()) {
        return s;
      }
      const std::string& name = (*action)->string_value();
      TraceEntry t;
      if (name == "alloc") {
        t.action = TraceAction::kAlloc;
      } else if (name == "free_requested") {
        t.action = TraceAction::kFreeRequested;
      } else if (name == "free_completed") {
        t.action = TraceAction::kFreeCompleted;
      } else if (name == "segment_alloc") {
        t.action = TraceAction::kSegmentAlloc;
      } else if (name == "segment_free") {
        t.action = TraceAction::kSegmentFree;
      } else if (name == "segment_map" || name == "segment_unmap") {
        t.action = TraceAction::kSegmentMapping;
      } else if (name == "oom") {
        t.action = TraceAction::kOom;
      } else {
        continue;  // snapshot, annotate, user metadata: no memory changes
      }
      absl::StatusOr<uint64_t> size = UintOr(e, "size", 0, epath);
      if (!size.ok()) return size.status();
      absl::StatusOr<uint64_t> stream = UintOr(e, "stream", 0, epath);
      if (!stream.ok()) return stream.status();
      absl::StatusOr<uint64_t> time_us = UintOr(e, "time_us", 0, epath);
      if (!time_us.ok()) return time_us.status();
      absl::StatusOr<uint64_t> stack = StackId(e.Find("frames"), epath + ".frames");
      if (!stack.ok()) return stack.status();
      t.device = device;
      t.size = *size;
      t.stream = *stream;
      t.time_ns = *time_us * 1000;
      t.stack_id = *stack;
      t.path = epath;
      if (t.action == TraceAction::kOom) {
        ++summary.oom_count;
        // PyTorch stores the device's free bytes in `addr` for an oom entry; some writers name
        // it `device_free`.
        const char* free_key = e.Find("device_free") != nullptr ? "device_free" : "addr";
        const PickleValue* free_v = e.Find(free_key);
        absl::StatusOr<uint64_t> device_free = UintOr(e, free_key, 0, epath);
        if (!device_free.ok()) return device_free.status();
        t.has_device_free = free_v != nullptr && !free_v->is_none();
        t.address = *device_free;
      } else {
        absl::StatusOr<uint64_t> addr = RequiredUint(e, "addr", epath);
        if (!addr.ok()) return addr.status();
        t.address = *addr;
        ++history_entries_;
      }
      trace_.push_back(std::move(t));
    }
    return absl::OkStatus();
  }

  // --- output ---------------------------------------------------------------------------
  absl::StatusOr<ImportResult> Assemble() {
    std::vector<v1::Frame>& frames = result_.frames;
    frames.reserve(3 + result_.devices.size() + stacks_.size() + trace_.size());
    v1::Hello* hello = frames.emplace_back().mutable_hello();
    hello->set_format_major(v1::FORMAT_MAJOR);
    hello->set_format_minor(0);
    hello->set_backend(v1::Hello::BACKEND_IMPORTED);
    hello->set_agent_version("fragscope torch snapshot import");
    for (const auto& [ordinal, summary] : result_.devices) {
      frames.emplace_back().mutable_device()->set_ordinal(ordinal);
    }
    for (v1::SymbolizedStack& stack : stacks_) {
      *frames.emplace_back().mutable_symbolized_stack() = std::move(stack);
    }
    // Every device's entries in time order (each list is; ties keep device order).
    std::stable_sort(trace_.begin(), trace_.end(), [](const TraceEntry& a, const TraceEntry& b) {
      return a.time_ns < b.time_ns;
    });
    const bool replay = history_entries_ > 0 && RewindToHistoryStart();
    result_.history_replayed = replay;
    if (replay) {
      // The stack a segment_alloc is made with: the segment's own frames under one naming
      // PyTorch's allocator, so the model keeps the segment's inside unknown (opaque) until the
      // block it was made for arrives, as it does for a live PyTorch process, rather than count
      // it allocated whole for that moment.
      v1::SymbolizedStack allocator;
      allocator.set_id(stacks_.size() + 1);
      v1::SourceFrame* f = allocator.add_frames();
      f->set_function("c10::cuda::CUDACachingAllocator (segment_alloc)");
      f->set_file("libc10_cuda.so");
      allocator_stack_ = allocator.id();
      *frames.emplace_back().mutable_symbolized_stack() = std::move(allocator);
    }
    result_.stack_count = stacks_.size() + (replay ? 1 : 0);
    uint64_t seq = 1;
    snapshot_.set_seq(seq++);
    snapshot_.set_reason(v1::Snapshot::REASON_IMPORTED);
    snapshot_.set_complete_history(false);
    if (!trace_.empty() && replay) snapshot_.set_time_ns(trace_.front().time_ns);
    *frames.emplace_back().mutable_snapshot() = std::move(snapshot_);
    if (replay) {
      for (const TraceEntry& t : trace_) EmitForward(t, seq++, frames);
    } else {
      for (const TraceEntry& t : trace_) {
        if (t.action != TraceAction::kOom) continue;
        v1::FailedAlloc* f = frames.emplace_back().mutable_failed();
        FailureOf(t, f);
        f->set_seq(seq++);
      }
    }
    // The snapshot is complete as converted: say so, so readers do not report a cut stream.
    v1::End* end = frames.emplace_back().mutable_end();
    end->set_seq(seq);
    end->set_exit_status(-1);
    return std::move(result_);
  }

  // --- history replay ---------------------------------------------------------------------
  // The snapshot is the state after its device_traces; replayed, the traces give the peaks and
  // the timeline. Walking them backwards from the snapshot's state gives the state before the
  // first entry (PyTorch keeps the newest max_entries, so that is rarely the program's start);
  // that state is the Snapshot frame, and the entries follow as events. An entry that does
  // not fit the state (a ring that lost entries in between, a hand-made file) stops it: the
  // import then holds the snapshot's moment only, and a warning says which entry.
  bool RewindToHistoryStart() {
    std::map<int32_t, DeviceState> state = state_;
    for (auto it = trace_.rbegin(); it != trace_.rend(); ++it) {
      const TraceEntry& t = *it;
      if (t.action == TraceAction::kOom) continue;
      DeviceState& d = state[t.device];
      std::string problem;
      switch (t.action) {
        case TraceAction::kAlloc: {
          auto b = d.blocks.find(t.address);
          if (b == d.blocks.end() || b->second.pending) {
            problem = "allocates a block that is not live after it";
          } else {
            d.blocks.erase(b);
          }
          break;
        }
        case TraceAction::kFreeRequested: {
          auto b = d.blocks.find(t.address);
          if (b == d.blocks.end() || !b->second.pending) {
            problem = "frees a block that is not pending after it";
          } else {
            b->second.pending = false;
          }
          break;
        }
        case TraceAction::kFreeCompleted: {
          const SegmentState* seg = d.SegmentOf(t.address, t.size);
          if (d.blocks.count(t.address) != 0 || seg == nullptr) {
            problem = "completes a free of a block that is live after it or lies in no segment";
          } else {
            d.blocks[t.address] = {t.size, t.stream, seg->pool, t.stack_id, true};
          }
          break;
        }
        case TraceAction::kSegmentAlloc: {
          auto seg = d.segments.find(t.address);
          auto first_block = d.blocks.lower_bound(t.address);
          if (seg == d.segments.end() || seg->second.expandable ||
              (first_block != d.blocks.end() &&
               first_block->first < t.address + seg->second.size)) {
            problem = "allocates a segment that is not held (or holds blocks) after it";
          } else {
            d.segments.erase(seg);
          }
          break;
        }
        case TraceAction::kSegmentFree: {
          if (t.size == 0 || d.SegmentOf(t.address, 1) != nullptr ||
              d.SegmentOf(t.address + t.size - 1, 1) != nullptr) {
            problem = "frees a segment that is still held after it";
          } else {
            d.segments[t.address] = {t.size, t.stream, 0, t.stack_id, false};
          }
          break;
        }
        case TraceAction::kSegmentMapping:
          problem =
              "maps or unmaps part of an expandable segment, which the import does not replay";
          break;
        case TraceAction::kOom:
          break;
      }
      if (!problem.empty()) {
        result_.warnings.push_back(absl::StrFormat(
            "%s: %s (%s at 0x%x) %s; the history is not replayed: peaks are those of the "
            "snapshot's moment",
            source_, t.path, ActionName(t.action), t.address, problem));
        return false;
      }
    }
    // The Snapshot frame holds the state before the first entry; expandable segments (their
    // reservations, handles and mappings) are as the snapshot gave them, since no entry moved
    // them.
    snapshot_.clear_allocations();
    snapshot_.clear_blocks();
    for (const auto& [device, d] : state) {
      for (const auto& [address, seg] : d.segments) {
        if (seg.expandable) continue;
        v1::LiveAllocation* a = snapshot_.add_allocations();
        a->set_address(address);
        a->set_size(seg.size);
        a->set_device(device);
        a->set_stream(seg.stream);
        a->set_stack_id(seg.stack_id);
        a->set_api(v1::API_torch_snapshot);
        a->set_kind(v1::MEMORY_KIND_DEVICE);
        a->set_sub_allocated(true);
      }
      for (const auto& [address, b] : d.blocks) {
        v1::LiveBlock* lb = snapshot_.add_blocks();
        lb->set_address(address);
        lb->set_size(b.size);
        lb->set_device(device);
        lb->set_stream(b.stream);
        lb->set_pool(b.pool);
        lb->set_stack_id(b.stack_id);
        lb->set_pending_free(b.pending);
      }
    }
    forward_ = std::move(state);
    return true;
  }

  void FailureOf(const TraceEntry& t, v1::FailedAlloc* f) const {
    f->set_time_ns(t.time_ns);
    f->set_api(v1::API_torch_snapshot);
    f->set_result(kCudaErrorMemoryAllocation);
    f->set_stack_id(t.stack_id);
    f->set_size(t.size);
    f->set_device(t.device);
    f->set_stream(t.stream);
    f->set_kind(v1::MEMORY_KIND_DEVICE);
    f->set_has_mem_info(t.has_device_free);
    f->set_device_free_bytes(t.has_device_free ? t.address : 0);
    f->set_from_sub_allocator(true);
  }

  // One entry as the event the live agent would have sent, tracking the state forward for the
  // blocks' pools.
  void EmitForward(const TraceEntry& t, uint64_t seq, std::vector<v1::Frame>& frames) {
    DeviceState& d = forward_[t.device];
    switch (t.action) {
      case TraceAction::kAlloc:
      case TraceAction::kFreeRequested:
      case TraceAction::kFreeCompleted: {
        v1::BlockEvent* b = frames.emplace_back().mutable_block();
        b->set_seq(seq);
        b->set_time_ns(t.time_ns);
        b->set_api(v1::API_torch_snapshot);
        b->set_stack_id(t.stack_id);
        b->set_op(t.action == TraceAction::kAlloc           ? v1::BlockEvent::OP_ALLOC
                  : t.action == TraceAction::kFreeRequested ? v1::BlockEvent::OP_FREE_PENDING
                                                            : v1::BlockEvent::OP_FREE);
        b->set_address(t.address);
        b->set_size(t.size);
        b->set_device(t.device);
        b->set_stream(t.stream);
        const SegmentState* seg = d.SegmentOf(t.address, 1);
        b->set_pool(seg != nullptr ? seg->pool : 0);
        return;
      }
      case TraceAction::kSegmentAlloc: {
        const SegmentState seg{t.size, t.stream, 0, t.stack_id, false};
        d.segments[t.address] = seg;
        v1::AllocEvent* a = frames.emplace_back().mutable_alloc();
        a->set_seq(seq);
        a->set_time_ns(t.time_ns);
        a->set_api(v1::API_torch_snapshot);
        a->set_stack_id(allocator_stack_);
        a->set_address(t.address);
        a->set_size(t.size);
        a->set_device(t.device);
        a->set_stream(t.stream);
        a->set_kind(v1::MEMORY_KIND_DEVICE);
        return;
      }
      case TraceAction::kSegmentFree: {
        d.segments.erase(t.address);
        v1::FreeEvent* f = frames.emplace_back().mutable_free();
        f->set_seq(seq);
        f->set_time_ns(t.time_ns);
        f->set_api(v1::API_torch_snapshot);
        f->set_stack_id(t.stack_id);
        f->set_address(t.address);
        f->set_size(t.size);
        f->set_device(t.device);
        f->set_stream(t.stream);
        return;
      }
      case TraceAction::kOom: {
        v1::FailedAlloc* f = frames.emplace_back().mutable_failed();
        FailureOf(t, f);
        f->set_seq(seq);
        return;
      }
      case TraceAction::kSegmentMapping:
        return;  // never replayed (RewindToHistoryStart refuses it)
    }
  }

  std::string source_;
  const ImportOptions& options_;
  ImportResult result_;
  v1::Snapshot snapshot_;
  std::vector<TraceEntry> trace_;
  uint64_t history_entries_ = 0;            // entries of trace_ other than oom
  std::map<int32_t, DeviceState> state_;    // the snapshot's state, by device
  std::map<int32_t, DeviceState> forward_;  // the state while the history is emitted
  uint64_t allocator_stack_ = 0;
  std::vector<v1::SymbolizedStack> stacks_;
  absl::flat_hash_map<const PickleValue*, uint64_t> stack_by_value_;
  absl::flat_hash_map<std::string, uint64_t> stack_by_content_;
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, uint64_t> pool_ids_;
  uint64_t handle_count_ = 0;
  uint64_t entries_ = 0;  // Live* entries in snapshot_
  struct SeenSegment {
    uint64_t end = 0;
    size_t index = 0;  // in `segments`, for messages
  };
  std::map<int32_t, std::map<uint64_t, SeenSegment>> segments_by_device_;
};

}  // namespace

absl::StatusOr<ImportResult> ConvertTorchSnapshot(const PickleValue& root,
                                                  std::string_view source_name,
                                                  const ImportOptions& options) {
  return Converter(source_name, options).Run(root);
}

absl::StatusOr<ImportResult> ImportTorchSnapshotBytes(std::string_view bytes,
                                                      std::string_view source_name,
                                                      const ImportOptions& options) {
  absl::StatusOr<PickleDocument> doc =
      PickleReader(options.pickle_limits).Parse(bytes, source_name);
  if (!doc.ok()) return doc.status();
  return ConvertTorchSnapshot(doc->root(), source_name, options);
}

absl::StatusOr<ImportResult> ImportTorchSnapshotFileWithSummary(const std::string& path,
                                                                const ImportOptions& options) {
  absl::StatusOr<PickleDocument> doc = PickleReader(options.pickle_limits).ParseFile(path);
  if (!doc.ok()) return doc.status();
  return ConvertTorchSnapshot(doc->root(), path, options);
}

absl::StatusOr<std::vector<v1::Frame>> ImportTorchSnapshotFile(const std::string& path,
                                                               const ImportOptions& options) {
  absl::StatusOr<ImportResult> result = ImportTorchSnapshotFileWithSummary(path, options);
  if (!result.ok()) return result.status();
  return std::move(result->frames);
}

}  // namespace fragscope::torch
