// Every frame type the agent writes, parsed back with libprotobuf, field by field.
#include "shipping/frame_encoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "parse_frames.h"

namespace fragscope::agent {
namespace {

using agent_test::ParseFrames;

class FrameEncoderTest : public ::testing::Test {
 protected:
  FrameEncoderTest() : buffer_(1 << 16), w_(buffer_.data(), buffer_.size()) {}

  // Parses what was written so far; expects exactly one frame.
  v1::Frame Single() {
    bool ok = false;
    std::vector<v1::Frame> frames = ParseFrames(buffer_.data(), w_.size(), &ok);
    EXPECT_TRUE(ok);
    EXPECT_EQ(frames.size(), 1u);
    return frames.empty() ? v1::Frame() : frames[0];
  }

  static EventRecord Record(RecordType type, Api api) {
    EventRecord r;
    memset(&r, 0, sizeof(r));
    r.type = type;
    r.api = api;
    r.seq = 41;
    r.time_ns = 123456789;
    r.tid = 777;
    r.stack_id = 0xabcdef;
    r.device = 1;
    return r;
  }

  static void ExpectCommon(uint64_t seq, uint64_t time_ns, uint32_t tid, uint64_t stack_id) {
    EXPECT_EQ(seq, 41u);
    EXPECT_EQ(time_ns, 123456789u);
    EXPECT_EQ(tid, 777u);
    EXPECT_EQ(stack_id, 0xabcdefu);
  }

  std::vector<uint8_t> buffer_;
  WireWriter w_;
};

TEST_F(FrameEncoderTest, StreamHeaderIsMagicThenVersions) {
  uint8_t header[kStreamHeaderSize];
  EncodeStreamHeader(header);
  const uint8_t expected[16] = {'F', 'R', 'A', 'G', 'S', 'C', 'P', 1, 2, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(memcmp(header, expected, 16), 0);
}

TEST_F(FrameEncoderTest, Hello) {
  const char* argv[] = {"python", "", "train.py"};
  HelloInfo h;
  h.pid = 4242;
  h.ppid = 1;
  h.host = "node7";
  h.exe = "/usr/bin/python3";
  h.argv = argv;
  h.argc = 3;
  h.agent_version = "0.1.0";
  h.realtime_at_start_ns = 1700000000000000000ull;
  h.monotonic_at_start_ns = 55;
  h.stream_index = 2;
  h.stack_depth = 32;
  h.ring_bytes = 8 << 20;
  h.resumed = 3;
  h.release_stacks_off = true;
  ASSERT_TRUE(EncodeHello(w_, h));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_hello());
  const v1::Hello& m = f.hello();
  EXPECT_EQ(m.format_major(), 2u);
  EXPECT_EQ(m.format_minor(), kFormatMinor);
  EXPECT_EQ(m.pid(), 4242u);
  EXPECT_EQ(m.ppid(), 1u);
  EXPECT_EQ(m.host(), "node7");
  EXPECT_EQ(m.exe(), "/usr/bin/python3");
  ASSERT_EQ(m.argv_size(), 3);
  EXPECT_EQ(m.argv(0), "python");
  EXPECT_EQ(m.argv(1), "");
  EXPECT_EQ(m.argv(2), "train.py");
  EXPECT_EQ(m.agent_version(), "0.1.0");
  EXPECT_EQ(m.realtime_at_start_ns(), 1700000000000000000ull);
  EXPECT_EQ(m.monotonic_at_start_ns(), 55u);
  EXPECT_EQ(m.backend(), v1::Hello::BACKEND_PRELOAD);
  EXPECT_FALSE(m.attached());
  EXPECT_EQ(m.stream_index(), 2u);
  EXPECT_EQ(m.stack_depth(), 32u);
  EXPECT_EQ(m.ring_bytes(), 8u << 20);
  EXPECT_EQ(m.resumed(), 3u);
  EXPECT_TRUE(m.release_stacks_off());
  // Outside a distributed job's environment: no rank at all, not rank 0.
  EXPECT_FALSE(m.has_rank());
  EXPECT_FALSE(m.has_world_size());
}

TEST_F(FrameEncoderTest, HelloRankZeroIsARank) {
  HelloInfo h;
  h.pid = 7;
  h.rank = 0;  // proto3 leaves zeros out; an optional field keeps them
  h.world_size = 8;
  ASSERT_TRUE(EncodeHello(w_, h));
  v1::Frame f = Single();
  ASSERT_TRUE(f.hello().has_rank());
  EXPECT_EQ(f.hello().rank(), 0u);
  ASSERT_TRUE(f.hello().has_world_size());
  EXPECT_EQ(f.hello().world_size(), 8u);
}

TEST_F(FrameEncoderTest, DeviceInfo) {
  DeviceInfoData d;
  d.ordinal = 3;
  d.has_uuid = true;
  for (int i = 0; i < 16; ++i) d.uuid[i] = static_cast<uint8_t>(0xa0 + i);
  d.total_bytes = 80ull << 30;
  d.name = "Fake H100";
  ASSERT_TRUE(EncodeDeviceInfo(w_, d));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_device());
  EXPECT_EQ(f.device().ordinal(), 3);
  ASSERT_EQ(f.device().uuid().size(), 16u);
  EXPECT_EQ(static_cast<uint8_t>(f.device().uuid()[15]), 0xaf);
  EXPECT_EQ(f.device().total_bytes(), 80ull << 30);
  EXPECT_EQ(f.device().name(), "Fake H100");
}

TEST_F(FrameEncoderTest, ModuleMap) {
  const uint8_t id[] = {1, 2, 3, 4, 5};
  ModuleData m[2];
  m[0].path = "/lib/libc.so.6";
  m[0].build_id = id;
  m[0].build_id_size = 5;
  m[0].load_address = 0x7f0000000000;
  m[0].size = 0x200000;
  m[1].path = "/app";
  m[1].load_address = 0x400000;
  m[1].size = 0x1000;
  ASSERT_TRUE(EncodeModuleMap(w_, m, 2));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_module_map());
  ASSERT_EQ(f.module_map().modules_size(), 2);
  EXPECT_EQ(f.module_map().modules(0).path(), "/lib/libc.so.6");
  EXPECT_EQ(f.module_map().modules(0).build_id(), std::string("\1\2\3\4\5"));
  EXPECT_EQ(f.module_map().modules(0).load_address(), 0x7f0000000000u);
  EXPECT_EQ(f.module_map().modules(0).size(), 0x200000u);
  EXPECT_EQ(f.module_map().modules(1).path(), "/app");
  EXPECT_TRUE(f.module_map().modules(1).build_id().empty());
}

TEST_F(FrameEncoderTest, StackTable) {
  uint64_t pcs[] = {0x401234, 0x7f00deadbeef, 0x400000};
  ASSERT_TRUE(EncodeStack(w_, 0x1234567890abcdefull, pcs, 3, StackEnd::kDepthLimit));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_stacks());
  ASSERT_EQ(f.stacks().stacks_size(), 1);
  EXPECT_EQ(f.stacks().stacks(0).id(), 0x1234567890abcdefull);
  ASSERT_EQ(f.stacks().stacks(0).pcs_size(), 3);
  EXPECT_EQ(f.stacks().stacks(0).pcs(1), 0x7f00deadbeefu);
  EXPECT_EQ(f.stacks().stacks(0).end(), v1::STACK_END_DEPTH_LIMIT);
}

TEST_F(FrameEncoderTest, AllocEvent) {
  EventRecord r = Record(RecordType::kAlloc, Api::k_cudaMallocPitch);
  r.address = 0x7f1200000000;
  r.size = 4096 * 100;
  r.stream = 0x55;
  r.pool = 0x66;
  r.kind = MemoryKind::kPitched;
  r.aux0 = 4096;
  r.flags = kFlagInCapture;
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_alloc());
  const v1::AllocEvent& e = f.alloc();
  ExpectCommon(e.seq(), e.time_ns(), e.tid(), e.stack_id());
  EXPECT_EQ(e.api(), v1::API_cudaMallocPitch);
  EXPECT_EQ(e.result(), 0);
  EXPECT_EQ(e.address(), 0x7f1200000000u);
  EXPECT_EQ(e.size(), 409600u);
  EXPECT_EQ(e.device(), 1);
  EXPECT_EQ(e.stream(), 0x55u);
  EXPECT_EQ(e.pool(), 0x66u);
  EXPECT_EQ(e.kind(), v1::MEMORY_KIND_PITCHED);
  EXPECT_EQ(e.pitch(), 4096u);
  EXPECT_TRUE(e.in_capture());
}

TEST_F(FrameEncoderTest, FreeEvent) {
  EventRecord r = Record(RecordType::kFree, Api::k_cudaFreeAsync);
  r.result = 1;
  r.address = 0x1000;
  r.size = 512;
  r.device = -1;
  r.stream = 9;
  r.pool = 10;
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_free());
  const v1::FreeEvent& e = f.free();
  ExpectCommon(e.seq(), e.time_ns(), e.tid(), e.stack_id());
  EXPECT_EQ(e.api(), v1::API_cudaFreeAsync);
  EXPECT_EQ(e.result(), 1);
  EXPECT_EQ(e.address(), 0x1000u);
  EXPECT_EQ(e.size(), 512u);
  EXPECT_EQ(e.device(), -1);
  EXPECT_EQ(e.stream(), 9u);
  EXPECT_EQ(e.pool(), 10u);
}

TEST_F(FrameEncoderTest, MapEvent) {
  EventRecord r = Record(RecordType::kMap, Api::k_cuMemMap);
  r.op = static_cast<uint8_t>(MapOp::kMap);
  r.address = 0x200000000;
  r.size = 2 << 20;
  r.aux0 = 4096;     // offset
  r.pool = 0xbeef;   // handle
  r.aux1 = 1 << 21;  // alignment
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_map());
  const v1::MapEvent& e = f.map();
  ExpectCommon(e.seq(), e.time_ns(), e.tid(), e.stack_id());
  EXPECT_EQ(e.api(), v1::API_cuMemMap);
  EXPECT_EQ(e.op(), v1::MapEvent::OP_MAP);
  EXPECT_EQ(e.address(), 0x200000000u);
  EXPECT_EQ(e.size(), 2u << 20);
  EXPECT_EQ(e.offset(), 4096u);
  EXPECT_EQ(e.handle(), 0xbeefu);
  EXPECT_EQ(e.device(), 1);
  EXPECT_EQ(e.alignment(), 1u << 21);
}

TEST_F(FrameEncoderTest, HandleEvent) {
  EventRecord r = Record(RecordType::kHandle, Api::k_cuMemRetainAllocationHandle);
  r.op = static_cast<uint8_t>(HandleOp::kRetain);
  r.pool = 0x77;  // handle
  r.size = 20 << 20;
  r.aux1 = 1;  // handle type
  r.address = 0x300000000;
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_handle());
  const v1::HandleEvent& e = f.handle();
  ExpectCommon(e.seq(), e.time_ns(), e.tid(), e.stack_id());
  EXPECT_EQ(e.op(), v1::HandleEvent::OP_RETAIN);
  EXPECT_EQ(e.handle(), 0x77u);
  EXPECT_EQ(e.size(), 20u << 20);
  EXPECT_EQ(e.device(), 1);
  EXPECT_EQ(e.handle_type(), 1u);
  EXPECT_EQ(e.address(), 0x300000000u);
}

TEST_F(FrameEncoderTest, FailedAllocWithMemInfo) {
  EventRecord r = Record(RecordType::kFailed, Api::k_fragscope_alloc_failed);
  r.result = 2;
  r.size = 1ull << 34;
  r.stream = 3;
  r.pool = 4;
  r.kind = MemoryKind::kPool;
  r.flags = kFlagHasMemInfo | kFlagSubAllocator;
  r.aux0 = 1000;
  r.aux1 = 5000;
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_failed());
  const v1::FailedAlloc& e = f.failed();
  ExpectCommon(e.seq(), e.time_ns(), e.tid(), e.stack_id());
  EXPECT_EQ(e.api(), v1::API_fragscope_alloc_failed);
  EXPECT_EQ(e.result(), 2);
  EXPECT_EQ(e.size(), 1ull << 34);
  EXPECT_EQ(e.device(), 1);
  EXPECT_EQ(e.stream(), 3u);
  EXPECT_EQ(e.pool(), 4u);
  EXPECT_EQ(e.kind(), v1::MEMORY_KIND_POOL);
  EXPECT_TRUE(e.has_mem_info());
  EXPECT_EQ(e.device_free_bytes(), 1000u);
  EXPECT_EQ(e.device_total_bytes(), 5000u);
  EXPECT_TRUE(e.from_sub_allocator());
}

TEST_F(FrameEncoderTest, MemInfo) {
  EventRecord r = Record(RecordType::kMemInfo, Api::k_UNKNOWN);
  r.aux0 = 11;
  r.aux1 = 22;
  r.pool = 33;
  r.aux2 = 44;
  r.aux3 = 55;
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_mem_info());
  const v1::MemInfo& e = f.mem_info();
  EXPECT_EQ(e.seq(), 41u);
  EXPECT_EQ(e.time_ns(), 123456789u);
  EXPECT_EQ(e.device(), 1);
  EXPECT_EQ(e.free_bytes(), 11u);
  EXPECT_EQ(e.total_bytes(), 22u);
  EXPECT_EQ(e.pool(), 33u);
  EXPECT_EQ(e.pool_reserved_bytes(), 44u);
  EXPECT_EQ(e.pool_used_bytes(), 55u);
}

TEST_F(FrameEncoderTest, Mark) {
  EventRecord r = Record(RecordType::kMark, Api::k_fragscope_mark);
  memcpy(r.label, "step 12", 7);
  r.label_size = 7;
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_mark());
  EXPECT_EQ(f.mark().seq(), 41u);
  EXPECT_EQ(f.mark().tid(), 777u);
  EXPECT_EQ(f.mark().label(), "step 12");
  EXPECT_FALSE(f.mark().blocks_synced());
  w_.Clear();
  r.flags = kFlagBlocksSynced;
  ASSERT_TRUE(EncodeRecord(w_, r));
  EXPECT_TRUE(Single().mark().blocks_synced());
  EXPECT_FALSE(Single().mark().has_rank());
}

TEST_F(FrameEncoderTest, RankMark) {
  EventRecord r = Record(RecordType::kMark, Api::k_fragscope_mark);
  memcpy(r.label, "rank 0 of 4", 11);
  r.label_size = 11;
  r.flags = kFlagRank;
  r.rank_mark.rank = 0;  // present although 0
  r.rank_mark.world_size = 4;
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_mark());
  EXPECT_EQ(f.mark().label(), "rank 0 of 4");
  ASSERT_TRUE(f.mark().has_rank());
  EXPECT_EQ(f.mark().rank(), 0u);
  ASSERT_TRUE(f.mark().has_world_size());
  EXPECT_EQ(f.mark().world_size(), 4u);
  w_.Clear();
  r.rank_mark.rank = 7;
  r.rank_mark.world_size = -1;  // unknown: absent
  ASSERT_TRUE(EncodeRecord(w_, r));
  f = Single();
  EXPECT_EQ(f.mark().rank(), 7u);
  EXPECT_FALSE(f.mark().has_world_size());
}

TEST_F(FrameEncoderTest, BlockEvent) {
  EventRecord r = Record(RecordType::kBlock, Api::k_fragscope_block_free);
  r.op = static_cast<uint8_t>(BlockOp::kFreePending);
  r.address = 0x9000;
  r.size = 256;
  r.stream = 5;
  r.aux2 = 6;  // sub-allocator pool
  r.pool = 7;  // allocator id
  ASSERT_TRUE(EncodeRecord(w_, r));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_block());
  const v1::BlockEvent& e = f.block();
  ExpectCommon(e.seq(), e.time_ns(), e.tid(), e.stack_id());
  EXPECT_EQ(e.op(), v1::BlockEvent::OP_FREE_PENDING);
  EXPECT_EQ(e.address(), 0x9000u);
  EXPECT_EQ(e.size(), 256u);
  EXPECT_EQ(e.device(), 1);
  EXPECT_EQ(e.stream(), 5u);
  EXPECT_EQ(e.pool(), 6u);
  EXPECT_EQ(e.allocator(), 7u);
}

TEST_F(FrameEncoderTest, DropsAndEnd) {
  DropsData d;
  d.seq = 100;
  d.time_ns = 200;
  d.dropped_events = 3;
  d.total_dropped = 10;
  d.reason = DropReason::kRingFull;
  ASSERT_TRUE(EncodeDrops(w_, d));
  EndData e;
  e.seq = 101;
  e.time_ns = 300;
  e.events_recorded = 90;
  e.total_dropped = 10;
  ASSERT_TRUE(EncodeEnd(w_, e));
  bool ok = false;
  std::vector<v1::Frame> frames = ParseFrames(buffer_.data(), w_.size(), &ok);
  ASSERT_TRUE(ok);
  ASSERT_EQ(frames.size(), 2u);
  ASSERT_TRUE(frames[0].has_drops());
  EXPECT_EQ(frames[0].drops().dropped_events(), 3u);
  EXPECT_EQ(frames[0].drops().total_dropped(), 10u);
  EXPECT_EQ(frames[0].drops().reason(), v1::Drops::REASON_RING_FULL);
  ASSERT_TRUE(frames[1].has_end());
  EXPECT_EQ(frames[1].end().seq(), 101u);
  EXPECT_EQ(frames[1].end().events_recorded(), 90u);
  EXPECT_EQ(frames[1].end().total_dropped(), 10u);
  EXPECT_EQ(frames[1].end().exit_status(), -1);
  EXPECT_EQ(frames[1].end().events_in_snapshots(), 0u);
}

TEST_F(FrameEncoderTest, EndCarriesEventsInSnapshots) {
  EndData e;
  e.seq = 7;
  e.events_recorded = 7;
  e.events_in_snapshots = 5;
  ASSERT_TRUE(EncodeEnd(w_, e));
  EXPECT_EQ(Single().end().events_in_snapshots(), 5u);
}

// A write cut part-way: the event frames wholly before the cut are counted, a frame cut in its
// length prefix or body is not, nor are frames that are no events (MemInfo, Drops, Hello).
TEST_F(FrameEncoderTest, CountWholeEventFramesStopsAtTheCut) {
  uint8_t header[kStreamHeaderSize];
  EncodeStreamHeader(header);
  w_.RawBytes(header, sizeof(header));
  HelloInfo hello;
  hello.exe = "/bin/x";
  ASSERT_TRUE(EncodeHello(w_, hello));
  std::vector<size_t> ends;  // where each frame below ends
  const RecordType kinds[] = {RecordType::kAlloc,  RecordType::kMemInfo, RecordType::kFree,
                              RecordType::kFailed, RecordType::kMark,    RecordType::kBlock};
  for (RecordType type : kinds) {
    ASSERT_TRUE(EncodeRecord(w_, Record(type, Api::k_cudaMalloc)));
    ends.push_back(w_.size());
  }
  DropsData d;
  d.dropped_events = 1;
  ASSERT_TRUE(EncodeDrops(w_, d));
  ends.push_back(w_.size());
  const uint8_t* data = buffer_.data();
  EXPECT_EQ(CountWholeEventFrames(data, w_.size()), 5u);
  EXPECT_EQ(CountWholeEventFrames(data, ends[0]), 1u);
  EXPECT_EQ(CountWholeEventFrames(data, ends[0] - 1), 0u);
  EXPECT_EQ(CountWholeEventFrames(data, ends[1]), 1u);      // + MemInfo: no event
  EXPECT_EQ(CountWholeEventFrames(data, ends[1] + 1), 1u);  // only the free's length prefix
  EXPECT_EQ(CountWholeEventFrames(data, ends[2]), 2u);
  EXPECT_EQ(CountWholeEventFrames(data, ends[5] - 1), 4u);
  EXPECT_EQ(CountWholeEventFrames(data, 5), 0u);  // inside the stream header
  EXPECT_EQ(CountWholeEventFrames(data, 0), 0u);
  // Without the header (a buffer that is not the stream's first).
  WireWriter later(buffer_.data(), buffer_.size());
  ASSERT_TRUE(EncodeRecord(later, Record(RecordType::kFree, Api::k_cudaFree)));
  ASSERT_TRUE(EncodeRecord(later, Record(RecordType::kAlloc, Api::k_cudaMalloc)));
  EXPECT_EQ(CountWholeEventFrames(buffer_.data(), later.size()), 2u);
}

TEST_F(FrameEncoderTest, SnapshotWithEveryLiveClass) {
  SnapshotEncoder s(w_, 600, SnapshotReason::kResync, true);
  LiveEntry a{};
  a.cls = LiveClass::kAllocation;
  a.api = Api::k_cudaMallocManaged;
  a.kind = MemoryKind::kManaged;
  a.device = 0;
  a.address = 0x1000;
  a.size = 64;
  a.stream = 2;
  a.pool = 3;
  a.stack_id = 4;
  s.Add(a);
  LiveEntry res{};
  res.cls = LiveClass::kReservation;
  res.device = -1;
  res.address = 0x2000;
  res.size = 1 << 30;
  res.stack_id = 5;
  s.Add(res);
  LiveEntry h{};
  h.cls = LiveClass::kHandle;
  h.device = 1;
  h.address = 0x77;
  h.size = 2 << 20;
  h.flags = kLiveImported;
  h.refs = 0;  // released, still mapped
  h.stack_id = 6;
  s.Add(h);
  LiveEntry m{};
  m.cls = LiveClass::kMapping;
  m.address = 0x2000;
  m.size = 2 << 20;
  m.offset = 4096;
  m.handle = 0x77;
  s.Add(m);
  LiveEntry b{};
  b.cls = LiveClass::kBlock;
  b.device = 0;
  b.address = 0x1010;
  b.size = 16;
  b.stream = 8;
  b.pool = 9;
  b.stack_id = 10;
  b.flags = kLivePendingFree;
  b.handle = 11;
  s.Add(b);
  ASSERT_TRUE(s.Finish(500, 7));
  v1::Frame f = Single();
  ASSERT_TRUE(f.has_snapshot());
  const v1::Snapshot& snap = f.snapshot();
  EXPECT_EQ(snap.seq(), 500u);
  EXPECT_EQ(snap.entries_not_held(), 7u);
  EXPECT_EQ(snap.time_ns(), 600u);
  EXPECT_EQ(snap.reason(), v1::Snapshot::REASON_RESYNC);
  EXPECT_TRUE(snap.complete_history());
  ASSERT_EQ(snap.allocations_size(), 1);
  EXPECT_EQ(snap.allocations(0).address(), 0x1000u);
  EXPECT_EQ(snap.allocations(0).size(), 64u);
  EXPECT_EQ(snap.allocations(0).device(), 0);
  EXPECT_EQ(snap.allocations(0).stream(), 2u);
  EXPECT_EQ(snap.allocations(0).pool(), 3u);
  EXPECT_EQ(snap.allocations(0).stack_id(), 4u);
  EXPECT_EQ(snap.allocations(0).api(), v1::API_cudaMallocManaged);
  EXPECT_EQ(snap.allocations(0).kind(), v1::MEMORY_KIND_MANAGED);
  ASSERT_EQ(snap.reservations_size(), 1);
  EXPECT_EQ(snap.reservations(0).size(), 1u << 30);
  EXPECT_EQ(snap.reservations(0).device(), -1);
  ASSERT_EQ(snap.handles_size(), 1);
  EXPECT_EQ(snap.handles(0).handle(), 0x77u);
  EXPECT_TRUE(snap.handles(0).imported());
  EXPECT_TRUE(snap.handles(0).released());
  ASSERT_EQ(snap.mappings_size(), 1);
  EXPECT_EQ(snap.mappings(0).offset(), 4096u);
  EXPECT_EQ(snap.mappings(0).handle(), 0x77u);
  ASSERT_EQ(snap.blocks_size(), 1);
  EXPECT_TRUE(snap.blocks(0).pending_free());
  EXPECT_EQ(snap.blocks(0).allocator(), 11u);
  EXPECT_EQ(snap.blocks(0).pool(), 9u);
}

TEST_F(FrameEncoderTest, AFrameThatDoesNotFitLeavesTheWriterUnchanged) {
  uint8_t small[24];
  WireWriter w(small, sizeof(small));
  ASSERT_TRUE(EncodeDrops(w, DropsData{1, 2, 3, 4, DropReason::kRingFull}));
  size_t before = w.size();
  const char* argv[] = {"a-very-long-argument-that-cannot-fit"};
  HelloInfo h;
  h.argv = argv;
  h.argc = 1;
  EXPECT_FALSE(EncodeHello(w, h));
  EXPECT_TRUE(w.ok());
  EXPECT_EQ(w.size(), before);
}

// Event frames have two encoders: the drain thread's unchecked one (when the buffer has room
// for the largest event frame) and the checked one (near the end of a buffer, and for a frame
// whose lengths do not fit one byte each). Both must write what libprotobuf writes for the
// same message, for every record type, with small values and with every field at its widest.
TEST_F(FrameEncoderTest, EventFramesAreWhatLibprotobufWritesOnEitherPath) {
  std::vector<EventRecord> records;
  for (RecordType type :
       {RecordType::kAlloc, RecordType::kFree, RecordType::kMap, RecordType::kHandle,
        RecordType::kFailed, RecordType::kMemInfo, RecordType::kMark, RecordType::kBlock}) {
    EventRecord small = Record(type, Api::k_cudaMalloc);
    small.address = 0x7f0000001000;
    small.size = 256;
    small.op = 1;
    small.label_size = 5;
    memcpy(small.label, "epoch", 5);
    records.push_back(small);
    EventRecord wide;
    memset(&wide, 0xff, sizeof(wide));  // every field at its widest varint (int32 -1: 10 bytes)
    wide.type = type;
    wide.api = Api::k_cudaMallocAsync;
    wide.kind = MemoryKind::kPitched;
    wide.op = 3;
    wide.flags = kFlagInCapture | kFlagHasMemInfo | kFlagSubAllocator;
    wide.label_size = EventRecord::kLabelCapacity;
    records.push_back(wide);
  }
  for (const EventRecord& r : records) {
    SCOPED_TRACE(static_cast<int>(r.type));
    std::vector<uint8_t> roomy(4096);
    WireWriter fast(roomy.data(), roomy.size());
    ASSERT_TRUE(EncodeRecord(fast, r));
    bool ok = false;
    std::vector<v1::Frame> frames = ParseFrames(roomy.data(), fast.size(), &ok);
    ASSERT_TRUE(ok);
    ASSERT_EQ(frames.size(), 1u);
    const std::string body = frames[0].SerializeAsString();
    // The frame is its varint length, then exactly libprotobuf's bytes.
    const size_t prefix = body.size() < 0x80 ? 1 : 2;
    ASSERT_EQ(fast.size(), prefix + body.size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(roomy.data()) + prefix, body.size()), body);
    // A buffer of exactly the frame's size has less room than the largest event frame: the
    // checked path writes it, byte for byte the same.
    std::vector<uint8_t> exact(fast.size());
    WireWriter checked(exact.data(), exact.size());
    ASSERT_TRUE(EncodeRecord(checked, r));
    ASSERT_EQ(checked.size(), fast.size());
    EXPECT_EQ(0, memcmp(exact.data(), roomy.data(), exact.size()));
    // One byte less does not fit, and leaves the writer as it was.
    WireWriter tight(exact.data(), exact.size() - 1);
    EXPECT_FALSE(EncodeRecord(tight, r));
    EXPECT_EQ(tight.size(), 0u);
  }
}

}  // namespace
}  // namespace fragscope::agent
