// Fuzz target: ProcessModel::Apply over sequences of synthetic frames.
//
// Feeding raw protobuf bytes (trace_pipeline_fuzzer) mostly exercises the parser: a mutation
// rarely yields a free of the address an earlier alloc returned. Here the input is a program
// that builds frames field by field, drawing addresses, sizes and handles from those already
// used (plus offsets), from a table of edge values, or raw, so the model sees what a hostile or
// confused agent could send: double frees, frees of unknown pointers, overlapping and wrapping
// segments, maps into nothing, blocks outside any segment, unknown devices and enum values,
// seq numbers going backwards, snapshots that contradict the stream. The model must never
// crash (process_model.h: "Never fails"), its summary must stay coherent, and the reports valid.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/model/process_model.h"
#include "fuzz_util.h"
#include "report_check.h"

namespace {

namespace v1 = fragscope::v1;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

// Reads the input as a stream of little numbers; past the end every read is 0, so any input is
// a complete program.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | U8() << 8); }
  uint32_t U32() { return U16() | static_cast<uint32_t>(U16()) << 16; }
  uint64_t U64() { return U32() | static_cast<uint64_t>(U32()) << 32; }
  bool Bool() { return U8() & 1; }
  std::string String(size_t max_len) {
    size_t n = U8() % (max_len + 1);
    std::string s;
    for (size_t i = 0; i < n && !done(); ++i) s.push_back(static_cast<char>(U8()));
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A small ring of values already used, so later frames can refer back to them.
template <size_t N>
class Recent {
 public:
  void Add(uint64_t v) { values_[next_++ % N] = v; }
  uint64_t Pick(uint8_t i) const { return next_ == 0 ? 0 : values_[i % std::min(next_, N)]; }

 private:
  std::array<uint64_t, N> values_{};
  size_t next_ = 0;
};

class Generator {
 public:
  Generator(Input* in, fragscope::ProcessModel* model) : in_(*in), model_(*model) {}

  void Run() {
    while (!in_.done()) Step();
    fragscope::fuzz::SummarizeAndRender(model_);
  }

 private:
  // --- field values -------------------------------------------------------------------
  uint64_t Address() {
    static constexpr uint64_t kEdges[] = {0,
                                          1,
                                          0x1000,
                                          2 * kMiB,
                                          0x7f0000000000,
                                          uint64_t{1} << 63,
                                          kMax64 - 2 * kMiB + 1,
                                          kMax64 - 0xfff,
                                          kMax64};
    uint64_t a;
    switch (in_.U8() % 8) {
      case 0:
      case 1:
        a = addresses_.Pick(in_.U8());
        break;
      case 2:
        a = addresses_.Pick(in_.U8()) + uint64_t{in_.U16()} * 512;
        break;
      case 3:
        a = addresses_.Pick(in_.U8()) - uint64_t{in_.U16()} * 512;
        break;
      case 4:
        a = kEdges[in_.U8() % std::size(kEdges)];
        break;
      case 5:
      case 6:
        // Clustered in one region, 2 MiB granules: segments meet, overlap and nest.
        a = 0x7f0000000000 + uint64_t{in_.U8()} * 2 * kMiB;
        break;
      default:
        a = in_.U64();
        break;
    }
    addresses_.Add(a);
    return a;
  }
  uint64_t Size() {
    static constexpr uint64_t kEdges[] = {
        0, 1, 512, 2 * kMiB, 20 * kMiB, 1ull << 30, uint64_t{1} << 63, kMax64, kMax64 - 511};
    uint64_t s;
    switch (in_.U8() % 6) {
      case 0:
        s = kEdges[in_.U8() % std::size(kEdges)];
        break;
      case 1:
      case 2:
        s = uint64_t{in_.U16()} * 512;
        break;
      case 3:
        s = sizes_.Pick(in_.U8());
        break;
      case 4:
        s = (in_.U8() % 16 + uint64_t{1}) * 2 * kMiB;
        break;
      default:
        s = in_.U64();
        break;
    }
    sizes_.Add(s);
    return s;
  }
  uint64_t Handle() {
    uint64_t h;
    switch (in_.U8() % 4) {
      case 0:
      case 1:
        h = handles_.Pick(in_.U8());
        break;
      case 2:
        h = in_.U8() % 8;
        break;
      default:
        h = in_.U64();
        break;
    }
    handles_.Add(h);
    return h;
  }
  int32_t Device() {
    switch (in_.U8() % 8) {
      case 0:
        return -1;
      case 1:
        return static_cast<int32_t>(in_.U32());
      case 2: {
        static constexpr int32_t kEdges[] = {std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int32_t>::max(), 1 << 20, -2};
        return kEdges[in_.U8() % std::size(kEdges)];
      }
      case 3:
        return 1;
      default:
        return 0;
    }
  }
  uint64_t Small() { return in_.U8() % 8; }
  uint64_t StackId() { return in_.U8() % 4 == 3 ? in_.U64() : Small(); }
  uint64_t Pool() { return in_.U8() % 4 == 3 ? Handle() : Small() % 3; }
  // Known values mostly, sometimes a value no version of the format defines.
  template <typename Enum>
  Enum EnumValue(int known_count) {
    uint8_t b = in_.U8();
    if (b % 8 == 7) return static_cast<Enum>(static_cast<int32_t>(in_.U32()));
    return static_cast<Enum>(b % known_count);
  }
  v1::Api Api() {
    static constexpr v1::Api kApis[] = {v1::API_cudaMalloc,
                                        v1::API_cudaFree,
                                        v1::API_cudaMallocAsync,
                                        v1::API_cudaFreeAsync,
                                        v1::API_cudaMallocManaged,
                                        v1::API_cuMemAlloc_v2,
                                        v1::API_cuMemFree_v2,
                                        v1::API_cuMemAllocAsync,
                                        v1::API_cuMemCreate,
                                        v1::API_cuMemMap,
                                        v1::API_cuIpcOpenMemHandle,
                                        v1::API_cuLaunchKernel,
                                        v1::API_fragscope_block_alloc,
                                        v1::API_fragscope_alloc_failed,
                                        v1::API_torch_snapshot,
                                        v1::API_UNKNOWN};
    uint8_t b = in_.U8();
    if (b % 16 == 15) return static_cast<v1::Api>(static_cast<int32_t>(in_.U32()));
    return kApis[b % std::size(kApis)];
  }
  v1::MemoryKind Kind() { return EnumValue<v1::MemoryKind>(7); }
  int32_t Result() {
    switch (in_.U8() % 8) {
      case 0:
        return 2;  // out of memory
      case 1:
        return static_cast<int32_t>(in_.U32());
      default:
        return 0;
    }
  }
  uint64_t Seq() {
    switch (in_.U8() % 16) {
      case 0:
        return in_.U64();
      case 1:
        return seq_ > 3 ? seq_ - 3 : 0;  // backwards
      case 2:
        return seq_;  // repeated
      default:
        return ++seq_;
    }
  }
  template <typename Event>
  void Common(Event* e) {
    e->set_seq(Seq());
    e->set_time_ns(e->seq() * 1000);
    e->set_tid(in_.U8());
    e->set_api(Api());
    e->set_result(Result());
    e->set_stack_id(StackId());
  }

  // --- frames -------------------------------------------------------------------------
  void Step() {
    v1::Frame f;
    // Allocation traffic is what the model is about: give it most of the op space.
    switch (in_.U8() % 26) {
      case 0: {
        v1::Hello* h = f.mutable_hello();
        h->set_format_major(in_.U8() % 3);
        h->set_pid(in_.U32());
        h->set_host(in_.String(8));
        h->set_exe(in_.String(12));
        h->add_argv(in_.String(8));
        h->set_backend(EnumValue<v1::Hello::Backend>(5));
        h->set_attached(in_.Bool());
        h->set_stack_depth(in_.U8());
        break;
      }
      case 1: {
        v1::DeviceInfo* d = f.mutable_device();
        d->set_ordinal(Device());
        d->set_uuid(in_.String(20));
        d->set_total_bytes(Size());
        d->set_name(in_.String(8));
        break;
      }
      case 2: {
        int n = in_.U8() % 3 + 1;
        for (int i = 0; i < n; ++i) {
          v1::Module* m = f.mutable_module_map()->add_modules();
          static const char* kPaths[] = {"/usr/lib/libc10_cuda.so", "/opt/rmm/librmm.so",
                                         "/home/rmm/app", "", "libtorch_cuda.so"};
          m->set_path(in_.Bool() ? kPaths[in_.U8() % std::size(kPaths)] : in_.String(16));
          m->set_build_id(in_.String(20));
          m->set_load_address(Address());
          m->set_size(Size());
        }
        break;
      }
      case 3: {
        int n = in_.U8() % 3 + 1;
        for (int i = 0; i < n; ++i) {
          v1::Stack* s = f.mutable_stacks()->add_stacks();
          s->set_id(StackId());
          int pcs = in_.U8() % 5;
          for (int k = 0; k < pcs; ++k) s->add_pcs(Address());
        }
        break;
      }
      case 4:
      case 5:
      case 6:
      case 7: {
        v1::AllocEvent* e = f.mutable_alloc();
        Common(e);
        e->set_address(Address());
        e->set_size(Size());
        e->set_device(Device());
        e->set_stream(Small());
        e->set_pool(Pool());
        e->set_kind(Kind());
        e->set_pitch(in_.U8() % 4 == 0 ? Size() : 0);
        e->set_in_capture(in_.U8() % 8 == 0);
        break;
      }
      case 8:
      case 9:
      case 10: {
        v1::FreeEvent* e = f.mutable_free();
        Common(e);
        e->set_address(Address());
        e->set_size(in_.Bool() ? Size() : 0);
        e->set_device(Device());
        e->set_stream(Small());
        e->set_pool(Pool());
        break;
      }
      case 11:
      case 12: {
        v1::MapEvent* e = f.mutable_map();
        Common(e);
        e->set_op(EnumValue<v1::MapEvent::Op>(5));
        e->set_address(Address());
        e->set_size(Size());
        e->set_offset(in_.Bool() ? 0 : Size());
        e->set_handle(Handle());
        e->set_device(Device());
        e->set_alignment(in_.Bool() ? 0 : Size());
        break;
      }
      case 13:
      case 14: {
        v1::HandleEvent* e = f.mutable_handle();
        Common(e);
        e->set_op(EnumValue<v1::HandleEvent::Op>(6));
        e->set_handle(Handle());
        e->set_size(Size());
        e->set_device(Device());
        e->set_handle_type(in_.U8());
        e->set_address(in_.Bool() ? Address() : 0);
        break;
      }
      case 15: {
        v1::FailedAlloc* e = f.mutable_failed();
        Common(e);
        e->set_size(Size());
        e->set_device(Device());
        e->set_stream(Small());
        e->set_pool(Pool());
        e->set_kind(Kind());
        e->set_has_mem_info(in_.Bool());
        e->set_device_free_bytes(Size());
        e->set_device_total_bytes(Size());
        e->set_from_sub_allocator(in_.Bool());
        break;
      }
      case 16: {
        v1::MemInfo* e = f.mutable_mem_info();
        e->set_seq(Seq());
        e->set_device(Device());
        e->set_free_bytes(Size());
        e->set_total_bytes(Size());
        e->set_pool(in_.Bool() ? Pool() : 0);
        e->set_pool_reserved_bytes(Size());
        e->set_pool_used_bytes(Size());
        break;
      }
      case 17: {
        v1::Mark* e = f.mutable_mark();
        e->set_seq(Seq());
        e->set_label(in_.String(16));
        break;
      }
      case 18: {
        v1::Drops* e = f.mutable_drops();
        e->set_seq(Seq());
        e->set_dropped_events(in_.Bool() ? in_.U64() : in_.U8());
        e->set_total_dropped(in_.Bool() ? in_.U64() : in_.U8());
        e->set_reason(EnumValue<v1::Drops::Reason>(4));
        break;
      }
      case 19:
        Snapshot(f.mutable_snapshot());
        break;
      case 20:
      case 21:
      case 22: {
        v1::BlockEvent* e = f.mutable_block();
        Common(e);
        e->set_op(EnumValue<v1::BlockEvent::Op>(6));  // OP_SITE and OP_SITE_FREED included
        e->set_address(Address());
        e->set_size(Size());
        e->set_device(Device());
        e->set_stream(Small());
        e->set_pool(Pool());
        e->set_allocator(Small());
        break;
      }
      case 23: {
        v1::End* e = f.mutable_end();
        e->set_seq(Seq());
        e->set_events_recorded(in_.U64());
        e->set_total_dropped(in_.U8());
        e->set_exit_status(static_cast<int32_t>(in_.U32()));
        break;
      }
      case 24: {
        v1::SymbolizedStack* s = f.mutable_symbolized_stack();
        s->set_id(StackId());
        int n = in_.U8() % 3;
        for (int i = 0; i < n; ++i) {
          v1::SourceFrame* sf = s->add_frames();
          sf->set_function(in_.String(12));
          sf->set_file(in_.String(12));
          sf->set_line(in_.U32());
        }
        break;
      }
      default:
        // A report in the middle of the stream (the live view does this).
        if (dump_) std::fprintf(stderr, "-- summarize\n");
        fragscope::fuzz::SummarizeAndRender(model_);
        return;
    }
    if (no_wrap_) ClampRanges(&f);
    if (dump_) std::fprintf(stderr, "%s\n", f.ShortDebugString().c_str());
    model_.Apply(f);
  }

  // Shrinks every `size` so that `address + size` stays within 64 bits, in any message that has
  // both fields (events and snapshot entries alike).
  static void ClampRanges(google::protobuf::Message* m) {
    const google::protobuf::Descriptor* d = m->GetDescriptor();
    const google::protobuf::Reflection* r = m->GetReflection();
    const google::protobuf::FieldDescriptor* address = d->FindFieldByName("address");
    const google::protobuf::FieldDescriptor* size = d->FindFieldByName("size");
    if (address != nullptr && size != nullptr &&
        address->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT64 &&
        size->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT64) {
      const uint64_t a = r->GetUInt64(*m, address);
      if (r->GetUInt64(*m, size) > kMax64 - a) r->SetUInt64(m, size, kMax64 - a);
    }
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    r->ListFields(*m, &fields);
    for (const google::protobuf::FieldDescriptor* f : fields) {
      if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(*m, f); ++i) {
          ClampRanges(r->MutableRepeatedMessage(m, f, i));
        }
      } else {
        ClampRanges(r->MutableMessage(m, f));
      }
    }
  }

  void Snapshot(v1::Snapshot* s) {
    s->set_seq(Seq());
    s->set_reason(EnumValue<v1::Snapshot::Reason>(5));
    s->set_complete_history(in_.Bool());
    for (int i = in_.U8() % 4; i > 0; --i) {
      v1::LiveAllocation* a = s->add_allocations();
      a->set_address(Address());
      a->set_size(Size());
      a->set_device(Device());
      a->set_stream(Small());
      a->set_pool(Pool());
      a->set_stack_id(StackId());
      a->set_api(Api());
      a->set_kind(Kind());
    }
    for (int i = in_.U8() % 3; i > 0; --i) {
      v1::LiveReservation* r = s->add_reservations();
      r->set_address(Address());
      r->set_size(Size());
      r->set_device(Device());
      r->set_stack_id(StackId());
    }
    for (int i = in_.U8() % 3; i > 0; --i) {
      v1::LiveHandle* h = s->add_handles();
      h->set_handle(Handle());
      h->set_size(Size());
      h->set_device(Device());
      h->set_imported(in_.U8() % 4 == 0);
      h->set_released(in_.U8() % 4 == 0);
      h->set_stack_id(StackId());
    }
    for (int i = in_.U8() % 3; i > 0; --i) {
      v1::LiveMapping* m = s->add_mappings();
      m->set_address(Address());
      m->set_size(Size());
      m->set_offset(in_.Bool() ? 0 : Size());
      m->set_handle(Handle());
    }
    for (int i = in_.U8() % 5; i > 0; --i) {
      v1::LiveBlock* b = s->add_blocks();
      b->set_address(Address());
      b->set_size(Size());
      b->set_device(Device());
      b->set_stream(Small());
      b->set_pool(Pool());
      b->set_stack_id(StackId());
      b->set_pending_free(in_.U8() % 4 == 0);
      b->set_allocator(Small());
    }
  }

  Input& in_;
  fragscope::ProcessModel& model_;
  // FRAGSCOPE_FUZZ_DUMP=1: print each frame before applying it, to turn a reproducer into the
  // frame sequence a bug report (or a unit test) needs.
  const bool dump_ = std::getenv("FRAGSCOPE_FUZZ_DUMP") != nullptr;
  // FRAGSCOPE_FUZZ_NO_WRAP=1: no range wraps past 2^64, to look for bugs other than a known
  // wrap-around one while it is open. Off by default: wrapping ranges are hostile input too.
  const bool no_wrap_ = std::getenv("FRAGSCOPE_FUZZ_NO_WRAP") != nullptr;
  Recent<16> addresses_;
  Recent<8> sizes_;
  Recent<8> handles_;
  uint64_t seq_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  // The first byte picks the knobs: the defaults, or limits small enough that thinning the
  // timeline, dropping post-mortems and the fragmentation floor are reached by short inputs.
  fragscope::ModelOptions options;
  const uint8_t knobs = in.U8();
  if (knobs & 1) {
    options.timeline_max_points = 1 + knobs % 5;
    options.max_postmortems = knobs % 3;
    options.recent_events = knobs % 4;
    options.top_sites = knobs % 3;
  }
  if (knobs & 2) options.fragmentation_floor_bytes = 0;
  if (knobs & 4) options.context_overhead_bytes = kMax64;
  if (knobs & 8) options.expandable_segments = (knobs & 16) != 0;
  fragscope::ProcessModel model(options);
  Generator(&in, &model).Run();
  return 0;
}
