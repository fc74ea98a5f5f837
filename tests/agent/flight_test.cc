// Flight recorder (FRAGSCOPE_FLIGHT_MB): a long run keeps only the last ~N MiB on disk, and the
// newest file alone is a complete trace whose replay gives the fake driver's live set at exit.
#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <string>

#include "fragscope/model/process_model.h"
#include "fragscope/trace/frame_reader.h"
#include "gtest/gtest.h"
#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

TEST(FlightRecorderTest, KeepsTheLastMegabytesAsACompleteTrace) {
  TempDir dir;
  const std::string trace_path = dir.File("trace");
  RunOptions options;
  options.env = {{"FRAGSCOPE_OUTPUT", trace_path},
                 {"FRAGSCOPE_FLIGHT_MB", "1"},
                 {"FAKECUDA_LIVE_DUMP", dir.File("live")}};
  RunResult run = RunProgram(AppPath("agent_flight_app"), {"100000"}, options);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_NE(run.out.find("failed 2\n"), std::string::npos) << run.out;  // cudaErrorMemoryAllocation

  // Only the newest segment and the one before it remain.
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"live", "trace", "trace.prev"}));
  const uint64_t on_disk = FileSize(trace_path) + FileSize(trace_path + ".prev");
  EXPECT_GT(FileSize(trace_path + ".prev"), 0u);
  // N MiB plus one snapshot of the 64-entry window and a few frames past the threshold.
  EXPECT_LE(on_disk, (uint64_t{1} << 20) + 64 * 1024) << on_disk;

  // The newest file reads cleanly from its header to its End frame.
  absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(trace_path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ProcessModel model;
  v1::Frame frame;
  FrameReader::Result result;
  int frames = 0;
  bool first_snapshot_seen = false;
  bool failure_seen = false;
  bool end_seen = false;
  uint64_t first_event_seq = 0;
  uint64_t snapshot_seq = 0;
  uint64_t events = 0;
  int stack_frames = 0;
  while ((result = reader->Next(&frame)) == FrameReader::Result::kFrame) {
    if (frames == 0) {
      EXPECT_TRUE(frame.has_hello());
    }
    ++frames;
    if (frame.has_snapshot() && !first_snapshot_seen) {
      first_snapshot_seen = true;
      EXPECT_EQ(frame.snapshot().reason(), v1::Snapshot::REASON_PERIODIC);
      EXPECT_TRUE(frame.snapshot().complete_history());
      snapshot_seq = frame.snapshot().seq();
    }
    if ((frame.has_alloc() || frame.has_free()) && first_event_seq == 0) {
      first_event_seq = SeqOf(frame);
      EXPECT_TRUE(first_snapshot_seen) << "an event before the segment's snapshot";
    }
    if (frame.has_alloc() || frame.has_free() || frame.has_failed()) ++events;
    if (frame.has_stacks() && !first_snapshot_seen) ++stack_frames;
    if (frame.has_failed()) failure_seen = true;
    if (frame.has_end()) end_seen = true;
    model.Apply(frame);
  }
  EXPECT_EQ(result, FrameReader::Result::kEnd) << reader->error();
  EXPECT_TRUE(end_seen);
  EXPECT_TRUE(failure_seen) << "the failed allocation near the end is in the newest file";
  // It is a suffix of the run, cut several times: the 200k events before its snapshot would fill
  // several files like it.
  EXPECT_GT(first_event_seq, snapshot_seq);
  EXPECT_GT(snapshot_seq, 4 * events) << "rotated too rarely: " << events << " events kept";
  EXPECT_GT(stack_frames, 0) << "the stacks of the snapshot precede it";

  // The replay's live set is exactly what the fake driver holds at exit.
  std::map<uint64_t, uint64_t> replayed;
  for (const SegmentLayout& s : model.SegmentLayouts(0, SIZE_MAX)) {
    replayed[s.base] = s.size;
    // The stacks of memory allocated before this file began were re-sent in it.
    EXPECT_NE(s.stack_id, 0u);
    EXPECT_TRUE(model.FindStack(s.stack_id).has_value()) << std::hex << s.stack_id;
  }
  std::map<uint64_t, uint64_t> truth;
  for (const auto& line : Lines(ReadFile(dir.File("live")))) {
    if (line.size() >= 3 && line[1].rfind("0x", 0) == 0) {
      truth[ParseAddress(line[1])] = std::stoull(line[2]);
    }
  }
  EXPECT_EQ(truth.size(), 32u);
  EXPECT_EQ(replayed, truth);
}

// A block's source-level site (annotate.h fragscope_block_site), set long before the newest
// file began, is still named there: its SymbolizedStack is sent again ahead of the snapshot.
TEST(FlightRecorderTest, SourceSitesOfLiveBlocksAreSentAgain) {
  TempDir dir;
  const std::string trace_path = dir.File("trace");
  RunOptions options;
  options.env = {{"FRAGSCOPE_OUTPUT", trace_path}, {"FRAGSCOPE_FLIGHT_MB", "1"}};
  RunResult run = RunProgram(AppPath("agent_flight_app"), {"100000", "sites"}, options);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(trace_path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ProcessModel model;
  v1::Frame frame;
  bool site_event_seen = false;
  while (reader->Next(&frame) == FrameReader::Result::kFrame) {
    if (frame.has_block() && frame.block().op() == v1::BlockEvent::OP_SITE) site_event_seen = true;
    model.Apply(frame);
  }
  EXPECT_FALSE(site_event_seen) << "the site event belongs to an older file";
  int blocks = 0;
  for (const SegmentLayout& s : model.SegmentLayouts(0, SIZE_MAX)) {
    for (const BlockLayout& b : s.blocks) {
      ++blocks;
      const std::optional<StackInfo> stack = model.FindStack(b.stack_id);
      ASSERT_TRUE(stack.has_value()) << std::hex << b.stack_id;
      ASSERT_EQ(stack->source_frames.size(), 1u);
      EXPECT_EQ(stack->source_frames[0].function, "make_weights");
      EXPECT_EQ(stack->source_frames[0].file, "model.py");
      EXPECT_EQ(stack->source_frames[0].line, 12u);
    }
  }
  EXPECT_EQ(blocks, 1);
}

}  // namespace
}  // namespace fragscope::agent_test
