// ProcessModel::SegmentLayouts and CaptureExportInput against the hand-built layout of
// export_test_trace.h.
#include <gtest/gtest.h>

#include "export_test_trace.h"
#include "fragscope/export/export_input.h"

namespace fragscope::testing {
namespace {

TEST(SegmentLayoutsTest, ReproducesTheHandBuiltLayout) {
  exporter::ExportInput in = Capture(ExportTrace().frames());
  ASSERT_EQ(in.segments.size(), 2u);
  const std::vector<SegmentLayout>& d0 = in.segments.at(0);
  ASSERT_EQ(d0.size(), 3u);

  const SegmentLayout& a = d0[0];
  EXPECT_EQ(a.base, kSegA);
  EXPECT_EQ(a.size, 64 * kMiB);
  EXPECT_EQ(a.coverage, Coverage::kAnnotated);
  EXPECT_FALSE(a.vmm_reservation);
  ASSERT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(a.blocks[1].address, kSegA + 8 * kMiB);
  EXPECT_EQ(a.blocks[1].size, 32 * kMiB);
  EXPECT_EQ(a.blocks[1].stack_id, 2u);
  EXPECT_EQ(a.blocks[1].stream, 7u);
  EXPECT_TRUE(a.blocks[2].pending_free);
  ASSERT_EQ(a.free_ranges.size(), 2u);
  EXPECT_EQ(a.free_ranges[0].address, kSegA + 40 * kMiB);
  EXPECT_EQ(a.free_ranges[0].size, 8 * kMiB);
  EXPECT_EQ(a.free_ranges[1].size, 12 * kMiB);

  const SegmentLayout& b = d0[1];
  EXPECT_EQ(b.coverage, Coverage::kExact);
  EXPECT_EQ(b.stack_id, 3u);
  EXPECT_TRUE(b.blocks.empty());
  ASSERT_EQ(b.backed.size(), 1u);
  EXPECT_EQ(b.backed[0].size, 2 * kMiB);

  const SegmentLayout& c = d0[2];
  EXPECT_TRUE(c.vmm_reservation);
  EXPECT_EQ(c.size, kGiB);
  EXPECT_EQ(c.backing_bytes, 96 * kMiB);
  ASSERT_EQ(c.backed.size(), 1u);
  EXPECT_EQ(c.backed[0].address, kSegC);
  EXPECT_EQ(c.backed[0].size, 96 * kMiB);
  EXPECT_EQ(c.blocks.size(), 2u);
  ASSERT_EQ(c.free_ranges.size(), 2u);
  EXPECT_EQ(c.free_ranges[1].address, kSegC + 48 * kMiB);
  EXPECT_EQ(c.free_ranges[1].size, 48 * kMiB);

  ASSERT_EQ(in.segments.at(1).size(), 1u);
  EXPECT_EQ(in.segments.at(1)[0].base, kSegD);
  EXPECT_TRUE(in.segments_left_out.empty());
  EXPECT_TRUE(in.segments_captured);
  // Every stack a block names is in the summary, so exports can name its site.
  for (uint64_t id : {1, 2, 3}) EXPECT_TRUE(in.summary.stacks.count(id)) << id;
}

TEST(SegmentLayoutsTest, KeepsTheLargestWhenLimited) {
  ProcessModel model;
  for (const v1::Frame& f : ExportTrace().frames()) model.Apply(f);
  exporter::CaptureOptions options;
  options.max_segments_per_device = 2;
  exporter::ExportInput in = exporter::CaptureExportInput(model, options);
  const std::vector<SegmentLayout>& d0 = in.segments.at(0);
  ASSERT_EQ(d0.size(), 2u);
  // A (64 MiB backed) and C (96 MiB backed) stay, in address order; B (2 MiB) is left out.
  EXPECT_EQ(d0[0].base, kSegA);
  EXPECT_EQ(d0[1].base, kSegC);
  EXPECT_EQ(in.segments_left_out.at(0), 1u);
  EXPECT_FALSE(in.segments_left_out.count(1));
}

TEST(SegmentLayoutsTest, OpaqueSegmentHasNoInside) {
  exporter::ExportInput in = Capture(ExportTrace(/*opaque=*/true).frames());
  const std::vector<SegmentLayout>& d0 = in.segments.at(0);
  ASSERT_EQ(d0.size(), 4u);
  const SegmentLayout& e = d0[3];  // address order: A, B, C, E
  EXPECT_EQ(e.base, kSegE);
  EXPECT_EQ(e.coverage, Coverage::kOpaque);
  EXPECT_TRUE(e.blocks.empty());
  EXPECT_TRUE(e.free_ranges.empty());
}

}  // namespace
}  // namespace fragscope::testing
