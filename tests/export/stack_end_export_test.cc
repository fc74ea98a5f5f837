// A cut stack (StackEnd) in the exports: the HTML page and the Perfetto trace say so in the site's
// name, the PyTorch snapshot ends its frames with a synthetic "[stack cut: ...]" frame, and
// importing that snapshot gives the stack its end back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "export_test_trace.h"
#include "fragscope/export/html_report.h"
#include "fragscope/export/perfetto_trace.h"
#include "fragscope/export/torch_snapshot_writer.h"
#include "fragscope/model/process_model.h"
#include "fragscope/report/report_text.h"
#include "fragscope/report/symbolizer.h"
#include "fragscope/torch/snapshot_importer.h"

namespace fragscope::testing {
namespace {

using exporter::ExportInput;

constexpr char kDepthCut[] = "stack cut here: deeper than FRAGSCOPE_STACK_DEPTH (raise it)";
constexpr char kUnreadableCut[] =
    "stack cut here: unreadable frame (its saved registers lie outside the thread's stack)";

// ExportTrace with site 3 (segments B and D) cut at the depth limit and site 4 (the OOM's
// failing request) at an unreadable frame; `cut` false: the same ends left unsaid.
std::vector<v1::Frame> Frames(bool cut) {
  std::vector<v1::Frame> frames = ExportTrace().frames();
  for (v1::Frame& f : frames) {
    if (!cut || !f.has_symbolized_stack()) continue;
    if (f.symbolized_stack().id() == 3)
      f.mutable_symbolized_stack()->set_end(v1::STACK_END_DEPTH_LIMIT);
    if (f.symbolized_stack().id() == 4)
      f.mutable_symbolized_stack()->set_end(v1::STACK_END_UNREADABLE);
  }
  return frames;
}

std::string Html(const ExportInput& in) {
  ModuleOffsetSymbolizer symbolizer(in.summary.modules);
  std::ostringstream out;
  exporter::RenderHtml(in, symbolizer, out);
  return out.str();
}

std::string Perfetto(const ModelSummary& s) {
  ModuleOffsetSymbolizer symbolizer(s.modules);
  std::ostringstream out;
  exporter::WritePerfettoTrace(s, symbolizer, out);
  return out.str();
}

std::string Snapshot(const ExportInput& in) {
  ModuleOffsetSymbolizer symbolizer(in.summary.modules);
  return exporter::WriteTorchSnapshot(in, symbolizer);
}

TEST(StackEndExport, HtmlNamesACutSiteAsCut) {
  const std::string cut = Html(Capture(Frames(true)));
  // The site table of device 0 (segment B) and the OOM's failing call site.
  EXPECT_NE(cut.find(std::string("cudaMalloc_wrapper (ext.cc:5) &lt; train_step (train.py:10) ") +
                     "\u2026 " + kDepthCut),
            std::string::npos);
  // (The page escapes the apostrophe of "thread's".)
  EXPECT_NE(cut.find("Failing call site: <span class=\"site\">allocate_kv_cache (cache.py:9) &lt; "
                     "train_step (train.py:10) \u2026 stack cut here: unreadable frame"),
            std::string::npos);
  EXPECT_EQ(Html(Capture(Frames(false))).find("stack cut"), std::string::npos);
}

TEST(StackEndExport, PerfettoNamesTheFailingSiteAsCut) {
  const std::string cut = Perfetto(Capture(Frames(true)).summary);
  EXPECT_NE(cut.find(kUnreadableCut), std::string::npos) << cut;
  EXPECT_EQ(Perfetto(Capture(Frames(false)).summary).find("stack cut"), std::string::npos);
}

TEST(StackEndExport, TorchSnapshotEndsACutStackWithASyntheticFrame) {
  const std::string cut = Snapshot(Capture(Frames(true)));
  EXPECT_NE(cut.find("[stack cut: depth limit]"), std::string::npos);
  EXPECT_NE(cut.find("[stack cut: unreadable frame]"), std::string::npos);
  EXPECT_EQ(Snapshot(Capture(Frames(false))).find("[stack cut"), std::string::npos);
}

// export --torch-snapshot, then import: the synthetic frame becomes the stack's end again, and
// the report of the imported trace says how the stack was cut.
TEST(StackEndExport, ImportingTheSnapshotGivesTheEndBack) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "stack_end_roundtrip.pickle").string();
  std::ofstream(path, std::ios::binary) << Snapshot(Capture(Frames(true)));
  auto frames = torch::ImportTorchSnapshotFile(path);
  ASSERT_TRUE(frames.ok()) << frames.status();
  ProcessModel model;
  for (const v1::Frame& f : *frames) model.Apply(f);
  const ModelSummary back = model.Summarize();
  int depth_limit = 0, unreadable = 0;
  for (const auto& [id, stack] : back.stacks) {
    for (const SourceFrameInfo& f : stack.source_frames) {
      EXPECT_EQ(f.function.find("[stack cut"), std::string::npos) << f.function;
    }
    if (stack.end == StackEnd::kDepthLimit) ++depth_limit;
    if (stack.end == StackEnd::kUnreadable) ++unreadable;
  }
  EXPECT_GE(depth_limit, 1);
  EXPECT_GE(unreadable, 1);
  std::ostringstream text;
  RenderText(back, text);
  EXPECT_NE(
      text.str().find(std::string("at train_step (train.py:10)\n    \u2026 ") + kUnreadableCut),
      std::string::npos)
      << text.str();
}

}  // namespace
}  // namespace fragscope::testing
