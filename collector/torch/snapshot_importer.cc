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
 public:
  Converter(std::string_view source, const ImportOptions& options)
      : source_(source), options_(options) {}

  absl::StatusOr<ImportResult> Run(const PickleValue& root) {
    if (root.kind() != Kind::kDict) {
      return Error("<top level>", absl::StrCat("expected a dict (a torch memory snapshot), got ",
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
      if ((*action)->string_value() != "oom") continue;
      ++summary.oom_count;
      absl::StatusOr<uint64_t> size = UintOr(e, "size", 0, epath);
      if (!size.ok()) return size.status();
      absl::StatusOr<uint64_t> stream = UintOr(e, "stream", 0, epath);
      if (!stream.ok()) return stream.status();
      absl::StatusOr<uint64_t> time_us = UintOr(e, "time_us", 0, epath);
      if (!time_us.ok()) return time_us.status();
      // PyTorch stores the device's free bytes in `addr` for an oom entry; some writers name
      // it `device_free`.
      const char* free_key = e.Find("device_free") != nullptr ? "device_free" : "addr";
      const PickleValue* free_v = e.Find(free_key);
      absl::StatusOr<uint64_t> device_free = UintOr(e, free_key, 0, epath);
      if (!device_free.ok()) return device_free.status();
      absl::StatusOr<uint64_t> stack = StackId(e.Find("frames"), epath + ".frames");
      if (!stack.ok()) return stack.status();
      v1::FailedAlloc f;
      f.set_time_ns(*time_us * 1000);
      f.set_api(v1::API_torch_snapshot);
      f.set_result(kCudaErrorMemoryAllocation);
      f.set_stack_id(*stack);
      f.set_size(*size);
      f.set_device(device);
      f.set_stream(*stream);
      f.set_kind(v1::MEMORY_KIND_DEVICE);
      f.set_has_mem_info(free_v != nullptr && !free_v->is_none());
      f.set_device_free_bytes(*device_free);
      f.set_from_sub_allocator(true);
      failures_.push_back(std::move(f));
    }
    return absl::OkStatus();
  }

  // --- output ---------------------------------------------------------------------------
  absl::StatusOr<ImportResult> Assemble() {
    std::vector<v1::Frame>& frames = result_.frames;
    frames.reserve(2 + result_.devices.size() + stacks_.size() + failures_.size());
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
    result_.stack_count = stacks_.size();
    uint64_t seq = 1;
    snapshot_.set_seq(seq++);
    snapshot_.set_reason(v1::Snapshot::REASON_IMPORTED);
    snapshot_.set_complete_history(false);
    *frames.emplace_back().mutable_snapshot() = std::move(snapshot_);
    for (v1::FailedAlloc& f : failures_) {
      f.set_seq(seq++);
      *frames.emplace_back().mutable_failed() = std::move(f);
    }
    // The snapshot is complete as converted: say so, so readers do not report a cut stream.
    v1::End* end = frames.emplace_back().mutable_end();
    end->set_seq(seq);
    end->set_exit_status(-1);
    return std::move(result_);
  }

  std::string source_;
  const ImportOptions& options_;
  ImportResult result_;
  v1::Snapshot snapshot_;
  std::vector<v1::FailedAlloc> failures_;
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
