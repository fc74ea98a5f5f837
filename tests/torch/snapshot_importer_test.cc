// TorchSnapshotImporter on the two real snapshots (figures from tests/torch/data/README.md,
// computed independently with Python) and on small synthetic snapshots assembled here with a
// minimal pickle encoder, whose expected figures follow from the hand-chosen layout.
#include "fragscope/torch/snapshot_importer.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fragscope/trace/trace_format.h"

namespace fragscope::torch {
namespace {

const std::string kData = FRAGSCOPE_TORCH_TEST_DATA;
constexpr uint64_t kMiB = 1 << 20;

// --- A minimal pickle encoder for synthetic snapshots (protocol 4 opcodes) -------------------

std::string Str(const std::string& s) {
  std::string out;
  if (s.size() < 256) {
    out = {'\x8c', static_cast<char>(s.size())};
  } else {
    out = {'X'};
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(s.size() >> (8 * i)));
  }
  return out + s;
}
std::string Int(int64_t v) {  // LONG1 with 8 bytes of two's complement
  std::string out = {'\x8a', 8};
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(static_cast<uint64_t>(v) >> (8 * i)));
  return out;
}
std::string Bool(bool b) { return b ? "\x88" : "\x89"; }
std::string List(const std::vector<std::string>& items) {
  std::string out = "]";
  if (items.empty()) return out;
  out += "(";
  for (const std::string& i : items) out += i;
  return out + "e";
}
std::string Tuple(const std::vector<std::string>& items) {
  std::string out = "(";
  for (const std::string& i : items) out += i;
  return out + "t";
}
std::string Dict(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string out = "}(";
  for (const auto& [k, v] : kv) out += Str(k) + v;
  return out + "u";
}
std::string Pickle(const std::string& body) { return std::string("\x80\x04", 2) + body + "."; }

std::string Frame(const std::string& name, const std::string& file, int line) {
  return Dict({{"name", Str(name)}, {"filename", Str(file)}, {"line", Int(line)}});
}
std::string Block(const std::string& state, uint64_t size, int64_t address,
                  const std::string& frames = List({})) {
  std::vector<std::pair<std::string, std::string>> kv = {{"size", Int(size)},
                                                         {"requested_size", Int(size)},
                                                         {"state", Str(state)},
                                                         {"frames", frames}};
  if (address >= 0) kv.insert(kv.begin(), {"address", Int(address)});
  return Dict(kv);
}

// --- helpers ---------------------------------------------------------------------------------

ImportResult MustImport(const std::string& bytes, ImportOptions options = {}) {
  absl::StatusOr<ImportResult> r = ImportTorchSnapshotBytes(bytes, "synthetic.pickle", options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : ImportResult{};
}

const v1::Snapshot* FindSnapshot(const ImportResult& r) {
  for (const v1::Frame& f : r.frames) {
    if (f.has_snapshot()) return &f.snapshot();
  }
  return nullptr;
}

std::vector<const v1::FailedAlloc*> FailedAllocs(const ImportResult& r) {
  std::vector<const v1::FailedAlloc*> out;
  for (const v1::Frame& f : r.frames) {
    if (f.has_failed()) out.push_back(&f.failed());
  }
  return out;
}

const v1::SymbolizedStack* FindStack(const ImportResult& r, uint64_t id) {
  for (const v1::Frame& f : r.frames) {
    if (f.has_symbolized_stack() && f.symbolized_stack().id() == id) return &f.symbolized_stack();
  }
  return nullptr;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every block lies inside one segment (allocation or mapped reservation) of its device, and no
// two blocks overlap.
void ExpectBlocksInsideSegments(const v1::Snapshot& s, bool check_overlap = true) {
  struct Range {
    int32_t device;
    uint64_t begin, end;
  };
  std::vector<Range> segments;
  for (const auto& a : s.allocations()) {
    segments.push_back({a.device(), a.address(), a.address() + a.size()});
  }
  for (const auto& r : s.reservations()) {
    segments.push_back({r.device(), r.address(), r.address() + r.size()});
  }
  std::vector<Range> blocks;
  for (const auto& b : s.blocks()) {
    blocks.push_back({b.device(), b.address(), b.address() + b.size()});
    const bool inside = std::any_of(segments.begin(), segments.end(), [&](const Range& seg) {
      return seg.device == b.device() && seg.begin <= b.address() &&
             b.address() + b.size() <= seg.end;
    });
    EXPECT_TRUE(inside) << "block at 0x" << std::hex << b.address();
  }
  if (!check_overlap) return;
  std::sort(blocks.begin(), blocks.end(), [](const Range& a, const Range& b) {
    return std::tie(a.device, a.begin) < std::tie(b.device, b.begin);
  });
  for (size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i].device == blocks[i - 1].device) {
      EXPECT_LE(blocks[i - 1].end, blocks[i].begin) << "overlapping blocks";
    }
  }
}

void ExpectFramesRoundTrip(const std::vector<v1::Frame>& frames) {
  for (const v1::Frame& f : frames) {
    std::string wire;
    ASSERT_TRUE(f.SerializeToString(&wire));
    v1::Frame back;
    ASSERT_TRUE(back.ParseFromString(wire));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(f, back)) << f.DebugString();
  }
}

// --- Real snapshots --------------------------------------------------------------------------

TEST(TorchSnapshotImport, CurrentFormatMatchesIndependentFigures) {
  absl::StatusOr<ImportResult> r =
      ImportTorchSnapshotFileWithSummary(kData + "/current-format.pickle");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->format, SnapshotFormat::kCurrent);
  EXPECT_TRUE(r->warnings.empty());
  // device_traces lists two devices; only device 0 holds segments.
  ASSERT_EQ(r->devices.size(), 2u);
  const DeviceSummary& d0 = r->devices.at(0);
  EXPECT_EQ(d0.segment_count, 368u);
  EXPECT_EQ(d0.reserved_bytes, 5475663872u);  // README
  EXPECT_EQ(d0.inactive_bytes, 1627558912u);  // README
  EXPECT_EQ(d0.allocated_bytes + d0.pending_free_bytes + d0.inactive_bytes, d0.reserved_bytes);
  // Computed with Python while preparing this test (largest run of adjacent inactive blocks).
  EXPECT_EQ(d0.largest_inactive_range, 134217728u);
  EXPECT_EQ(d0.oom_count, 0u);
  const DeviceSummary& d1 = r->devices.at(1);
  EXPECT_EQ(d1.segment_count, 0u);
  EXPECT_EQ(d1.reserved_bytes, 0u);

  ASSERT_FALSE(r->frames.empty());
  ASSERT_TRUE(r->frames[0].has_hello());
  EXPECT_EQ(r->frames[0].hello().backend(), v1::Hello::BACKEND_IMPORTED);
  const v1::Snapshot* s = FindSnapshot(*r);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->reason(), v1::Snapshot::REASON_IMPORTED);
  ASSERT_EQ(s->allocations_size(), 368);
  uint64_t reserved = 0, live = 0;
  for (const auto& a : s->allocations()) {
    reserved += a.size();
    EXPECT_EQ(a.api(), v1::API_torch_snapshot);
    EXPECT_EQ(a.kind(), v1::MEMORY_KIND_DEVICE);
  }
  for (const auto& b : s->blocks()) live += b.size();
  EXPECT_EQ(reserved, d0.reserved_bytes);
  EXPECT_EQ(live, d0.allocated_bytes + d0.pending_free_bytes);
  EXPECT_EQ(static_cast<uint64_t>(s->blocks_size()), d0.active_block_count);
  ExpectBlocksInsideSegments(*s);
  EXPECT_TRUE(FailedAllocs(*r).empty());
  ExpectFramesRoundTrip(r->frames);
}

TEST(TorchSnapshotImport, LegacyHistoryFormatMatchesIndependentFigures) {
  absl::StatusOr<ImportResult> r =
      ImportTorchSnapshotFileWithSummary(kData + "/legacy-history-oom.pickle");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->format, SnapshotFormat::kLegacyHistory);
  EXPECT_TRUE(r->warnings.empty()) << r->warnings.front();  // history addrs agree with the walk
  ASSERT_EQ(r->devices.size(), 1u);
  const DeviceSummary& d0 = r->devices.at(0);
  EXPECT_EQ(d0.segment_count, 176u);
  EXPECT_EQ(d0.reserved_bytes, 11844714496u);  // README
  EXPECT_EQ(d0.inactive_bytes, 4554752u);      // README
  // The file's only trace entry is {'action': 'snapshot', 'size': 11840159744}: PyTorch's own
  // count of allocated bytes at the dump. It holds no 'oom' entry, so no FailedAlloc comes out.
  EXPECT_EQ(d0.allocated_bytes, 11840159744u);
  EXPECT_EQ(d0.trace_entry_count, 1u);
  EXPECT_EQ(d0.oom_count, 0u);
  EXPECT_TRUE(FailedAllocs(*r).empty());

  const v1::Snapshot* s = FindSnapshot(*r);
  ASSERT_NE(s, nullptr);
  ASSERT_GT(s->blocks_size(), 0);
  ExpectBlocksInsideSegments(*s);
  // First segment's first block: walked address = segment address; its history frames survive.
  const v1::LiveBlock& first = s->blocks(0);
  EXPECT_EQ(first.address(), 140037408686080u);
  EXPECT_EQ(first.size(), 33554432u);
  const v1::SymbolizedStack* stack = FindStack(*r, first.stack_id());
  ASSERT_NE(stack, nullptr);
  ASSERT_EQ(stack->frames_size(), 10);
  EXPECT_EQ(stack->frames(0).function(), "allocate");
  EXPECT_EQ(stack->frames(0).file(), "/home/dingyiran/FlexGen/flexgen/pytorch_backend.py");
  EXPECT_EQ(stack->frames(0).line(), 190u);
  EXPECT_GT(r->stack_count, 1u);
  ExpectFramesRoundTrip(r->frames);
}

TEST(TorchSnapshotImport, FileEntryPointReturnsTheSameFrames) {
  const std::string path = kData + "/legacy-history-oom.pickle";
  absl::StatusOr<std::vector<v1::Frame>> frames = ImportTorchSnapshotFile(path, {});
  ASSERT_TRUE(frames.ok()) << frames.status();
  absl::StatusOr<ImportResult> full = ImportTorchSnapshotFileWithSummary(path);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(frames->size(), full->frames.size());
  for (size_t i = 0; i < frames->size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals((*frames)[i], full->frames[i]));
  }
  absl::StatusOr<std::vector<v1::Frame>> missing =
      ImportTorchSnapshotFile(kData + "/missing.pickle", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.pickle"), std::string::npos);
}

TEST(TorchSnapshotImport, StacksCanBeLeftOut) {
  ImportOptions options;
  options.include_stacks = false;
  absl::StatusOr<ImportResult> r =
      ImportTorchSnapshotFileWithSummary(kData + "/legacy-history-oom.pickle", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stack_count, 0u);
  for (const v1::Frame& f : r->frames) EXPECT_FALSE(f.has_symbolized_stack());
  for (const auto& b : FindSnapshot(*r)->blocks()) EXPECT_EQ(b.stack_id(), 0u);
}

// --- Synthetic snapshots ---------------------------------------------------------------------

// Device 1: a cudaMalloc segment of 6 MiB laid out as
//   [1 MiB allocated][1 MiB free][1.5 MiB free][0.5 MiB pending][2 MiB free]
// and an expandable 20 MiB mapped range holding one block awaiting free (older spelling), in
// PyTorch pool (5, 0). Device 0: a legacy segment (no block addresses) of 3 MiB allocated +
// 1 MiB free, and an OOM trace entry.
std::string SyntheticSnapshot() {
  const std::string stack_fg = List({Frame("f", "m.py", 10), Frame("g", "m.py", 20)});
  const uint64_t a = 0x10000000;
  const std::string seg_a = Dict({
      {"device", Int(1)},
      {"address", Int(a)},
      {"total_size", Int(6 * kMiB)},
      {"stream", Int(7)},
      {"segment_type", Str("large")},
      {"segment_pool_id", Tuple({Int(0), Int(0)})},
      {"is_expandable", Bool(false)},
      {"frames", List({Frame("seg_alloc", "a.py", 3)})},
      {"blocks",
       List({Block("active_allocated", kMiB, a, stack_fg), Block("inactive", kMiB, a + kMiB),
             Block("inactive", 3 * kMiB / 2, a + 2 * kMiB),
             Block("active_pending_free", kMiB / 2, a + 7 * kMiB / 2),
             Block("inactive", 2 * kMiB, a + 4 * kMiB)})},
  });
  const uint64_t b = 0x20000000;
  const std::string seg_b = Dict({
      {"device", Int(1)},
      {"address", Int(b)},
      {"total_size", Int(20 * kMiB)},
      {"stream", Int(0)},
      {"segment_pool_id", Tuple({Int(5), Int(0)})},
      {"is_expandable", Bool(true)},
      {"blocks", List({Block("active_awaiting_free", 20 * kMiB, b, stack_fg)})},
  });
  const uint64_t c = 0x30000000;
  const std::string history = List({Dict({{"addr", Int(c)},
                                          {"real_size", Int(3 * kMiB)},
                                          {"frames", List({Frame("legacy", "l.py", 5)})}})});
  const std::string seg_c = Dict({
      {"device", Int(0)},
      {"address", Int(c)},
      {"total_size", Int(4 * kMiB)},
      {"stream", Int(0)},
      {"segment_type", Str("large")},
      {"blocks", List({Dict({{"size", Int(3 * kMiB)},
                             {"requested_size", Int(3 * kMiB)},
                             {"state", Str("active_allocated")},
                             {"history", history}}),
                       Dict({{"size", Int(kMiB)},
                             {"requested_size", Int(kMiB)},
                             {"state", Str("inactive")}})})},
  });
  const std::string traces = List({
      // An entry that changes no memory (an alloc would make the import replay the history:
      // export_history_test covers that).
      List({Dict({{"action", Str("snapshot")},
                  {"addr", Int(c)},
                  {"size", Int(3 * kMiB)},
                  {"stream", Int(0)},
                  {"time_us", Int(500)}}),
            Dict({{"action", Str("oom")},
                  {"addr", Int(123456)},
                  {"size", Int(8 * kMiB)},
                  {"stream", Int(7)},
                  {"time_us", Int(1000)},
                  {"frames", List({Frame("forward", "model.py", 42)})}})}),
      List({}),
      List({}),
  });
  return Pickle(Dict({{"segments", List({seg_a, seg_b, seg_c})}, {"device_traces", traces}}));
}

TEST(TorchSnapshotImport, SyntheticSummaryFollowsTheLayout) {
  ImportResult r = MustImport(SyntheticSnapshot());
  EXPECT_EQ(r.format, SnapshotFormat::kLegacyHistory);
  EXPECT_TRUE(r.warnings.empty());
  ASSERT_EQ(r.devices.size(), 3u);
  const DeviceSummary& d1 = r.devices.at(1);
  EXPECT_EQ(d1.segment_count, 2u);
  EXPECT_EQ(d1.expandable_segment_count, 1u);
  EXPECT_EQ(d1.reserved_bytes, 26 * kMiB);
  EXPECT_EQ(d1.allocated_bytes, kMiB);
  EXPECT_EQ(d1.pending_free_bytes, kMiB / 2 + 20 * kMiB);
  EXPECT_EQ(d1.inactive_bytes, 9 * kMiB / 2);
  EXPECT_EQ(d1.largest_inactive_range, 5 * kMiB / 2);  // the two adjacent free blocks
  EXPECT_EQ(d1.active_block_count, 3u);
  EXPECT_EQ(d1.inactive_block_count, 3u);
  const DeviceSummary& d0 = r.devices.at(0);
  EXPECT_EQ(d0.reserved_bytes, 4 * kMiB);
  EXPECT_EQ(d0.allocated_bytes, 3 * kMiB);
  EXPECT_EQ(d0.inactive_bytes, kMiB);
  EXPECT_EQ(d0.largest_inactive_range, kMiB);
  EXPECT_EQ(d0.trace_entry_count, 2u);
  EXPECT_EQ(d0.oom_count, 1u);
  EXPECT_EQ(r.devices.at(2).reserved_bytes, 0u);
}

// PyTorch's own capture frames and the interpreter's call machinery are left out of the sites,
// as PyTorch's memory viewer leaves them out; a stack of nothing else is no stack.
TEST(TorchSnapshotImport, CaptureMachineryFramesAreLeftOut) {
  const uint64_t a = 0x10000000;
  const std::string mixed =
      List({Frame("torch::unwind::unwind()", "??", 0),
            Frame("torch::CapturedTraceback::gather(bool, bool, bool)", "??", 0),
            Frame("forward", "model.py", 42), Frame("_PyEval_EvalFrameDefault", "ceval.c", 4200),
            Frame("call", "/usr/include/python3.11/cpython/abstract.h", 114),
            Frame("main", "train.py", 7), Frame("__libc_start_main", "??", 0)});
  const std::string only_machinery =
      List({Frame("torch::unwind::unwind()", "??", 0), Frame("_start", "??", 0)});
  const std::string segment = Dict({
      {"device", Int(0)},
      {"address", Int(a)},
      {"total_size", Int(4 * kMiB)},
      {"stream", Int(0)},
      {"segment_type", Str("large")},
      {"blocks", List({Block("active_allocated", 2 * kMiB, a, mixed),
                       Block("active_allocated", 2 * kMiB, a + 2 * kMiB, only_machinery)})},
  });
  ImportResult r = MustImport(Pickle(Dict({{"segments", List({segment})}})));
  const v1::Snapshot* snapshot = nullptr;
  for (const v1::Frame& f : r.frames) {
    if (f.has_snapshot()) snapshot = &f.snapshot();
  }
  ASSERT_NE(snapshot, nullptr);
  ASSERT_EQ(snapshot->blocks_size(), 2);
  const v1::SymbolizedStack* kept = FindStack(r, snapshot->blocks(0).stack_id());
  ASSERT_NE(kept, nullptr);
  ASSERT_EQ(kept->frames_size(), 2);
  EXPECT_EQ(kept->frames(0).function(), "forward");
  EXPECT_EQ(kept->frames(1).function(), "main");
  EXPECT_EQ(kept->frames(1).file(), "train.py");
  EXPECT_EQ(snapshot->blocks(1).stack_id(), 0u);
}

TEST(TorchSnapshotImport, SyntheticFramesDescribeSegmentsBlocksAndOom) {
  ImportResult r = MustImport(SyntheticSnapshot());
  // Order: Hello, DeviceInfo x3, stacks, Snapshot, FailedAlloc, End.
  ASSERT_GE(r.frames.size(), 7u);
  ASSERT_TRUE(r.frames.back().has_end()) << "a complete conversion is not a cut stream";
  r.frames.pop_back();
  EXPECT_TRUE(r.frames[0].has_hello());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(r.frames[1 + i].has_device());
    EXPECT_EQ(r.frames[1 + i].device().ordinal(), i);
  }
  // Distinct stacks: seg_alloc, f/g (shared by two blocks), legacy, forward.
  EXPECT_EQ(r.stack_count, 4u);
  ASSERT_TRUE(r.frames.back().has_failed());
  ASSERT_TRUE(r.frames[r.frames.size() - 2].has_snapshot());

  const v1::Snapshot& s = r.frames[r.frames.size() - 2].snapshot();
  EXPECT_EQ(s.seq(), 1u);
  ASSERT_EQ(s.allocations_size(), 2);  // segments A and C
  EXPECT_EQ(s.allocations(0).address(), 0x10000000u);
  EXPECT_EQ(s.allocations(0).size(), 6 * kMiB);
  EXPECT_EQ(s.allocations(0).device(), 1);
  EXPECT_EQ(s.allocations(0).stream(), 7u);
  EXPECT_TRUE(s.allocations(0).sub_allocated()) << "PyTorch lists every block of its segments";
  const v1::SymbolizedStack* seg_stack = FindStack(r, s.allocations(0).stack_id());
  ASSERT_NE(seg_stack, nullptr);
  EXPECT_EQ(seg_stack->frames(0).function(), "seg_alloc");
  // Expandable segment B: reservation + handle + mapping of the same 20 MiB.
  ASSERT_EQ(s.reservations_size(), 1);
  ASSERT_EQ(s.handles_size(), 1);
  ASSERT_EQ(s.mappings_size(), 1);
  EXPECT_EQ(s.reservations(0).address(), 0x20000000u);
  EXPECT_EQ(s.reservations(0).size(), 20 * kMiB);
  EXPECT_EQ(s.handles(0).size(), 20 * kMiB);
  EXPECT_EQ(s.handles(0).device(), 1);
  EXPECT_EQ(s.mappings(0).handle(), s.handles(0).handle());
  EXPECT_EQ(s.mappings(0).address(), 0x20000000u);
  EXPECT_EQ(s.mappings(0).size(), 20 * kMiB);

  // Blocks: A allocated, A pending, B pending, C allocated (walked address). No inactive ones.
  ASSERT_EQ(s.blocks_size(), 4);
  EXPECT_EQ(s.blocks(0).address(), 0x10000000u);
  EXPECT_FALSE(s.blocks(0).pending_free());
  EXPECT_EQ(s.blocks(0).pool(), 0u);
  EXPECT_EQ(s.blocks(1).address(), 0x10000000u + 7 * kMiB / 2);
  EXPECT_TRUE(s.blocks(1).pending_free());
  EXPECT_EQ(s.blocks(2).address(), 0x20000000u);
  EXPECT_TRUE(s.blocks(2).pending_free());
  EXPECT_EQ(s.blocks(2).pool(), 1u);  // PyTorch pool (5, 0): the first non-default pool
  EXPECT_EQ(s.blocks(3).address(), 0x30000000u);
  EXPECT_EQ(s.blocks(3).device(), 0);
  // Same frames -> same stack id, and the frames survive with names, files and lines.
  EXPECT_NE(s.blocks(0).stack_id(), 0u);
  EXPECT_EQ(s.blocks(0).stack_id(), s.blocks(2).stack_id());
  const v1::SymbolizedStack* fg = FindStack(r, s.blocks(0).stack_id());
  ASSERT_NE(fg, nullptr);
  ASSERT_EQ(fg->frames_size(), 2);
  EXPECT_EQ(fg->frames(1).function(), "g");
  EXPECT_EQ(fg->frames(1).file(), "m.py");
  EXPECT_EQ(fg->frames(1).line(), 20u);
  EXPECT_EQ(s.blocks(1).stack_id(), 0u);  // empty frames list
  const v1::SymbolizedStack* legacy = FindStack(r, s.blocks(3).stack_id());
  ASSERT_NE(legacy, nullptr);
  EXPECT_EQ(legacy->frames(0).function(), "legacy");
  ExpectBlocksInsideSegments(s);

  const v1::FailedAlloc& oom = r.frames.back().failed();
  EXPECT_EQ(oom.seq(), 2u);
  EXPECT_EQ(oom.time_ns(), 1000u * 1000u);
  EXPECT_EQ(oom.api(), v1::API_torch_snapshot);
  EXPECT_EQ(oom.size(), 8 * kMiB);
  EXPECT_EQ(oom.device(), 0);
  EXPECT_EQ(oom.stream(), 7u);
  EXPECT_TRUE(oom.from_sub_allocator());
  EXPECT_TRUE(oom.has_mem_info());
  EXPECT_EQ(oom.device_free_bytes(), 123456u);
  const v1::SymbolizedStack* oom_stack = FindStack(r, oom.stack_id());
  ASSERT_NE(oom_stack, nullptr);
  EXPECT_EQ(oom_stack->frames(0).function(), "forward");
  EXPECT_EQ(oom_stack->frames(0).line(), 42u);
  ExpectFramesRoundTrip(r.frames);
}

TEST(TorchSnapshotImport, UnknownStateIsKeptAsAllocatedWithAWarning) {
  const std::string bytes = Pickle(
      Dict({{"segments", List({Dict({{"device", Int(0)},
                                     {"address", Int(4096)},
                                     {"total_size", Int(2 * kMiB)},
                                     {"blocks", List({Block("mystery", 2 * kMiB, 4096)})}})})}}));
  ImportResult r = MustImport(bytes);
  EXPECT_EQ(r.devices.at(0).allocated_bytes, 2 * kMiB);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("'mystery'"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("segments[0].blocks[0]"), std::string::npos) << r.warnings[0];
}

TEST(TorchSnapshotImport, BlocksThatDoNotAddUpAreReported) {
  const std::string bytes =
      Pickle(Dict({{"segments", List({Dict({{"device", Int(0)},
                                            {"address", Int(4096)},
                                            {"total_size", Int(2 * kMiB)},
                                            {"blocks", List({Block("inactive", kMiB, -1)})}})})}}));
  ImportResult r = MustImport(bytes);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("add up to 1048576 bytes but total_size is 2097152"),
            std::string::npos)
      << r.warnings[0];
}

TEST(TorchSnapshotImport, BadSnapshotsGiveErrorsNamingThePlace) {
  auto seg = [](const std::string& blocks, const std::string& total = Int(2 * kMiB)) {
    return Pickle(Dict({{"segments", List({Dict({{"device", Int(0)},
                                                 {"address", Int(4096)},
                                                 {"total_size", total},
                                                 {"blocks", blocks}})})}}));
  };
  struct Case {
    std::string bytes;
    std::string expected;
  };
  const Case cases[] = {
      {Pickle(Int(3)), "<top level>: expected a dict"},  // a list is memory_snapshot()'s
      {Pickle(Dict({{"device_traces", List({})}})), "no 'segments' key"},
      {Pickle(Dict({{"segments", Dict({})}})), "segments: expected list, got dict"},
      {Pickle(Dict({{"segments", List({Dict({{"device", Int(0)}, {"address", Int(0)}})})}})),
       "segments[0]: missing required key 'total_size'"},
      {seg(List({Block("inactive", kMiB, 4096), Block("inactive", 2 * kMiB, 4096 + kMiB)})),
       "segments[0].blocks[1]: block [0x101000, +2097152) lies outside its segment"},
      {seg(List({Dict({{"size", Str("big")}, {"state", Str("inactive")}})})),
       "segments[0].blocks[0].size: expected int, got str"},
      {seg(List({Block("inactive", kMiB, 4096 + kMiB), Block("inactive", kMiB, 4096)})),
       "segments[0].blocks[1]: block at 0x1000 overlaps the previous block"},
      {seg(List({}), Int(-5)), "segments[0].total_size: expected a non-negative int, got -5"},
      {seg(List({Dict({{"size", Int(kMiB)}})})),
       "segments[0].blocks[0]: missing required key "
       "'state'"},
      {seg(List({Block("active_allocated", kMiB, 4096, List({Int(3)}))})),
       "segments[0].blocks[0].frames[0]: expected dict, got int"},
      {Pickle(Dict({{"segments", List({})}, {"device_traces", List({List({Dict({})})})}})),
       "device_traces[0][0]: missing required key 'action'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ImportResult> r = ImportTorchSnapshotBytes(c.bytes, "bad.pickle", {});
    ASSERT_FALSE(r.ok()) << c.expected;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("bad.pickle: "), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << r.status();
  }
}

// Fuzz finding memo-amplification-3000: the pickle memo lets one segment dict be listed
// thousands of times, one byte per repeat, and one empty block thousands of times inside it.
// The importer emitted a LiveBlock per reference (9 million from 12 KB). A segment listed twice,
// two segments sharing bytes and empty blocks are malformed; each is refused, naming the place.
TEST(TorchSnapshotImport, RepeatedOrOverlappingSegmentsAndEmptyBlocksAreRefused) {
  const uint64_t a = 0x7f0000000000;
  auto segment = [](uint64_t address, uint64_t total, const std::string& blocks) {
    return Dict({{"device", Int(0)},
                 {"address", Int(address)},
                 {"total_size", Int(total)},
                 {"blocks", blocks}});
  };
  const std::string block = Block("active_allocated", kMiB, a);
  // MEMOIZE (0x94) the segment once, then BINGET (h, index 0) it twice more.
  const std::string kBinGet0("h\0", 2);
  const std::string memo_segments =
      "](" + segment(a, 2 * kMiB, List({block})) + "\x94" + kBinGet0 + kBinGet0 + "e";
  struct Case {
    std::string bytes;
    std::string expected;
  };
  const Case cases[] = {
      {Pickle(Dict({{"segments", memo_segments}})),
       "segments[1]: segment address 0x7f0000000000 repeats segments[0] on device 0"},
      {Pickle(Dict({{"segments", List({segment(a, 2 * kMiB, List({})),
                                       segment(a + kMiB, 2 * kMiB, List({}))})}})),
       "segments[1]: segment [0x7f0000100000, +2097152) overlaps segments[0] "
       "[0x7f0000000000, +2097152) on device 0"},
      {Pickle(Dict({{"segments", List({segment(a + kMiB, 2 * kMiB, List({})),
                                       segment(a, 2 * kMiB, List({}))})}})),
       "segments[1]: segment [0x7f0000000000, +2097152) overlaps segments[0] "
       "[0x7f0000100000, +2097152) on device 0"},
      {Pickle(
           Dict({{"segments", List({segment(a, 0, List({Block("active_allocated", 0, -1)}))})}})),
       "segments[0].blocks[0].size: a block of 0 bytes is malformed"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ImportResult> r = ImportTorchSnapshotBytes(c.bytes, "bad.pickle", {});
    ASSERT_FALSE(r.ok()) << c.expected;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("bad.pickle: " + c.expected), std::string::npos)
        << r.status();
  }
  // Adjacent segments share no byte: fine.
  MustImport(Pickle(Dict({{"segments", List({segment(a, 2 * kMiB, List({block})),
                                             segment(a + 2 * kMiB, 2 * kMiB, List({}))})}})));
}

TEST(TorchSnapshotImport, EntryLimitIsEnforcedWithAnErrorSayingHowToRaiseIt) {
  // The synthetic snapshot lists 9 entries: a plain segment with 2 active blocks (3), an
  // expandable one with 1 (reservation + handle + mapping + block: 4), a legacy one with 1 (2).
  ImportOptions options;
  options.max_snapshot_entries = 9;
  MustImport(SyntheticSnapshot(), options);
  options.max_snapshot_entries = 8;
  absl::StatusOr<ImportResult> r = ImportTorchSnapshotBytes(SyntheticSnapshot(), "big", options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(
      r.status().message().find("big: segments[2].blocks[0]: the snapshot lists more than 8 blocks "
                                "and segments"),
      std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("ImportOptions::max_snapshot_entries"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("raise it"), std::string::npos) << r.status();
}

// The default limit exists so one Snapshot frame fits the trace format: check it against the
// largest encoding of every kind of entry the importer writes (every integer at its widest;
// device ordinals are at most 2^20).
TEST(TorchSnapshotImport, DefaultEntryLimitKeepsTheSnapshotFrameUnderTheFrameLimit) {
  constexpr uint64_t kMax = ~uint64_t{0};
  constexpr int32_t kMaxDevice = 1 << 20;
  auto bytes_per_entry = [](const v1::Snapshot& s, int entries) {
    v1::Frame f;
    *f.mutable_snapshot() = s;
    return static_cast<double>(f.ByteSizeLong()) / entries;
  };
  v1::Snapshot block;
  v1::LiveBlock* b = block.add_blocks();
  b->set_address(kMax);
  b->set_size(kMax);
  b->set_device(kMaxDevice);
  b->set_stream(kMax);
  b->set_pool(kMax);
  b->set_stack_id(kMax);
  b->set_pending_free(true);
  v1::Snapshot plain;
  v1::LiveAllocation* a = plain.add_allocations();
  a->set_address(kMax);
  a->set_size(kMax);
  a->set_device(kMaxDevice);
  a->set_stream(kMax);
  a->set_stack_id(kMax);
  a->set_api(v1::API_torch_snapshot);
  a->set_kind(v1::MEMORY_KIND_DEVICE);
  a->set_sub_allocated(true);
  v1::Snapshot expandable;
  v1::LiveReservation* res = expandable.add_reservations();
  res->set_address(kMax);
  res->set_size(kMax);
  res->set_device(kMaxDevice);
  res->set_stack_id(kMax);
  res->set_sub_allocated(true);
  v1::LiveHandle* h = expandable.add_handles();
  h->set_handle(kMax);
  h->set_size(kMax);
  h->set_device(kMaxDevice);
  h->set_stack_id(kMax);
  v1::LiveMapping* m = expandable.add_mappings();
  m->set_address(kMax);
  m->set_size(kMax);
  m->set_handle(kMax);
  const double worst = std::max(
      {bytes_per_entry(block, 1), bytes_per_entry(plain, 1), bytes_per_entry(expandable, 3)});
  v1::Snapshot header;  // the frame's own fields, counted once
  header.set_seq(kMax);
  header.set_time_ns(kMax);
  header.set_reason(v1::Snapshot::REASON_IMPORTED);
  const double frame = static_cast<double>(ImportOptions{}.max_snapshot_entries) * worst +
                       bytes_per_entry(header, 1) + 16;  // + the Frame's length prefixes
  EXPECT_LT(frame, static_cast<double>(kMaxFrameBytes)) << worst << " bytes per entry";
}

TEST(TorchSnapshotImport, CorruptedRealSnapshotsNeverCrash) {
  for (const char* name : {"/current-format.pickle", "/legacy-history-oom.pickle"}) {
    const std::string original = ReadFile(kData + name);
    ASSERT_FALSE(original.empty());
    std::mt19937_64 rng(777);
    int imported = 0;
    for (int iteration = 0; iteration < 300; ++iteration) {
      std::string bytes = original;
      for (int f = 0; f < 2; ++f) bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
      absl::StatusOr<ImportResult> r = ImportTorchSnapshotBytes(bytes, name, {});
      if (r.ok()) {
        ++imported;
        ExpectBlocksInsideSegments(*FindSnapshot(*r), /*check_overlap=*/false);
      } else {
        EXPECT_FALSE(r.status().message().empty());
      }
    }
    EXPECT_GT(imported, 0) << name;
  }
}

}  // namespace
}  // namespace fragscope::torch
