// Real PyTorch snapshots through the whole collector: the model's figures must equal the
// independent figures in tests/torch/data/README.md (computed with Python's pickle, free =
// `inactive` blocks with adjacent ones merged), so imported segments are carved by their
// blocks, never counted as one allocation each.
#include <string>

#include "fragscope/model/process_model.h"
#include "fragscope/torch/snapshot_importer.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

ModelSummary Summarize(const std::string& name) {
  auto frames = torch::ImportTorchSnapshotFile(std::string(FRAGSCOPE_TORCH_TEST_DATA) + "/" + name,
                                               torch::ImportOptions{});
  EXPECT_TRUE(frames.ok()) << frames.status();
  ProcessModel model;
  if (frames.ok()) {
    for (const v1::Frame& f : *frames) model.Apply(f);
  }
  return model.Summarize();
}

const DeviceSummary& Device0(const ModelSummary& s) {
  for (const DeviceSummary& d : s.devices) {
    if (d.ordinal == 0) return d;
  }
  ADD_FAILURE() << "no device 0";
  return s.devices.front();
}

TEST(TorchSnapshotModel, CurrentFormatFiguresMatchTheIndependentOnes) {
  ModelSummary s = Summarize("current-format.pickle");
  const DeviceSummary& d = Device0(s);
  EXPECT_EQ(d.reserved_bytes, 5475663872u);
  EXPECT_EQ(d.cached_bytes, 1627558912u);  // inactive bytes
  EXPECT_EQ(d.allocated_bytes + d.cached_bytes + d.pending_free_bytes, d.reserved_bytes);
  EXPECT_EQ(d.largest_free_range_bytes, 134217728u);
  EXPECT_EQ(d.opaque_segments, 0u);
  EXPECT_EQ(d.exact_segments, 0u) << "every PyTorch segment is carved by its blocks";
  ASSERT_TRUE(d.fragmentation.known()) << d.fragmentation.unknown_reason;
  EXPECT_DOUBLE_EQ(*d.fragmentation.value, 1.0 - 134217728.0 / 1627558912.0);
  EXPECT_TRUE(s.imported);
  EXPECT_TRUE(s.stream_ended);
  EXPECT_FALSE(d.untracked_bytes.known());
  EXPECT_NE(d.untracked_bytes.unknown_reason.find("imported allocator snapshot"), std::string::npos)
      << d.untracked_bytes.unknown_reason;
}

TEST(TorchSnapshotModel, LegacyFormatFiguresMatchTheIndependentOnes) {
  ModelSummary s = Summarize("legacy-history-oom.pickle");
  const DeviceSummary& d = Device0(s);
  EXPECT_EQ(d.reserved_bytes, 11844714496u);
  EXPECT_EQ(d.cached_bytes, 4554752u);
  EXPECT_FALSE(d.fragmentation.known()) << "4.3 MiB cached is under the 64 MiB floor";
}

}  // namespace
}  // namespace fragscope
