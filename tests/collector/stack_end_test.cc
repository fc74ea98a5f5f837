// How the agent's capture of each stack ended (Stack.end, format 1.11), from the wire to the
// model and every report form: a cut stack says so after its last frame, a whole one says
// nothing more, and a trace from an older agent (no end) says "unspecified" in JSON only.
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/model/process_model.h"
#include "fragscope/model/stack_index.h"
#include "fragscope/report/report_json.h"
#include "fragscope/report/report_text.h"
#include "fragscope/trace/arena_frame_reader.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/trace_format.h"
#include "gtest/gtest.h"
#include "model_test_frames.h"

namespace fragscope {
namespace {

using testing::kGiB;
using testing::kMiB;

constexpr uint64_t kBase = 0x7a0000000000;  // libapp.so
constexpr uint64_t kSegment = 0x7f0000000000;

struct EndCase {
  std::optional<v1::StackEnd> wire;  // nullopt: the field absent, as an older agent wrote it
  StackEnd end;
  const char* json;
  const char* text;  // the line after the last frame; null: none
};

const EndCase kCases[] = {
    {v1::STACK_END_OUTERMOST, StackEnd::kOutermost, "outermost", nullptr},
    {v1::STACK_END_DEPTH_LIMIT, StackEnd::kDepthLimit, "depth_limit",
     "\u2026 stack cut here: deeper than FRAGSCOPE_STACK_DEPTH=2 (raise it)"},
    {v1::STACK_END_NO_UNWIND_INFO, StackEnd::kNoUnwindInfo, "no_unwind_info",
     "\u2026 stack cut here: no unwind information for this code (JIT or stripped)"},
    {v1::STACK_END_UNREADABLE, StackEnd::kUnreadable, "unreadable",
     "\u2026 stack cut here: unreadable frame (its saved registers lie outside the thread's "
     "stack)"},
    {v1::STACK_END_UNSUPPORTED, StackEnd::kUnsupported, "unsupported",
     "\u2026 stack cut here: unsupported frame (signal handler or DWARF expression)"},
    {std::nullopt, StackEnd::kUnspecified, "unspecified", nullptr},
};

std::string CaseName(const EndCase& c) { return c.json; }

// The frames of a stream whose one allocation (1 GiB, stack 7: two frames in libapp.so) is
// live and whose next request (64 GiB, stack 7) failed: stack 7 shows in the device's sites,
// the job-wide sites and the OOM's failing site. The agent ran with FRAGSCOPE_STACK_DEPTH=2.
std::vector<v1::Frame> StreamFrames(std::optional<v1::StackEnd> end) {
  std::vector<v1::Frame> frames;
  uint64_t seq = 0;
  {
    v1::Hello* h = frames.emplace_back().mutable_hello();
    h->set_pid(4242);
    h->set_exe("/usr/bin/app");
    h->set_stack_depth(2);
  }
  {
    v1::DeviceInfo* d = frames.emplace_back().mutable_device();
    d->set_ordinal(0);
    d->set_total_bytes(16 * kGiB);
  }
  {
    v1::Module* m = frames.emplace_back().mutable_module_map()->add_modules();
    m->set_path("/opt/app/libapp.so");
    m->set_load_address(kBase);
    m->set_size(0x100000);
  }
  {
    v1::Stack* s = frames.emplace_back().mutable_stacks()->add_stacks();
    s->set_id(7);
    s->add_pcs(kBase + 0x10);
    s->add_pcs(kBase + 0x20);
    if (end) s->set_end(*end);
  }
  {
    v1::AllocEvent* a = frames.emplace_back().mutable_alloc();
    a->set_seq(++seq);
    a->set_time_ns(seq * 1000);
    a->set_api(v1::API_cudaMalloc);
    a->set_address(kSegment);
    a->set_size(kGiB);
    a->set_device(0);
    a->set_kind(v1::MEMORY_KIND_DEVICE);
    a->set_stack_id(7);
  }
  {
    v1::FailedAlloc* f = frames.emplace_back().mutable_failed();
    f->set_seq(++seq);
    f->set_time_ns(seq * 1000);
    f->set_api(v1::API_cudaMalloc);
    f->set_result(2);
    f->set_size(64 * kGiB);
    f->set_device(0);
    f->set_stack_id(7);
    f->set_has_mem_info(true);
    f->set_device_free_bytes(8 * kGiB);
    f->set_device_total_bytes(16 * kGiB);
  }
  return frames;
}

ModelSummary Summarize(const std::vector<v1::Frame>& frames) {
  ProcessModel model;
  for (const v1::Frame& f : frames) model.Apply(f);
  return model.Summarize();
}

std::string Text(const ModelSummary& s) {
  std::ostringstream out;
  RenderText(s, out);
  return out.str();
}

nlohmann::json Json(const ModelSummary& s) {
  std::ostringstream out;
  RenderJson(s, out);
  return nlohmann::json::parse(out.str());
}

// Every object of `j` that has a "stack", wherever it is in the report.
void StackHolders(const nlohmann::json& j, std::vector<const nlohmann::json*>* out) {
  if (j.is_object()) {
    if (j.contains("stack")) out->push_back(&j);
    for (const auto& [key, value] : j.items()) StackHolders(value, out);
  } else if (j.is_array()) {
    for (const nlohmann::json& v : j) StackHolders(v, out);
  }
}

class StackEndCases : public ::testing::TestWithParam<EndCase> {};

// The libprotobuf reader (FrameReader, and ArenaFrameReader as `report` and the daemon read)
// keeps the end, and the model keeps it with the stack.
TEST_P(StackEndCases, ReadersAndModelKeepTheEnd) {
  const EndCase& c = GetParam();
  char path[] = "/tmp/fragscope-stack-end-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string bytes(kTraceHeaderBytes, '\0');
  EncodeTraceHeader(kFormatMajor, kFormatMinor, reinterpret_cast<unsigned char*>(bytes.data()));
  for (const v1::Frame& f : StreamFrames(c.wire)) AppendFramed(f.SerializeAsString(), &bytes);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);

  auto plain = FrameReader::OpenFile(path);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ProcessModel plain_model;
  v1::Frame f;
  int stack_frames = 0;
  while (plain->Next(&f) == FrameReader::Result::kFrame) {
    if (f.has_stacks()) {
      ++stack_frames;
      EXPECT_EQ(f.stacks().stacks(0).end(), c.wire.value_or(v1::STACK_END_UNSPECIFIED));
    }
    plain_model.Apply(f);
  }
  EXPECT_EQ(stack_frames, 1);

  auto again = FrameReader::OpenFile(path);
  ASSERT_TRUE(again.ok()) << again.status();
  ArenaFrameReader arena(*again);
  ProcessModel arena_model;
  const v1::Frame* frame = nullptr;
  while (arena.Next(&frame) == FrameReader::Result::kFrame) arena_model.Apply(*frame);
  std::remove(path);

  for (const ProcessModel* model : {&plain_model, &arena_model}) {
    const ModelSummary s = model->Summarize();
    EXPECT_EQ(s.stack_depth, 2u);
    ASSERT_EQ(s.stacks.count(7), 1u);
    EXPECT_EQ(s.stacks.at(7).end, c.end);
    ASSERT_EQ(s.devices.size(), 1u);
    ASSERT_EQ(s.devices[0].sites.size(), 1u);
    EXPECT_EQ(s.devices[0].sites[0].end, c.end);
    ASSERT_EQ(s.ooms.size(), 1u);
    ASSERT_FALSE(s.ooms[0].sites_at_failure.empty());
    EXPECT_EQ(s.ooms[0].sites_at_failure[0].end, c.end);
  }
}

// Text: the cut line follows the stack's last frame wherever the stack is printed (the device's
// sites and the OOM's failing site and its sites); a whole or unspecified stack prints none.
TEST_P(StackEndCases, TextReportSaysHowACutStackEnded) {
  const EndCase& c = GetParam();
  const std::string text = Text(Summarize(StreamFrames(c.wire)));
  const std::string last_frame = "at libapp.so+0x20\n";
  std::size_t stacks = 0;
  for (std::size_t at = text.find(last_frame); at != std::string::npos;
       at = text.find(last_frame, at + 1)) {
    ++stacks;
    const std::size_t next = at + last_frame.size();
    const std::string line = text.substr(next, text.find('\n', next) - next);
    if (c.text != nullptr) {
      EXPECT_EQ(line.substr(line.find_first_not_of(' ')), c.text) << text;
    } else {
      EXPECT_EQ(line.find("stack cut"), std::string::npos) << text;
    }
  }
  EXPECT_GE(stacks, 3u) << text;
  if (c.text == nullptr) {
    EXPECT_EQ(text.find("stack cut"), std::string::npos) << text;
  }
}

// JSON: every stack carries "stack_end", "unspecified" for a trace without the field.
TEST_P(StackEndCases, JsonReportNamesTheEndOfEveryStack) {
  const EndCase& c = GetParam();
  const nlohmann::json j = Json(Summarize(StreamFrames(c.wire)));
  std::vector<const nlohmann::json*> holders;
  StackHolders(j, &holders);
  std::size_t of_stack_7 = 0;
  for (const nlohmann::json* h : holders) {
    ASSERT_TRUE(h->contains("stack_end")) << h->dump();
    if (h->at("stack").empty()) continue;
    ++of_stack_7;
    EXPECT_EQ(h->at("stack_end"), c.json) << h->dump();
  }
  EXPECT_GE(of_stack_7, 3u) << j.dump(1);
}

INSTANTIATE_TEST_SUITE_P(AllEnds, StackEndCases, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return CaseName(info.param); });

// Sites merge stacks whose reported frames are equal; the site is cut if any of them is, under
// whichever stack id names it.
TEST(StackEndSites, AMergedSiteIsCutIfAnyOfItsStacksIs) {
  for (const bool cut_first : {true, false}) {
    StackIndex index({});
    v1::ModuleMap map;
    v1::Module* m = map.add_modules();
    m->set_path("/opt/app/libapp.so");
    m->set_load_address(kBase);
    m->set_size(0x100000);
    index.AddModules(map);
    v1::StackTable table;
    v1::Stack* whole = table.add_stacks();
    whole->set_id(cut_first ? 9 : 7);
    whole->add_pcs(kBase + 0x10);
    whole->set_end(v1::STACK_END_OUTERMOST);
    // The same frame, then one in no module: reported (and merged) as the same site.
    v1::Stack* cut = table.add_stacks();
    cut->set_id(cut_first ? 7 : 9);
    cut->add_pcs(kBase + 0x10);
    cut->add_pcs(0x1234);
    cut->set_end(v1::STACK_END_DEPTH_LIMIT);
    index.AddStacks(table);
    ASSERT_NE(index.Find(7), nullptr);
    EXPECT_EQ(index.Find(cut_first ? 7 : 9)->end, StackEnd::kDepthLimit);
    EXPECT_EQ(index.Find(cut_first ? 9 : 7)->end, StackEnd::kOutermost);
    const std::vector<SiteEntry> sites = index.MergeSites({{7, kMiB, 1}, {9, kMiB, 1}});
    ASSERT_EQ(sites.size(), 1u);
    EXPECT_EQ(sites[0].stack_id, 7u);
    EXPECT_EQ(sites[0].live_bytes, 2 * kMiB);
    EXPECT_EQ(sites[0].end, StackEnd::kDepthLimit) << "cut stack first: " << cut_first;
    // Alone, each keeps its own.
    EXPECT_EQ(index.MergeSites({{9, kMiB, 1}})[0].end, index.Find(9)->end);
  }
}

TEST(StackEndSites, MergeStackEndsPrefersACutThenUnspecified) {
  EXPECT_EQ(MergeStackEnds(StackEnd::kOutermost, StackEnd::kOutermost), StackEnd::kOutermost);
  EXPECT_EQ(MergeStackEnds(StackEnd::kOutermost, StackEnd::kUnspecified), StackEnd::kUnspecified);
  EXPECT_EQ(MergeStackEnds(StackEnd::kUnspecified, StackEnd::kUnreadable), StackEnd::kUnreadable);
  EXPECT_EQ(MergeStackEnds(StackEnd::kNoUnwindInfo, StackEnd::kOutermost), StackEnd::kNoUnwindInfo);
  // An end this reader does not know (a newer agent's) names nothing it can say.
  EXPECT_EQ(StackEndFromWire(99), StackEnd::kUnspecified);
}

// A site merged from a whole stack and a cut one prints the cut in the text report too.
TEST(StackEndSites, TextAndJsonShowTheMergedSiteAsCut) {
  std::vector<v1::Frame> frames = StreamFrames(v1::STACK_END_OUTERMOST);
  v1::Frame more;
  v1::Stack* s = more.mutable_stacks()->add_stacks();
  s->set_id(8);
  s->add_pcs(kBase + 0x10);
  s->add_pcs(kBase + 0x20);
  s->add_pcs(0x1234);  // in no module: reported like stack 7
  s->set_end(v1::STACK_END_DEPTH_LIMIT);
  v1::AllocEvent* a = frames.emplace_back().mutable_alloc();
  *a = frames[4].alloc();
  a->set_seq(3);
  a->set_address(kSegment + 2 * kGiB);
  a->set_stack_id(8);
  frames.insert(frames.begin() + 4, more);
  const ModelSummary summary = Summarize(frames);
  ASSERT_EQ(summary.devices.size(), 1u);
  ASSERT_EQ(summary.devices[0].sites.size(), 1u);
  EXPECT_EQ(summary.devices[0].sites[0].count, 2u);
  const std::string text = Text(summary);
  EXPECT_NE(text.find("at libapp.so+0x20\n        \u2026 stack cut here: deeper than "
                      "FRAGSCOPE_STACK_DEPTH=2 (raise it)\n"),
            std::string::npos)
      << text;
  const nlohmann::json j = Json(summary);
  ASSERT_EQ(j.at("sites").size(), 1u) << j.dump(1);
  EXPECT_EQ(j.at("sites")[0].at("stack_end"), "depth_limit");
}

}  // namespace
}  // namespace fragscope
