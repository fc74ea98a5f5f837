// A small, hand-built trace for the export tests: the frames of a process with two devices whose
// layout is known byte for byte, so tests can check what each export says against numbers
// written here rather than against the model's own output.
//
// Device 0 (16 GiB):
//   A  0x10000000, 64 MiB driver segment carved by a sub-allocator (annotated): blocks
//      [+0, 8 MiB) site 1, [+8, +40 MiB) site 2 (stream 7), [+48, +52 MiB) pending free;
//      free ranges [+40, +48) and [+52, +64 MiB).
//   B  0x20000000, 2 MiB plain cudaMalloc (exact), site 3.
//   C  0x40000000, VMM reservation of 1 GiB, one 96 MiB handle mapped at its start; blocks
//      [+0, +16 MiB) site 1 and [+32, +48 MiB) site 2; free [+16, +32) and [+48, +96 MiB).
//   Then an OOM a sub-allocator reports for 80 MiB (site 4), with a MemInfo at the failure.
// Device 1 (8 GiB): D  0x90000000, 4 MiB plain cudaMalloc (exact), site 3.
// With `opaque` set, device 0 also holds E  0x60000000, 32 MiB allocated through libc10_cuda
// with no blocks reported (opaque), and a 6 MiB cudaMallocAsync pool block.
#ifndef FRAGSCOPE_TESTS_EXPORT_EXPORT_TEST_TRACE_H_
#define FRAGSCOPE_TESTS_EXPORT_EXPORT_TEST_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/export/export_input.h"
#include "fragscope/model/process_model.h"

namespace fragscope::testing {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;
inline constexpr uint64_t kSegA = 0x10000000, kSegB = 0x20000000, kSegC = 0x40000000;
inline constexpr uint64_t kSegD = 0x90000000, kSegE = 0x88000000;  // E: outside reservation C
inline constexpr uint64_t kOomRequest = 80 * kMiB;
inline constexpr uint64_t kFreeAtOom = 50 * kMiB;
// Page title text with markup in it: exports must escape it.
inline constexpr char kHostileExe[] = "/opt/train<script>window.pwned=1</script>.py";

class ExportTrace {
 public:
  explicit ExportTrace(bool opaque = false) { Build(opaque); }
  // By value, so `for (f : ExportTrace().frames())` does not outlive its trace.
  std::vector<v1::Frame> frames() const { return frames_; }

 private:
  template <typename E>
  void Stamp(E* e) {
    ++seq_;
    e->set_seq(seq_);
    e->set_time_ns(seq_ * 1000000);  // 1 ms apart
  }
  v1::Frame& Next() { return frames_.emplace_back(); }

  void Malloc(uint64_t address, uint64_t size, int device, uint64_t stack) {
    v1::AllocEvent* e = Next().mutable_alloc();
    Stamp(e);
    e->set_api(v1::API_cudaMalloc);
    e->set_address(address);
    e->set_size(size);
    e->set_device(device);
    e->set_kind(v1::MEMORY_KIND_DEVICE);
    e->set_stack_id(stack);
  }
  void Block(v1::BlockEvent::Op op, uint64_t address, uint64_t size, uint64_t stack,
             uint64_t stream = 0) {
    v1::BlockEvent* e = Next().mutable_block();
    Stamp(e);
    e->set_api(op == v1::BlockEvent::OP_ALLOC ? v1::API_fragscope_block_alloc
                                              : v1::API_fragscope_block_free);
    e->set_op(op);
    e->set_address(address);
    e->set_size(size);
    e->set_device(0);
    e->set_stack_id(stack);
    e->set_stream(stream);
  }
  void SourceStack(uint64_t id, const std::string& function, const std::string& file,
                   uint32_t line) {
    v1::SymbolizedStack* s = Next().mutable_symbolized_stack();
    s->set_id(id);
    v1::SourceFrame* f = s->add_frames();
    f->set_function(function);
    f->set_file(file);
    f->set_line(line);
    v1::SourceFrame* caller = s->add_frames();
    caller->set_function("train_step");
    caller->set_file("train.py");
    caller->set_line(10);
  }

  void Build(bool opaque) {
    v1::Hello* hello = Next().mutable_hello();
    hello->set_pid(4242);
    hello->set_host("node1");
    hello->set_exe(kHostileExe);
    for (int d = 0; d < 2; ++d) {
      v1::DeviceInfo* info = Next().mutable_device();
      info->set_ordinal(d);
      info->set_total_bytes(d == 0 ? 16 * kGiB : 8 * kGiB);
      info->set_uuid(std::string(16, static_cast<char>(0x10 + d)));
      info->set_name("Test GPU");
    }
    SourceStack(1, "linear_forward", "model.py", 42);
    SourceStack(2, "attention", "model.py", 77);
    SourceStack(3, "cudaMalloc_wrapper", "ext.cc", 5);
    SourceStack(4, "allocate_kv_cache", "cache.py", 9);

    // A: annotated driver segment.
    Malloc(kSegA, 64 * kMiB, 0, 0);
    Block(v1::BlockEvent::OP_ALLOC, kSegA, 8 * kMiB, 1);
    Block(v1::BlockEvent::OP_ALLOC, kSegA + 8 * kMiB, 32 * kMiB, 2, 7);
    Block(v1::BlockEvent::OP_ALLOC, kSegA + 48 * kMiB, 4 * kMiB, 1);
    Block(v1::BlockEvent::OP_FREE_PENDING, kSegA + 48 * kMiB, 4 * kMiB, 1);
    // B: exact.
    Malloc(kSegB, 2 * kMiB, 0, 3);
    // C: VMM reservation with one mapped handle and two blocks.
    {
      v1::MapEvent* e = Next().mutable_map();
      Stamp(e);
      e->set_op(v1::MapEvent::OP_RESERVE);
      e->set_address(kSegC);
      e->set_size(kGiB);
      e->set_device(0);
    }
    {
      v1::HandleEvent* e = Next().mutable_handle();
      Stamp(e);
      e->set_op(v1::HandleEvent::OP_CREATE);
      e->set_handle(77);
      e->set_size(96 * kMiB);
      e->set_device(0);
    }
    {
      v1::MapEvent* e = Next().mutable_map();
      Stamp(e);
      e->set_op(v1::MapEvent::OP_MAP);
      e->set_address(kSegC);
      e->set_size(96 * kMiB);
      e->set_handle(77);
      e->set_device(0);
    }
    Block(v1::BlockEvent::OP_ALLOC, kSegC, 16 * kMiB, 1);
    Block(v1::BlockEvent::OP_ALLOC, kSegC + 32 * kMiB, 16 * kMiB, 2);
    // D: exact on device 1.
    Malloc(kSegD, 4 * kMiB, 1, 3);
    if (opaque) {
      v1::ModuleMap* map = Next().mutable_module_map();
      v1::Module* m = map->add_modules();
      m->set_path("/usr/lib/python3/site-packages/torch/lib/libc10_cuda.so");
      m->set_load_address(0x7f0000000000);
      m->set_size(0x100000);
      v1::Stack* s = Next().mutable_stacks()->add_stacks();
      s->set_id(9);
      s->add_pcs(0x7f0000001234);
      Malloc(kSegE, 32 * kMiB, 0, 9);
      v1::AllocEvent* e = Next().mutable_alloc();
      Stamp(e);
      e->set_api(v1::API_cudaMallocAsync);
      e->set_address(0x70000000);
      e->set_size(6 * kMiB);
      e->set_device(0);
      e->set_kind(v1::MEMORY_KIND_POOL);
    }
    // The OOM, as a sub-allocator reports it.
    v1::FailedAlloc* f = Next().mutable_failed();
    Stamp(f);
    f->set_api(v1::API_fragscope_alloc_failed);
    f->set_result(2);
    f->set_stack_id(4);
    f->set_size(kOomRequest);
    f->set_device(0);
    f->set_kind(v1::MEMORY_KIND_DEVICE);
    f->set_has_mem_info(true);
    f->set_device_free_bytes(kFreeAtOom);
    f->set_device_total_bytes(16 * kGiB);
    f->set_from_sub_allocator(true);
    v1::End* end = Next().mutable_end();
    end->set_seq(++seq_);
    end->set_exit_status(1);
  }

  std::vector<v1::Frame> frames_;
  uint64_t seq_ = 0;
};

// Replays `frames` into a fresh model and captures what the exports draw from.
inline exporter::ExportInput Capture(const std::vector<v1::Frame>& frames) {
  ProcessModel model;
  for (const v1::Frame& f : frames) model.Apply(f);
  return exporter::CaptureExportInput(model);
}

}  // namespace fragscope::testing

#endif  // FRAGSCOPE_TESTS_EXPORT_EXPORT_TEST_TRACE_H_
