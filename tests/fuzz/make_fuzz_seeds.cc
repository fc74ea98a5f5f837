// Writes the seed traces of the trace fuzz targets with the real FrameWriter, one small stream
// per feature of the format (so the fuzzer starts from inputs that reach deep into the model),
// plus a few deterministic byte programs for model_frames_fuzzer.
//
// Usage: make_fuzz_seeds <repo>/tests/fuzz/corpus
// Run by hand when the format gains a frame type; the output is committed. Not part of CI.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/trace/frame_writer.h"
#include "fragscope/trace/trace_format.h"

namespace {

namespace v1 = fragscope::v1;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = 0x7f0000000000;

class Trace {
 public:
  std::vector<v1::Frame> frames;

  v1::Frame& Add() { return frames.emplace_back(); }
  void Hello(bool attached = false) {
    v1::Hello* h = Add().mutable_hello();
    h->set_format_major(1);
    h->set_pid(4242);
    h->set_host("node1");
    h->set_exe("/usr/bin/python3");
    h->add_argv("train.py");
    h->set_backend(v1::Hello::BACKEND_PRELOAD);
    h->set_attached(attached);
    h->set_stack_depth(16);
  }
  void Device(int ordinal, uint64_t total) {
    v1::DeviceInfo* d = Add().mutable_device();
    d->set_ordinal(ordinal);
    d->set_uuid(std::string(16, '\x42'));
    d->set_total_bytes(total);
    d->set_name("Seed GPU");
  }
  void Modules() {
    v1::ModuleMap* m = Add().mutable_module_map();
    v1::Module* a = m->add_modules();
    a->set_path("/usr/lib/libc10_cuda.so");
    a->set_build_id("\x01\x02\x03\x04");
    a->set_load_address(0x7e0000000000);
    a->set_size(0x100000);
    v1::Module* b = m->add_modules();
    b->set_path("/usr/bin/python3");
    b->set_load_address(0x400000);
    b->set_size(0x200000);
    v1::StackTable* t = Add().mutable_stacks();
    v1::Stack* s1 = t->add_stacks();
    s1->set_id(1);
    s1->add_pcs(0x7e0000001234);
    s1->add_pcs(0x401000);
    v1::Stack* s2 = t->add_stacks();
    s2->set_id(2);
    s2->add_pcs(0x402000);
  }
  void Alloc(uint64_t address, uint64_t size, uint64_t stack = 2,
             v1::MemoryKind kind = v1::MEMORY_KIND_DEVICE, v1::Api api = v1::API_cudaMalloc,
             uint64_t pool = 0) {
    v1::AllocEvent* e = Add().mutable_alloc();
    Stamp(e);
    e->set_api(api);
    e->set_address(address);
    e->set_size(size);
    e->set_device(0);
    e->set_kind(kind);
    e->set_pool(pool);
    e->set_stack_id(stack);
  }
  void Free(uint64_t address, v1::Api api = v1::API_cudaFree, uint64_t pool = 0) {
    v1::FreeEvent* e = Add().mutable_free();
    Stamp(e);
    e->set_api(api);
    e->set_address(address);
    e->set_device(0);
    e->set_pool(pool);
  }
  void Block(v1::BlockEvent::Op op, uint64_t address, uint64_t size, uint64_t stream = 0) {
    v1::BlockEvent* e = Add().mutable_block();
    Stamp(e);
    e->set_api(op == v1::BlockEvent::OP_ALLOC ? v1::API_fragscope_block_alloc
                                              : v1::API_fragscope_block_free);
    e->set_op(op);
    e->set_address(address);
    e->set_size(size);
    e->set_device(0);
    e->set_stream(stream);
    e->set_allocator(1);
  }
  void Map(v1::MapEvent::Op op, uint64_t address, uint64_t size, uint64_t handle = 0) {
    v1::MapEvent* e = Add().mutable_map();
    Stamp(e);
    e->set_api(op == v1::MapEvent::OP_RESERVE      ? v1::API_cuMemAddressReserve
               : op == v1::MapEvent::OP_FREE_RANGE ? v1::API_cuMemAddressFree
               : op == v1::MapEvent::OP_MAP        ? v1::API_cuMemMap
                                                   : v1::API_cuMemUnmap);
    e->set_op(op);
    e->set_address(address);
    e->set_size(size);
    e->set_handle(handle);
    e->set_device(0);
  }
  void Handle(v1::HandleEvent::Op op, uint64_t handle, uint64_t size) {
    v1::HandleEvent* e = Add().mutable_handle();
    Stamp(e);
    e->set_api(op == v1::HandleEvent::OP_CREATE ? v1::API_cuMemCreate : v1::API_cuMemRelease);
    e->set_op(op);
    e->set_handle(handle);
    e->set_size(size);
    e->set_device(0);
  }
  void Failed(uint64_t size, bool sub_allocator, uint64_t free_bytes, uint64_t total) {
    v1::FailedAlloc* e = Add().mutable_failed();
    Stamp(e);
    e->set_api(sub_allocator ? v1::API_fragscope_alloc_failed : v1::API_cudaMalloc);
    e->set_result(2);
    e->set_stack_id(1);
    e->set_size(size);
    e->set_device(0);
    e->set_kind(v1::MEMORY_KIND_DEVICE);
    e->set_has_mem_info(true);
    e->set_device_free_bytes(free_bytes);
    e->set_device_total_bytes(total);
    e->set_from_sub_allocator(sub_allocator);
  }
  void MemInfo(uint64_t free_bytes, uint64_t total, uint64_t pool = 0, uint64_t reserved = 0,
               uint64_t used = 0) {
    v1::MemInfo* e = Add().mutable_mem_info();
    e->set_seq(++seq_);
    e->set_time_ns(seq_ * 1000);
    e->set_device(0);
    e->set_free_bytes(free_bytes);
    e->set_total_bytes(total);
    e->set_pool(pool);
    e->set_pool_reserved_bytes(reserved);
    e->set_pool_used_bytes(used);
  }
  void Mark(const std::string& label, bool blocks_synced = false) {
    v1::Mark* m = Add().mutable_mark();
    m->set_seq(++seq_);
    m->set_label(label);
    m->set_blocks_synced(blocks_synced);
  }
  void Drops(uint64_t n) {
    v1::Drops* d = Add().mutable_drops();
    d->set_seq(seq_);
    d->set_dropped_events(n);
    d->set_total_dropped(n);
    d->set_reason(v1::Drops::REASON_RING_FULL);
    seq_ += n;
  }
  v1::Snapshot* Snapshot(v1::Snapshot::Reason reason) {
    v1::Snapshot* s = Add().mutable_snapshot();
    s->set_seq(++seq_);
    s->set_reason(reason);
    return s;
  }
  void End() {
    v1::End* e = Add().mutable_end();
    e->set_seq(++seq_);
    e->set_events_recorded(seq_);
    e->set_exit_status(0);
  }

 private:
  template <typename E>
  void Stamp(E* e) {
    e->set_seq(++seq_);
    e->set_time_ns(seq_ * 1000);
    e->set_tid(7);
  }
  uint64_t seq_ = 0;
};

bool WriteTrace(const std::filesystem::path& path, const Trace& trace) {
  // Plain: the fuzzer should spend its time on frames, not on zstd's own checks.
  absl::StatusOr<fragscope::FrameWriter> w =
      fragscope::FrameWriter::CreateFile(path, fragscope::TraceCompression::kNone);
  if (!w.ok()) {
    std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
    return false;
  }
  for (const v1::Frame& f : trace.frames) {
    if (absl::Status s = w->Write(f); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return false;
    }
  }
  absl::Status s = w->Close();
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return s.ok();
}

std::vector<std::pair<std::string, Trace>> Traces() {
  std::vector<std::pair<std::string, Trace>> out;
  {
    Trace t;  // header only: a stream with no frames
    out.emplace_back("empty.fsc", t);
  }
  {
    Trace t;  // plain cudaMalloc / cudaFree
    t.Hello();
    t.Device(0, 16ull << 30);
    t.Modules();
    t.Alloc(kBase, 20 * kMiB);
    t.Alloc(kBase + 20 * kMiB, 2 * kMiB);
    t.Free(kBase);
    t.Mark("epoch 1");
    t.End();
    out.emplace_back("malloc-free.fsc", t);
  }
  {
    Trace t;  // a caching allocator's segments with annotated blocks, then a fragmentation OOM
    t.Hello();
    t.Device(0, 1ull << 30);
    t.Modules();
    t.Alloc(kBase, 64 * kMiB, 1);
    for (uint64_t i = 0; i < 8; ++i) {
      t.Block(v1::BlockEvent::OP_ALLOC, kBase + i * 8 * kMiB, 8 * kMiB, i % 2);
    }
    for (uint64_t i = 0; i < 8; i += 2)
      t.Block(v1::BlockEvent::OP_FREE, kBase + i * 8 * kMiB, 8 * kMiB);
    t.Block(v1::BlockEvent::OP_FREE_PENDING, kBase + 8 * kMiB, 8 * kMiB, 1);
    t.MemInfo(2 * kMiB, 1ull << 30);
    t.Failed(400 * kMiB, false, 2 * kMiB, 1ull << 30);
    t.Failed(30 * kMiB, true, 2 * kMiB, 1ull << 30);
    t.End();
    out.emplace_back("annotated-oom.fsc", t);
  }
  {
    Trace t;  // expandable segments: VMM reserve, create, map, unmap, release
    t.Hello();
    t.Device(0, 8ull << 30);
    t.Modules();
    t.Map(v1::MapEvent::OP_RESERVE, kBase, 1ull << 30);
    t.Handle(v1::HandleEvent::OP_CREATE, 11, 20 * kMiB);
    t.Handle(v1::HandleEvent::OP_CREATE, 12, 20 * kMiB);
    t.Map(v1::MapEvent::OP_MAP, kBase, 20 * kMiB, 11);
    t.Map(v1::MapEvent::OP_MAP, kBase + 20 * kMiB, 20 * kMiB, 12);
    t.Block(v1::BlockEvent::OP_ALLOC, kBase, 30 * kMiB);
    t.Map(v1::MapEvent::OP_UNMAP, kBase + 20 * kMiB, 20 * kMiB);
    t.Handle(v1::HandleEvent::OP_RELEASE, 12, 20 * kMiB);
    t.Failed(1ull << 30, true, 0, 8ull << 30);
    t.Map(v1::MapEvent::OP_UNMAP, kBase, 20 * kMiB);
    t.Handle(v1::HandleEvent::OP_RELEASE, 11, 20 * kMiB);
    t.Map(v1::MapEvent::OP_FREE_RANGE, kBase, 1ull << 30);
    t.End();
    out.emplace_back("vmm.fsc", t);
  }
  {
    Trace t;  // attached to expandable segments: pages with no reservation seen, joined
    t.Hello(/*attached=*/true);
    t.Device(0, 8ull << 30);
    t.Modules();
    for (uint64_t page : {2, 0, 4, 1}) {
      t.Handle(v1::HandleEvent::OP_CREATE, 30 + page, 2 * kMiB);
      t.Map(v1::MapEvent::OP_MAP, kBase + page * 2 * kMiB, 2 * kMiB, 30 + page);
    }
    t.Block(v1::BlockEvent::OP_ALLOC, kBase + kMiB, 4 * kMiB);
    t.Handle(v1::HandleEvent::OP_CREATE, 33, 2 * kMiB);
    t.Map(v1::MapEvent::OP_MAP, kBase + 6 * kMiB, 2 * kMiB, 33);  // fills the hole: one segment
    t.Block(v1::BlockEvent::OP_ALLOC, kBase + 5 * kMiB, 4 * kMiB);
    t.Map(v1::MapEvent::OP_UNMAP, kBase + 8 * kMiB, 2 * kMiB);
    t.Handle(v1::HandleEvent::OP_RELEASE, 34, 2 * kMiB);
    t.Map(v1::MapEvent::OP_FREE_RANGE, kBase - 64 * kMiB, 1ull << 30);
    t.Block(v1::BlockEvent::OP_FREE, kBase + kMiB, 4 * kMiB);  // died with its segment
    t.End();
    out.emplace_back("vmm-attached.fsc", t);
  }
  {
    Trace t;  // stream-ordered allocations in a memory pool
    t.Hello();
    t.Device(0, 4ull << 30);
    const uint64_t pool = 0x5000;
    t.MemInfo(3ull << 30, 4ull << 30, pool, 64 * kMiB, 0);
    t.Alloc(kBase, 4 * kMiB, 2, v1::MEMORY_KIND_POOL, v1::API_cudaMallocAsync, pool);
    t.Alloc(kBase + 4 * kMiB, 4 * kMiB, 2, v1::MEMORY_KIND_POOL, v1::API_cudaMallocAsync, pool);
    t.Alloc(kBase + 8 * kMiB, 4 * kMiB, 2, v1::MEMORY_KIND_GRAPH, v1::API_cudaMallocAsync, pool);
    t.Free(kBase, v1::API_cudaFreeAsync, pool);
    t.MemInfo(3ull << 30, 4ull << 30, pool, 64 * kMiB, 8 * kMiB);
    t.Alloc(kBase + 1 * (1ull << 30), 8 * kMiB, 0, v1::MEMORY_KIND_MANAGED,
            v1::API_cudaMallocManaged);
    t.Alloc(kBase + 2 * (1ull << 30), 8 * kMiB, 0, v1::MEMORY_KIND_IPC_IMPORT,
            v1::API_cuIpcOpenMemHandle);
    t.End();
    out.emplace_back("pool.fsc", t);
  }
  {
    Trace t;  // attached late: a start snapshot, then drops and a resync snapshot
    t.Hello(true);
    t.Device(0, 16ull << 30);
    v1::Snapshot* s = t.Snapshot(v1::Snapshot::REASON_STREAM_START);
    v1::LiveAllocation* a = s->add_allocations();
    a->set_address(kBase);
    a->set_size(40 * kMiB);
    a->set_api(v1::API_cudaMalloc);
    a->set_kind(v1::MEMORY_KIND_DEVICE);
    a->set_stack_id(1);
    v1::LiveBlock* b = s->add_blocks();
    b->set_address(kBase);
    b->set_size(10 * kMiB);
    t.Alloc(kBase + 40 * kMiB, 2 * kMiB);
    t.Drops(5);
    v1::Snapshot* r = t.Snapshot(v1::Snapshot::REASON_RESYNC);
    *r->add_allocations() = *a;
    v1::LiveReservation* res = r->add_reservations();
    res->set_address(kBase + 4 * (1ull << 30));
    res->set_size(1ull << 30);
    v1::LiveHandle* h = r->add_handles();
    h->set_handle(3);
    h->set_size(2 * kMiB);
    v1::LiveMapping* m = r->add_mappings();
    m->set_address(kBase + 4 * (1ull << 30));
    m->set_size(2 * kMiB);
    m->set_handle(3);
    t.Failed(20ull << 30, false, 1ull << 30, 16ull << 30);
    out.emplace_back("attached-resync-cut.fsc", t);  // no End: the stream was cut
  }
  {
    Trace t;  // PyTorch's blocks known at syncs only: a woken snapshot naming a dormant sync,
              // sync marks, a failure long after a sync and one right after its own
    t.Hello(true);
    t.Device(0, 16ull << 30);
    v1::Snapshot* s = t.Snapshot(v1::Snapshot::REASON_STREAM_START);
    s->set_complete_history(true);
    s->set_last_blocks_synced_seq(s->seq());  // the import, right before the wake
    v1::LiveAllocation* a = s->add_allocations();
    a->set_address(kBase);
    a->set_size(40 * kMiB);
    a->set_api(v1::API_cudaMalloc);
    a->set_kind(v1::MEMORY_KIND_DEVICE);
    v1::LiveBlock* b = s->add_blocks();
    b->set_address(kBase);
    b->set_size(10 * kMiB);
    t.Alloc(kBase + 40 * kMiB, 20 * kMiB);
    t.Failed(30 * kMiB, false, 8 * kMiB, 16ull << 30);  // judged against a sync's blocks
    t.Block(v1::BlockEvent::OP_FREE, kBase, 10 * kMiB);
    t.Block(v1::BlockEvent::OP_ALLOC, kBase + 40 * kMiB, 4 * kMiB);
    t.Mark("PyTorch blocks synced (OOM)", /*blocks_synced=*/true);
    t.Failed(30 * kMiB, true, 8 * kMiB, 16ull << 30);
    t.MemInfo(8 * kMiB, 16ull << 30);
    t.Mark("PyTorch blocks synced (detach)", /*blocks_synced=*/true);
    t.End();
    out.emplace_back("block-syncs.fsc", t);
  }
  {
    Trace t;  // what `fragscope import` produces: symbolized stacks and an imported snapshot
    t.Hello();
    t.Device(0, 0);
    v1::SymbolizedStack* st = t.Add().mutable_symbolized_stack();
    st->set_id(1);
    v1::SourceFrame* f = st->add_frames();
    f->set_function("forward");
    f->set_file("model.py");
    f->set_line(42);
    v1::Snapshot* s = t.Snapshot(v1::Snapshot::REASON_IMPORTED);
    v1::LiveAllocation* a = s->add_allocations();
    a->set_address(kBase);
    a->set_size(20 * kMiB);
    a->set_api(v1::API_torch_snapshot);
    a->set_kind(v1::MEMORY_KIND_DEVICE);
    v1::LiveBlock* b = s->add_blocks();
    b->set_address(kBase + 2 * kMiB);
    b->set_size(2 * kMiB);
    b->set_stack_id(1);
    t.Failed(40 * kMiB, true, 0, 0);
    out.emplace_back("imported.fsc", t);
  }
  {
    Trace t;  // an adapter's source-level sites (format 1.4): a symbolized stack from a live
              // agent, blocks moved to it, one site for a block that is gone, a failure at it
    t.Hello();
    t.Device(0, 16ull << 30);
    t.Alloc(kBase, 20 * kMiB);
    t.Block(v1::BlockEvent::OP_ALLOC, kBase, 2 * kMiB);
    t.Block(v1::BlockEvent::OP_ALLOC, kBase + 4 * kMiB, 2 * kMiB);
    const uint64_t site = (uint64_t{1} << 40) + 1;
    v1::SymbolizedStack* st = t.Add().mutable_symbolized_stack();
    st->set_id(site);
    v1::SourceFrame* f = st->add_frames();
    f->set_function("forward");
    f->set_file("model.py");
    f->set_line(42);
    st->add_frames();  // a frame that names nothing
    for (uint64_t address : {kBase, kBase + 4 * kMiB, kBase + 8 * kMiB}) {
      t.Block(v1::BlockEvent::OP_SITE, address, 0);
      t.frames.back().mutable_block()->set_stack_id(site);
    }
    t.Block(v1::BlockEvent::OP_FREE, kBase, 2 * kMiB);
    t.Block(v1::BlockEvent::OP_SITE_FREED, kBase, 2 * kMiB);  // live at the peak, freed since
    t.frames.back().mutable_block()->set_stack_id(site);
    t.Failed(30 * kMiB, true, 8 * kMiB, 16ull << 30);
    t.frames.back().mutable_failed()->set_stack_id(site);
    t.End();
    out.emplace_back("source-sites.fsc", t);
  }
  {
    Trace t;  // stored symbols (format 1.10): a SymbolTable after the End frame, as `fragscope
              // run` appends it; one module matching the map, one pc outside it, one module
              // of another build-id and one not in the map (both ignored by readers)
    t.Hello();
    t.Device(0, 16ull << 30);
    t.Modules();
    t.Alloc(kBase, 20 * kMiB, 1);
    t.End();
    v1::SymbolTable* table = t.Add().mutable_symbol_table();
    v1::ModuleSymbols* c10 = table->add_modules();
    c10->set_path("/usr/lib/libc10_cuda.so");
    c10->set_build_id("\x01\x02\x03\x04");
    c10->set_load_address(0x7e0000000000);
    v1::PcSymbols* pc = c10->add_pcs();
    pc->set_pc(0x7e0000001234);
    for (const char* function : {"c10::cuda::CUDACachingAllocator::malloc", "inlined_into"}) {
      v1::SourceFrame* f = pc->add_frames();
      f->set_function(function);
      f->set_file("c10/cuda/CUDACachingAllocator.cpp");
      f->set_line(1234);
    }
    c10->add_pcs()->set_pc(0x7e0000200000);  // beyond the module's size
    v1::ModuleSymbols* rebuilt = table->add_modules();
    rebuilt->set_path("/usr/lib/libc10_cuda.so");
    rebuilt->set_build_id("\x09\x09");
    rebuilt->set_load_address(0x7e0000000000);
    rebuilt->add_pcs()->set_pc(0x7e0000001234);
    v1::ModuleSymbols* unknown = table->add_modules();
    unknown->set_path("/nowhere.so");
    unknown->set_load_address(0x10000);
    unknown->add_pcs()->set_pc(0x10010);
    out.emplace_back("symbol-table.fsc", t);
  }
  return out;
}

bool WriteBytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <repo>/tests/fuzz/corpus\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root(argv[1]);
  for (const char* target : {"frame_reader_fuzzer", "trace_pipeline_fuzzer"}) {
    std::filesystem::create_directories(root / target);
    for (const auto& [name, trace] : Traces()) {
      if (!WriteTrace(root / target / name, trace)) return 1;
    }
    // A stream cut inside its last frame, and one with a newer minor version: both readable.
    std::ifstream in(root / target / "malloc-free.fsc", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!WriteBytes(root / target / "truncated.fsc", bytes.substr(0, bytes.size() - 3))) return 1;
    unsigned char header[fragscope::kTraceHeaderBytes];
    fragscope::EncodeTraceHeader(1, 7, header);
    bytes.replace(0, sizeof(header), reinterpret_cast<const char*>(header), sizeof(header));
    if (!WriteBytes(root / target / "minor-7.fsc", bytes)) return 1;
  }
  // model_frames_fuzzer reads a byte program; any bytes are one. Deterministic pseudo-random
  // programs of a few lengths give it a start past the trivial ones.
  std::filesystem::create_directories(root / "model_frames_fuzzer");
  uint32_t state = 12345;
  for (size_t len : {16, 64, 256, 1024}) {
    std::string bytes;
    for (size_t i = 0; i < len; ++i) {
      state = state * 1103515245u + 12345u;
      bytes.push_back(static_cast<char>(state >> 16));
    }
    if (!WriteBytes(root / "model_frames_fuzzer" / ("random-" + std::to_string(len)), bytes)) {
      return 1;
    }
  }
  return 0;
}
