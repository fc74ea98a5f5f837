// Builders of synthetic frames for the collector model tests. Each builder takes the fields a
// test cares about; seq numbers are handed out in order by the FrameFeed so tests read like the
// event stream they describe.
#ifndef FRAGSCOPE_TESTS_COLLECTOR_MODEL_TEST_FRAMES_H_
#define FRAGSCOPE_TESTS_COLLECTOR_MODEL_TEST_FRAMES_H_

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "fragscope.pb.h"
#include "fragscope/model/process_model.h"
#include "fragscope/trace/hot_frame_decoder.h"

namespace fragscope::testing {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// Feeds frames to a model, numbering events 1, 2, 3 ... (time_ns = seq * 1000).
class FrameFeed {
 public:
  explicit FrameFeed(ProcessModel* model) : model_(model) {}

  uint64_t next_seq() const { return seq_ + 1; }

  void Device(int ordinal, uint64_t total, std::string uuid = std::string(16, '\x01')) {
    v1::Frame f;
    f.mutable_device()->set_ordinal(ordinal);
    f.mutable_device()->set_total_bytes(total);
    f.mutable_device()->set_uuid(uuid);
    f.mutable_device()->set_name("Test GPU");
    Apply(f);
  }

  void Hello(bool attached) {
    v1::Frame f;
    f.mutable_hello()->set_pid(4242);
    f.mutable_hello()->set_exe("/usr/bin/python3");
    f.mutable_hello()->set_host("node1");
    f.mutable_hello()->set_attached(attached);
    Apply(f);
  }

  void Module(const std::string& path, uint64_t load, uint64_t size) {
    v1::Frame f;
    v1::Module* m = f.mutable_module_map()->add_modules();
    m->set_path(path);
    m->set_load_address(load);
    m->set_size(size);
    Apply(f);
  }

  void Stack(uint64_t id, std::initializer_list<uint64_t> pcs) {
    v1::Frame f;
    v1::Stack* s = f.mutable_stacks()->add_stacks();
    s->set_id(id);
    for (uint64_t pc : pcs) s->add_pcs(pc);
    Apply(f);
  }

  // cudaMalloc-style driver allocation (a segment of its own). `failed_release_result` not 0:
  // the agent putting it back after a refused release (format 1.7).
  void Malloc(uint64_t address, uint64_t size, int device = 0, uint64_t stack = 0,
              int failed_release_result = 0) {
    v1::Frame f;
    v1::AllocEvent* e = f.mutable_alloc();
    Stamp(e);
    e->set_api(v1::API_cudaMalloc);
    e->set_address(address);
    e->set_size(size);
    e->set_device(device);
    e->set_kind(v1::MEMORY_KIND_DEVICE);
    e->set_stack_id(stack);
    e->set_failed_release_result(failed_release_result);
    Apply(f);
  }

  void AllocKind(uint64_t address, uint64_t size, v1::MemoryKind kind, v1::Api api, int device = 0,
                 uint64_t pool = 0, uint64_t stack = 0) {
    v1::Frame f;
    v1::AllocEvent* e = f.mutable_alloc();
    Stamp(e);
    e->set_api(api);
    e->set_address(address);
    e->set_size(size);
    e->set_device(device);
    e->set_kind(kind);
    e->set_pool(pool);
    e->set_stack_id(stack);
    Apply(f);
  }

  void Free(uint64_t address, v1::Api api = v1::API_cudaFree, int device = 0) {
    v1::Frame f;
    v1::FreeEvent* e = f.mutable_free();
    Stamp(e);
    e->set_api(api);
    e->set_address(address);
    e->set_device(device);
    Apply(f);
  }

  void Block(v1::BlockEvent::Op op, uint64_t address, uint64_t size, int device = 0,
             uint64_t stack = 0, uint64_t stream = 0, uint64_t pool = 0) {
    v1::Frame f;
    v1::BlockEvent* e = f.mutable_block();
    Stamp(e);
    e->set_api(op == v1::BlockEvent::OP_ALLOC ? v1::API_fragscope_block_alloc
                                              : v1::API_fragscope_block_free);
    e->set_op(op);
    e->set_address(address);
    e->set_size(size);
    e->set_device(device);
    e->set_stack_id(stack);
    e->set_stream(stream);
    e->set_pool(pool);
    Apply(f);
  }
  void BlockAlloc(uint64_t address, uint64_t size, uint64_t stack = 0, uint64_t stream = 0) {
    Block(v1::BlockEvent::OP_ALLOC, address, size, 0, stack, stream);
  }
  void BlockFree(uint64_t address, uint64_t size) { Block(v1::BlockEvent::OP_FREE, address, size); }

  void Map(v1::MapEvent::Op op, uint64_t address, uint64_t size, uint64_t handle = 0,
           uint64_t offset = 0, int device = 0) {
    v1::Frame f;
    v1::MapEvent* e = f.mutable_map();
    Stamp(e);
    e->set_op(op);
    e->set_address(address);
    e->set_size(size);
    e->set_handle(handle);
    e->set_offset(offset);
    e->set_device(device);
    Apply(f);
  }

  void Handle(v1::HandleEvent::Op op, uint64_t handle, uint64_t size = 0, int device = 0) {
    v1::Frame f;
    v1::HandleEvent* e = f.mutable_handle();
    Stamp(e);
    e->set_op(op);
    e->set_handle(handle);
    e->set_size(size);
    e->set_device(device);
    Apply(f);
  }

  void MemInfo(int device, uint64_t free, uint64_t total, uint64_t pool = 0,
               uint64_t pool_reserved = 0, uint64_t pool_used = 0) {
    v1::Frame f;
    v1::MemInfo* e = f.mutable_mem_info();
    e->set_seq(++seq_);
    e->set_time_ns(seq_ * 1000);
    e->set_device(device);
    e->set_free_bytes(free);
    e->set_total_bytes(total);
    e->set_pool(pool);
    e->set_pool_reserved_bytes(pool_reserved);
    e->set_pool_used_bytes(pool_used);
    Apply(f);
  }

  // A failed allocation. `free`/`total` = 0 means "no mem info with the failure".
  void Failed(uint64_t size, int device, bool from_sub_allocator, uint64_t free = 0,
              uint64_t total = 0, v1::Api api = v1::API_cudaMalloc, int result = 2,
              uint64_t stream = 0, uint64_t pool = 0) {
    v1::Frame f;
    v1::FailedAlloc* e = f.mutable_failed();
    Stamp(e);
    e->set_api(api);
    e->set_result(result);
    e->set_size(size);
    e->set_device(device);
    e->set_from_sub_allocator(from_sub_allocator);
    e->set_stream(stream);
    e->set_pool(pool);
    if (total > 0) {
      e->set_has_mem_info(true);
      e->set_device_free_bytes(free);
      e->set_device_total_bytes(total);
    }
    Apply(f);
  }

  // A mark; `blocks_synced`: the sub-allocator's blocks were just read from its own state.
  void Mark(const std::string& label, bool blocks_synced = false) {
    v1::Frame f;
    v1::Mark* m = f.mutable_mark();
    m->set_seq(++seq_);
    m->set_time_ns(seq_ * 1000);
    m->set_label(label);
    m->set_blocks_synced(blocks_synced);
    Apply(f);
  }

  // A mark that says which rank the process is (Mark.rank; world_size < 0: not given).
  void RankMark(uint32_t rank, int64_t world_size) {
    v1::Frame f;
    v1::Mark* m = f.mutable_mark();
    m->set_seq(++seq_);
    m->set_time_ns(seq_ * 1000);
    m->set_label("rank " + std::to_string(rank));
    m->set_rank(rank);
    if (world_size >= 0) m->set_world_size(static_cast<uint32_t>(world_size));
    Apply(f);
  }

  void Drops(uint64_t dropped) {
    v1::Frame f;
    f.mutable_drops()->set_seq(seq_);
    f.mutable_drops()->set_dropped_events(dropped);
    f.mutable_drops()->set_reason(v1::Drops::REASON_RING_FULL);
    seq_ += dropped;  // the lost events used these numbers
    Apply(f);
  }

  // Applies `snapshot` at the next seq.
  void Snapshot(v1::Snapshot snapshot) {
    v1::Frame f;
    snapshot.set_seq(++seq_);
    snapshot.set_time_ns(seq_ * 1000);
    *f.mutable_snapshot() = std::move(snapshot);
    Apply(f);
  }

  // Applies `snapshot` exact at seq `seq`, without moving the feed's numbering: the agent's
  // snapshot runs ahead of the events its drain has written (events up to `seq` follow it).
  void SnapshotAt(v1::Snapshot snapshot, uint64_t seq) {
    v1::Frame f;
    snapshot.set_seq(seq);
    snapshot.set_time_ns(seq * 1000);
    *f.mutable_snapshot() = std::move(snapshot);
    Apply(f);
  }

  void End() {
    v1::Frame f;
    f.mutable_end()->set_seq(++seq_);
    f.mutable_end()->set_exit_status(1);
    Apply(f);
  }

  // Also feeds every frame to `decoded`, the way a replay does: serialized, and an event frame
  // that the hand decoder takes applied as decoded (ProcessModel::Apply(HotEvent)).
  void MirrorDecodedTo(ProcessModel* decoded) { decoded_ = decoded; }

  // Any frame, as the builders above apply theirs.
  void Apply(const v1::Frame& f) {
    model_->Apply(f);
    if (decoded_ == nullptr) return;
    const std::string bytes = f.SerializeAsString();
    HotEvent event;
    if (ParseHotEvent(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &event)) {
      decoded_->Apply(event);
    } else {
      v1::Frame parsed;
      ASSERT_TRUE(parsed.ParseFromString(bytes));
      decoded_->Apply(parsed);
    }
  }

 private:
  template <typename Event>
  void Stamp(Event* e) {
    e->set_seq(++seq_);
    e->set_time_ns(seq_ * 1000);
    e->set_tid(7);
  }

  ProcessModel* model_;
  ProcessModel* decoded_ = nullptr;
  uint64_t seq_ = 0;
};

// A copy of device `ordinal`'s summary (a copy, so it cannot dangle when taken from a
// temporary summary); fails the test if the device is missing.
inline DeviceSummary DeviceOf(const ModelSummary& s, int ordinal) {
  for (const DeviceSummary& d : s.devices) {
    if (d.ordinal == ordinal) return d;
  }
  ADD_FAILURE() << "no device " << ordinal << " in the summary";
  return DeviceSummary{};
}
inline DeviceSummary DeviceOf(const ProcessModel& model, int ordinal) {
  return DeviceOf(model.Summarize(), ordinal);
}

}  // namespace fragscope::testing

#endif  // FRAGSCOPE_TESTS_COLLECTOR_MODEL_TEST_FRAMES_H_
