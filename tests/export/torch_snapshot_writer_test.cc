// The PyTorch snapshot export: its structure as fragscope's restricted reader and Python (all
// globals refused) see it, and a round trip through the snapshot importer that must give the
// same reserved / allocated / cached figures as the trace it came from.
#include "fragscope/export/torch_snapshot_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "export_test_trace.h"
#include "fragscope/model/process_model.h"
#include "fragscope/report/symbolizer.h"
#include "fragscope/torch/pickle_reader.h"
#include "fragscope/torch/snapshot_importer.h"
#include "python_check.h"

namespace fragscope::testing {
namespace {

using exporter::ExportInput;
using exporter::TorchSnapshotStats;
using torch::PickleValue;

std::string Export(const ExportInput& in, TorchSnapshotStats* stats = nullptr) {
  ModuleOffsetSymbolizer symbolizer(in.summary.modules);
  return exporter::WriteTorchSnapshot(in, symbolizer, stats);
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

uint64_t Uint(const PickleValue* v) { return absl::Uint128Low64(absl::uint128(v->int_value())); }

TEST(TorchSnapshotWriterTest, SegmentsAndBlocksAsPyTorchWritesThem) {
  ExportInput in = Capture(ExportTrace().frames());
  TorchSnapshotStats stats;
  auto doc = torch::PickleReader().Parse(Export(in, &stats), "export");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->protocol(), 2);
  const PickleValue* segments = doc->root().Find("segments");
  ASSERT_NE(segments, nullptr);
  ASSERT_EQ(segments->items().size(), 4u);  // A, B, C's mapped range, D
  EXPECT_EQ(stats.segments, 4u);
  EXPECT_EQ(stats.oom_entries, 1u);

  const PickleValue& a = *segments->items()[0];
  EXPECT_EQ(Uint(a.Find("device")), 0u);
  EXPECT_EQ(Uint(a.Find("address")), kSegA);
  EXPECT_EQ(Uint(a.Find("total_size")), 64 * kMiB);
  EXPECT_EQ(Uint(a.Find("allocated_size")), 40 * kMiB);
  EXPECT_EQ(Uint(a.Find("active_size")), 44 * kMiB);  // + the pending free block
  EXPECT_EQ(a.Find("segment_type")->string_value(), "large");
  EXPECT_FALSE(a.Find("is_expandable")->bool_value());
  const PickleValue* blocks = a.Find("blocks");
  ASSERT_EQ(blocks->items().size(), 5u);
  const char* states[] = {"active_allocated", "active_allocated", "inactive", "active_pending_free",
                          "inactive"};
  const uint64_t sizes[] = {8 * kMiB, 32 * kMiB, 8 * kMiB, 4 * kMiB, 12 * kMiB};
  uint64_t cursor = kSegA;
  for (std::size_t i = 0; i < 5; ++i) {
    const PickleValue& b = *blocks->items()[i];
    EXPECT_EQ(b.Find("state")->string_value(), states[i]) << i;
    EXPECT_EQ(Uint(b.Find("size")), sizes[i]) << i;
    EXPECT_EQ(Uint(b.Find("address")), cursor) << i;  // blocks tile the segment
    cursor += sizes[i];
  }
  const PickleValue* frames = blocks->items()[1]->Find("frames");
  ASSERT_EQ(frames->items().size(), 2u);
  EXPECT_EQ(frames->items()[0]->Find("name")->string_value(), "attention");
  EXPECT_EQ(frames->items()[0]->Find("filename")->string_value(), "model.py");
  EXPECT_EQ(Uint(frames->items()[0]->Find("line")), 77u);
  EXPECT_EQ(Uint(a.Find("stream")), 0u);

  const PickleValue& b = *segments->items()[1];
  EXPECT_EQ(b.Find("segment_type")->string_value(), "small");
  ASSERT_EQ(b.Find("blocks")->items().size(), 1u);
  EXPECT_EQ(b.Find("blocks")->items()[0]->Find("state")->string_value(), "active_allocated");

  const PickleValue& c = *segments->items()[2];
  EXPECT_TRUE(c.Find("is_expandable")->bool_value());
  EXPECT_EQ(Uint(c.Find("address")), kSegC);
  EXPECT_EQ(Uint(c.Find("total_size")), 96 * kMiB);  // the mapped range, not the reservation

  EXPECT_EQ(Uint(segments->items()[3]->Find("device")), 1u);

  const PickleValue* traces = doc->root().Find("device_traces");
  ASSERT_EQ(traces->items().size(), 2u);
  ASSERT_EQ(traces->items()[0]->items().size(), 1u);
  EXPECT_TRUE(traces->items()[1]->items().empty());
  const PickleValue& oom = *traces->items()[0]->items()[0];
  EXPECT_EQ(oom.Find("action")->string_value(), "oom");
  EXPECT_EQ(Uint(oom.Find("size")), kOomRequest);
  EXPECT_EQ(Uint(oom.Find("device_free")), kFreeAtOom);  // PyTorch's key; an oom has no addr
  EXPECT_EQ(oom.Find("addr"), nullptr);
  EXPECT_EQ(oom.Find("frames")->items()[0]->Find("name")->string_value(), "allocate_kv_cache");
}

TEST(TorchSnapshotWriterTest, PythonReadsItWithGlobalsRefused) {
  if (!exporter::PythonAvailable()) GTEST_SKIP() << "python3 not found on PATH";
  const std::string path =
      WriteTemp("export_python.pickle", Export(Capture(ExportTrace().frames())));
  exporter::PythonResult r = exporter::RunRestrictedPython(
      path,
      "s = load()\n"
      "segs = s['segments']\n"
      "print(len(segs), sum(x['total_size'] for x in segs) >> 20)\n"
      "print(sum(b['size'] for x in segs for b in x['blocks'] "
      "if b['state'] == 'active_allocated') >> 20)\n"
      "print([t['action'] for d in s['device_traces'] for t in d])\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 64 + 2 + 96 + 4 MiB held; 8 + 32 + 2 + 16 + 16 + 4 MiB allocated.
  EXPECT_EQ(r.output, "4 166\n78\n['oom']\n");
}

TEST(TorchSnapshotWriterTest, RoundTripThroughTheImporterKeepsTheFigures) {
  ExportInput original = Capture(ExportTrace().frames());
  const std::string path = WriteTemp("export_roundtrip.pickle", Export(original));
  auto frames = torch::ImportTorchSnapshotFile(path);
  ASSERT_TRUE(frames.ok()) << frames.status();
  ProcessModel model;
  for (const v1::Frame& f : *frames) model.Apply(f);
  const ModelSummary back = model.Summarize();

  ASSERT_EQ(back.devices.size(), original.summary.devices.size());
  for (std::size_t i = 0; i < back.devices.size(); ++i) {
    const DeviceSummary& o = original.summary.devices[i];
    const DeviceSummary& r = back.devices[i];
    SCOPED_TRACE(::testing::Message() << "device " << o.ordinal);
    EXPECT_EQ(r.ordinal, o.ordinal);
    EXPECT_EQ(r.reserved_bytes, o.reserved_bytes);
    EXPECT_EQ(r.allocated_bytes, o.allocated_bytes);
    EXPECT_EQ(r.cached_bytes, o.cached_bytes);
    EXPECT_EQ(r.pending_free_bytes, o.pending_free_bytes);
    EXPECT_EQ(r.largest_free_range_bytes, o.largest_free_range_bytes);
    EXPECT_EQ(r.segments, o.segments);
  }
  // The figures themselves, by hand: device 0 holds 162 MiB, 74 MiB of it in live blocks.
  EXPECT_EQ(back.devices[0].reserved_bytes, 162 * kMiB);
  EXPECT_EQ(back.devices[0].allocated_bytes, 74 * kMiB);
  EXPECT_EQ(back.devices[0].cached_bytes, 84 * kMiB);
  ASSERT_EQ(back.ooms.size(), 1u);
  EXPECT_EQ(back.ooms[0].failure.requested_bytes, kOomRequest);
  EXPECT_EQ(*back.ooms[0].figures.device_free_bytes.value, kFreeAtOom);
  EXPECT_EQ(back.ooms[0].failure.time_ns, original.summary.ooms[0].failure.time_ns);
}

TEST(TorchSnapshotWriterTest, OpaqueAndPoolMemoryIsLeftOutAndCounted) {
  ExportInput in = Capture(ExportTrace(/*opaque=*/true).frames());
  TorchSnapshotStats stats;
  auto doc = torch::PickleReader().Parse(Export(in, &stats), "export");
  ASSERT_TRUE(doc.ok()) << doc.status();
  // The opaque segment's inside is unknown; writing it as allocated or free would be a claim.
  EXPECT_EQ(doc->root().Find("segments")->items().size(), 4u);
  for (const PickleValue* s : doc->root().Find("segments")->items()) {
    EXPECT_NE(Uint(s->Find("address")), kSegE);
  }
  EXPECT_EQ(stats.opaque_segments_left_out, 1u);
  EXPECT_EQ(stats.opaque_bytes_left_out, 32 * kMiB);
  EXPECT_GE(stats.other_bytes_left_out, 6 * kMiB);  // the pool block, at least
}

}  // namespace
}  // namespace fragscope::testing
