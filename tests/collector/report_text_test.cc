// The text report: the headline, the numbers that prove the class, sites and advice, and the
// reason printed wherever a figure is unknown.
#include "fragscope/report/report_text.h"

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <vector>

#include "fragscope/model/format_bytes.h"
#include "report_test_scenario.h"

namespace fragscope {
namespace {

using testing::kGiB;
using testing::kMiB;

std::string Render(const ModelSummary& s) {
  std::ostringstream out;
  RenderText(s, out);
  return out.str();
}

void ExpectContains(const std::string& text, std::string_view needle) {
  EXPECT_NE(text.find(needle), std::string::npos) << "missing: " << needle << "\n" << text;
}

TEST(FormatBytesTest, BinaryUnitsTwoDecimals) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(768 * kMiB), "768.00 MiB");
  EXPECT_EQ(FormatBytes(kGiB + kGiB / 5), "1.20 GiB");
  EXPECT_EQ(FormatPercent(0.375), "37.5 %");
}

TEST(ReportTextTest, FragmentationPostMortem) {
  const std::string text = Render(testing::FragmentationOomSummary());
  ExpectContains(text, "OOM on device 0: requested 768.00 MiB \xe2\x80\x94 class: fragmentation");
  // The numbers that prove it: cached 1 GiB + free 256 MiB >= 768 MiB > largest 512 MiB.
  ExpectContains(text,
                 "cached 1.00 GiB + device free 256.00 MiB = 1.25 GiB >= requested "
                 "768.00 MiB");
  ExpectContains(text, "the largest free range is 512.00 MiB");
  ExpectContains(text, "expandable_segments:True");
  // Device table with units.
  ExpectContains(text, "Device 0 (Test GPU) uuid GPU-01010101-0101-0101-0101-010101010101 ");
  ExpectContains(text, "fragmentation          50.0 %");
  ExpectContains(text, "stranded               512.00 MiB");
  // Where the cache lay at the failure: two 512 MiB pieces, one per segment.
  ExpectContains(text,
                 "Free ranges at the failure: 2, in 2 of 2 segments; by size:\n"
                 "      512.00 MiB x 2\n");
  ExpectContains(text, "untracked              13.75 GiB");
  // The failed call, listed and not recovered, with its stack through the fallback symbolizer.
  ExpectContains(text, "fragscope_alloc_failed");
  ExpectContains(text, "NOT recovered");
  ExpectContains(text, "at libtorch_python.so+0x40");
  // Sites at the failure with their stacks.
  ExpectContains(text, "512.00 MiB in 1 allocation(s)");
  ExpectContains(text, "at libtorch_python.so+0x10");
  ExpectContains(text, "block_alloc");
}

TEST(ReportTextTest, UnknownFiguresPrintTheirReason) {
  ProcessModel model;
  testing::FrameFeed feed(&model);
  feed.Malloc(0x7f0000000000, 32 * kMiB);
  feed.BlockAlloc(0x7f0000000000, 8 * kMiB);
  const std::string text = Render(model.Summarize());
  ExpectContains(text, "n/a");
  ExpectContains(text, "cached 24.00 MiB is below the 64.00 MiB floor");
  ExpectContains(text, "no device free/total sample (MemInfo) in the stream");
  ExpectContains(text, "stream cut before its end");
}

TEST(ReportTextTest, BlocksFromASyncEventsAgoAreMarkedAsSuch) {
  ProcessModel model;
  testing::FrameFeed feed(&model);
  feed.Device(0, 16 * kGiB);
  feed.Malloc(0x7f0000000000, kGiB);
  feed.BlockAlloc(0x7f0000000000, 512 * kMiB);
  feed.Mark("PyTorch blocks synced (start)", /*blocks_synced=*/true);
  feed.Malloc(0x7f0100000000, 2 * kMiB);  // the program ran on
  feed.Failed(768 * kMiB, 0, /*from_sub_allocator=*/false, 256 * kMiB, 16 * kGiB);
  const std::string text = Render(model.Summarize());
  ExpectContains(text, "class: unknown");
  ExpectContains(text, "allocated              514.00 MiB     blocks as of the sync at seq 3\n");
  ExpectContains(text, "largest free range     512.00 MiB     blocks as of the sync at seq 3\n");
  ExpectContains(text,
                 "Note: the sub-allocator's blocks (PyTorch's) were read from its own "
                 "state at 1 sync(s) only");
}

// A run that did not fail (a CI job, capacity planning) still says what made its memory peak:
// the device's sites at the peak, which an OOM's post-mortem lists itself otherwise.
TEST(ReportTextTest, DeviceListsTheSitesAtThePeakWhenNoOomDoes) {
  ProcessModel model;
  testing::FrameFeed feed(&model);
  feed.Device(0, 16 * kGiB);
  feed.Malloc(0x7f0000000000, kGiB, 0, /*stack=*/1);
  feed.Malloc(0x7f0100000000, 3 * kGiB, 0, /*stack=*/2);  // the peak: 4 GiB
  feed.Free(0x7f0100000000);
  std::string text = Render(model.Summarize());
  ExpectContains(text,
                 "  Top sites at peak reserved (4.00 GiB):\n"
                 "    3.00 GiB in 1 allocation(s)\n");
  feed.Failed(16 * kGiB, 0, /*from_sub_allocator=*/false, 15 * kGiB, 16 * kGiB);
  text = Render(model.Summarize());
  EXPECT_EQ(text.find("Top sites at peak reserved"), std::string::npos) << text;
  ExpectContains(text,
                 "Live at peak reserved (4.00 GiB), by site:\n    3.00 GiB in 1 allocation(s)");
}

class FakeSymbolizer : public Symbolizer {
 public:
  std::vector<SymbolizedFrame> Symbolize(uint64_t pc) override {
    SymbolizedFrame inlined;
    inlined.function = "at::empty";
    SymbolizedFrame frame;
    frame.function = "train_step";
    frame.file = "train.py";
    frame.line = static_cast<uint32_t>(pc & 0xff);
    return {inlined, frame};
  }
};

TEST(ReportTextTest, UsesTheCallersSymbolizer) {
  const ModelSummary s = testing::FragmentationOomSummary();
  FakeSymbolizer symbolizer;
  std::ostringstream out;
  RenderText(s, symbolizer, out);
  // Stack 30 is one pc (module base + 0x40 = line 64), giving an inlined frame and its caller.
  ExpectContains(out.str(), "at at::empty\n");
  ExpectContains(out.str(), "at train_step (train.py:64)");
}

// The free ranges at the failure, by size largest first: sizes that print alike share a line,
// and past five sizes the rest is summed.
TEST(ReportTextTest, FreeRangesAtTheFailureBySize) {
  ModelSummary s;
  OomPostMortem o;
  o.headline = "OOM";
  std::vector<SegmentLayout> map(3);
  uint64_t at = 0x7f0000000000;
  auto add = [&](int segment, uint64_t size) {
    map[segment].free_ranges.push_back({at, size});
    at += size + kMiB;
  };
  for (int i = 0; i < 3; ++i) add(0, 12 * kMiB);
  add(1, 2 * kMiB);
  add(1, 2 * kMiB);
  add(1, 2 * kMiB - 512);  // prints as 2.00 MiB too
  for (uint64_t kib : {900, 800, 700, 600, 500}) add(1, kib * 1024);
  o.segments_at_failure = std::make_shared<const std::vector<SegmentLayout>>(std::move(map));
  o.segments_left_out = 4;
  s.ooms.push_back(o);
  std::ostringstream out;
  RenderText(s, out);
  ExpectContains(out.str(),
                 "Free ranges at the failure: 11, in 2 of 3 segments (the largest; 4 more not "
                 "looked at); by size:\n"
                 "       12.00 MiB x 3\n"
                 "        2.00 MiB x 3\n"
                 "      900.00 KiB x 1\n"
                 "      800.00 KiB x 1\n"
                 "      700.00 KiB x 1\n"
                 "  ... 2 smaller, 1.07 MiB in all\n");
}

// A site starts below fragscope's own frames: annotate.h's inline functions in the program's
// allocator, the agent, the PyTorch adapter's extension. Only a leading run counts, a program
// whose own module is called fragscope_* keeps its frames, and one frame always stays.
TEST(SymbolizerTest, LeadingOwnFramesAreFragscopesOnly) {
  auto frame = [](std::string function, std::string module) {
    SymbolizedFrame f;
    f.function = std::move(function);
    f.module = std::move(module);
    return f;
  };
  const std::string ext = "/root/.cache/fragscope_torch_adapter_2_15_0_cu132.so";
  EXPECT_EQ(LeadingOwnFrames({frame("fragscope_annotate_block_alloc", "/opt/train"),
                              frame("Pool::Allocate(unsigned long)", "/opt/train")}),
            1u);
  EXPECT_EQ(LeadingOwnFrames({frame("fragscope_annotate_block_alloc", ext),
                              frame("(anonymous namespace)::OnTrace(...)", ext),
                              frame("std::_Function_handler<...>::_M_invoke(...)", ext),
                              frame("c10::...::record_trace(...)", "/venv/lib/libc10_cuda.so"),
                              frame("helper", ext)}),
            3u);
  EXPECT_EQ(LeadingOwnFrames({frame("", "/opt/fs/lib/libfragscope.so"), frame("main", "/a")}), 1u);
  EXPECT_EQ(LeadingOwnFrames({frame("main", "/opt/bin/fragscope_tool"), frame("f", "/a")}), 0u)
      << "an executable named fragscope_* is the program's own";
  EXPECT_EQ(LeadingOwnFrames({frame("fragscope_mark", "/a"), frame("fragscope_x", "/a")}), 1u)
      << "one frame always stays";
  EXPECT_EQ(LeadingOwnFrames({}), 0u);
}

TEST(ReportTextTest, SitesStartBelowFragscopesOwnFrames) {
  ModelSummary s = testing::FragmentationOomSummary();
  // The failing call (stack 30) as a sub-allocator reports it: annotate.h's inline function,
  // then the allocator.
  s.stacks[30] = StackInfo{
      {},
      {{"fragscope_annotate_alloc_failed", "annotate.h", 101}, {"Pool::Allocate", "pool.cc", 12}}};
  std::ostringstream out;
  RenderText(s, out);
  EXPECT_EQ(out.str().find("fragscope_annotate_alloc_failed"), std::string::npos) << out.str();
  ExpectContains(out.str(), "at Pool::Allocate (pool.cc:12)");
}

TEST(SymbolizerTest, ModuleOffsetFallback) {
  ModuleOffsetSymbolizer symbolizer(
      {{"/lib/libb.so", "", 0x2000, 0x1000}, {"/lib/liba.so", "", 0x1000, 0x800}});
  EXPECT_EQ(FormatFrame(symbolizer.Symbolize(0x1010)[0]), "liba.so+0x10");
  EXPECT_EQ(FormatFrame(symbolizer.Symbolize(0x2fff)[0]), "libb.so+0xfff");
  // Between modules (liba ends at 0x1800) and past the last one: the bare pc.
  EXPECT_EQ(FormatFrame(symbolizer.Symbolize(0x1900)[0]), "0x1900");
  EXPECT_EQ(FormatFrame(symbolizer.Symbolize(0x3000)[0]), "0x3000");
}

}  // namespace
}  // namespace fragscope
