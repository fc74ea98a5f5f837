// What exports record beyond the summary (trace_replay.h): marks and times from the trace's
// start in the Perfetto export, the alloc/free history and the chosen moment in the PyTorch
// snapshot export, and the importer replaying a snapshot's history (and reading the bare list
// torch.cuda.memory_snapshot() returns).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "export_test_trace.h"
#include "fragscope/export/perfetto_trace.h"
#include "fragscope/export/pickle_writer.h"
#include "fragscope/export/torch_snapshot_writer.h"
#include "fragscope/export/trace_replay.h"
#include "fragscope/report/report_json.h"
#include "fragscope/server/seq_orderer.h"
#include "fragscope/torch/pickle_reader.h"
#include "fragscope/torch/snapshot_importer.h"
#include "nlohmann/json.hpp"

namespace fragscope::testing {
namespace {

using nlohmann::json;

// ExportTrace with a mark after its third event.
std::vector<v1::Frame> TraceWithMark(uint64_t* mark_time_ns) {
  std::vector<v1::Frame> frames = ExportTrace().frames();
  int events = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (EventSeq(frames[i]) == 0 || ++events < 3) continue;
    // Takes the seq after the third event's: every later event moves up one.
    const uint64_t seq = EventSeq(frames[i]) + 1;
    for (std::size_t j = i + 1; j < frames.size(); ++j) {
      v1::Frame& f = frames[j];
      if (f.has_alloc()) f.mutable_alloc()->set_seq(f.alloc().seq() + 1);
      if (f.has_free()) f.mutable_free()->set_seq(f.free().seq() + 1);
      if (f.has_map()) f.mutable_map()->set_seq(f.map().seq() + 1);
      if (f.has_handle()) f.mutable_handle()->set_seq(f.handle().seq() + 1);
      if (f.has_block()) f.mutable_block()->set_seq(f.block().seq() + 1);
      if (f.has_failed()) f.mutable_failed()->set_seq(f.failed().seq() + 1);
      if (f.has_mem_info()) f.mutable_mem_info()->set_seq(f.mem_info().seq() + 1);
      if (f.has_end()) f.mutable_end()->set_seq(f.end().seq() + 1);
    }
    v1::Frame mark;
    mark.mutable_mark()->set_seq(seq);
    *mark_time_ns = seq * 1000000 - 500000;  // between its neighbours
    mark.mutable_mark()->set_time_ns(*mark_time_ns);
    mark.mutable_mark()->set_label("step 1");
    frames.insert(frames.begin() + static_cast<std::ptrdiff_t>(i) + 1, mark);
    break;
  }
  return frames;
}

exporter::ExportInput Replay(const std::vector<v1::Frame>& frames,
                             const exporter::ExportMoment& moment = {}) {
  std::size_t next = 0;
  return exporter::CaptureExportInputByReplay(
      [&](v1::Frame* f) {
        if (next >= frames.size()) return false;
        *f = frames[next++];
        return true;
      },
      ModelOptions{}, moment);
}

json Perfetto(const exporter::ExportInput& in) {
  ModuleOffsetSymbolizer symbolizer(in.summary.modules);
  std::ostringstream out;
  exporter::WritePerfettoTrace(in.summary, symbolizer, out, &in.record.marks);
  return json::parse(out.str());
}

// A trace that opens Perfetto at 88 ms must not span hours: every time counts from the first
// event, counters included (their first points come from frames that carry no time).
TEST(ExportHistoryTest, PerfettoTimesCountFromTheTraceStart) {
  uint64_t mark_ns = 0;
  const exporter::ExportInput in = Replay(TraceWithMark(&mark_ns));
  const json doc = Perfetto(in);
  double min_ts = 1e300, max_ts = -1, counter_min = 1e300;
  int marks = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    const double ts = e["ts"];
    min_ts = std::min(min_ts, ts);
    max_ts = std::max(max_ts, ts);
    if (e["ph"] == "C") counter_min = std::min(counter_min, ts);
    if (e["ph"] == "i" && e["cat"] == "mark") {
      ++marks;
      EXPECT_EQ(e["name"], "step 1");
      EXPECT_EQ(e["s"], "p");  // the whole process, not one device
      EXPECT_DOUBLE_EQ(ts, (mark_ns - 1000000) / 1000.0) << e;
    }
  }
  EXPECT_EQ(marks, 1) << doc.dump();
  EXPECT_EQ(min_ts, 0.0);
  EXPECT_EQ(counter_min, 0.0);
  // The trace's events are 1 ms apart: its span is theirs, not the monotonic clock's value.
  EXPECT_LE(max_ts, in.summary.last_seq * 1000.0);
  EXPECT_EQ(doc["otherData"]["start_monotonic_ns"], 1000000u);
  EXPECT_EQ(doc["otherData"]["time_base"], "us since the trace's first event");
}

TEST(ExportHistoryTest, PerfettoJobRanksStayAlignedByWallClock) {
  const exporter::ExportInput in = Replay(ExportTrace().frames());
  ModelSummary rank0 = in.summary, rank1 = in.summary;
  rank0.rank = 0;
  rank1.rank = 1;
  rank0.realtime_minus_monotonic_ns = 1'700'000'000'000'000'000;
  rank1.realtime_minus_monotonic_ns = 1'700'000'000'000'000'000 + 5'000'000'000;  // 5 s later
  ModuleOffsetSymbolizer sym0(rank0.modules), sym1(rank1.modules);
  std::ostringstream out;
  exporter::WritePerfettoJobTrace({{&rank0, &sym0, &in.record.marks}, {&rank1, &sym1, nullptr}},
                                  out);
  const json doc = json::parse(out.str());
  std::map<int, double> first;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    const int pid = e["pid"];
    const double ts = e["ts"].get<double>();
    first[pid] = first.count(pid) ? std::min(first[pid], ts) : ts;
  }
  ASSERT_EQ(first.size(), 2u);
  std::vector<double> starts;
  for (const auto& [pid, ts] : first) starts.push_back(ts);
  std::sort(starts.begin(), starts.end());
  EXPECT_EQ(starts[0], 0.0);          // the job starts at 0 ...
  EXPECT_NEAR(starts[1], 5e6, 1e-3);  // ... and rank 1 five seconds later, by wall clock
  EXPECT_EQ(doc["otherData"]["start_unix_ns"], 1'700'000'000'000'000'000 + 1'000'000);
}

// The history PyTorch's viewer replays: every event up to the moment, in seq order, oom last.
TEST(ExportHistoryTest, TorchSnapshotCarriesTheHistoryUpToTheMoment) {
  const exporter::ExportInput whole = Replay(ExportTrace().frames());
  auto moment = exporter::ResolveExportMoment("", whole.summary);
  ASSERT_TRUE(moment.ok()) << moment.status();
  ASSERT_TRUE(moment->stop_at_seq.has_value());  // the OOM, which nothing recovered
  EXPECT_EQ(*moment->stop_at_seq, whole.summary.ooms[0].failure.seq);
  const exporter::ExportInput at_oom = Replay(ExportTrace().frames(), *moment);
  ModuleOffsetSymbolizer symbolizer(at_oom.summary.modules);
  exporter::TorchSnapshotStats stats;
  const std::string bytes = exporter::WriteTorchSnapshot(at_oom, symbolizer, &stats);
  EXPECT_GT(stats.history_entries, 0u);
  auto doc = torch::PickleReader().Parse(bytes, "export");
  ASSERT_TRUE(doc.ok()) << doc.status();
  const torch::PickleValue* traces = doc->root().Find("device_traces");
  ASSERT_NE(traces, nullptr);
  const auto& dev0 = traces->items().at(0)->items();
  std::multiset<std::string> actions;
  for (const torch::PickleValue* e : dev0) actions.insert(e->Find("action")->string_value());
  EXPECT_EQ(actions.count("segment_alloc"), 2u) << "A and B (C is a VMM reservation: mapped)";
  EXPECT_EQ(actions.count("segment_map"), 1u);
  EXPECT_GE(actions.count("alloc"), 5u);  // A's three blocks, B whole, C's two
  EXPECT_EQ(actions.count("oom"), 1u);
  EXPECT_EQ(dev0.back()->Find("action")->string_value(), "oom");
  // B, a plain cudaMalloc, is one allocation filling its segment, as the segments show it.
  bool b_whole = false;
  for (const torch::PickleValue* e : dev0) {
    if (e->Find("action")->string_value() == "alloc" &&
        static_cast<uint64_t>(e->Find("addr")->int_value()) == kSegB) {
      b_whole = static_cast<uint64_t>(e->Find("size")->int_value()) == 2 * kMiB;
    }
  }
  EXPECT_TRUE(b_whole);
  // Consistent with the segments: each address whose last event is an alloc is an active block,
  // and each active block whose address the history names ends allocated there.
  std::map<uint64_t, std::string> last;
  for (const torch::PickleValue* e : dev0) {
    const std::string a = e->Find("action")->string_value();
    if (a == "alloc" || a == "free_requested" || a == "free_completed") {
      last[static_cast<uint64_t>(e->Find("addr")->int_value())] = a;
    }
  }
  std::set<uint64_t> active;
  for (const torch::PickleValue* seg : doc->root().Find("segments")->items()) {
    for (const torch::PickleValue* b : seg->Find("blocks")->items()) {
      if (b->Find("state")->string_value() != "inactive") {
        active.insert(static_cast<uint64_t>(b->Find("address")->int_value()));
      }
    }
  }
  for (const auto& [addr, action] : last) {
    EXPECT_EQ(action != "free_completed", active.count(addr) == 1) << std::hex << addr;
  }
}

TEST(ExportHistoryTest, MomentsAreChosenFromTheWholeRun) {
  const ModelSummary s = Replay(ExportTrace().frames()).summary;
  auto end = exporter::ResolveExportMoment("end", s);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->stop_at_seq.has_value());
  auto peak = exporter::ResolveExportMoment("peak", s);
  ASSERT_TRUE(peak.ok());
  EXPECT_EQ(peak->stop_at_seq, s.devices[0].peak_reserved_seq);
  auto oom1 = exporter::ResolveExportMoment("oom:1", s);
  ASSERT_TRUE(oom1.ok());
  EXPECT_EQ(oom1->stop_at_seq, s.ooms[0].failure.seq);
  EXPECT_TRUE(absl::IsNotFound(exporter::ResolveExportMoment("oom:2", s).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(exporter::ResolveExportMoment("oom:0", s).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(exporter::ResolveExportMoment("middle", s).status()));
}

// --- import ------------------------------------------------------------------------------

void Frames(exporter::PickleWriter& w, const char* function) {
  w.BeginList();
  w.BeginDict();
  w.String("name");
  w.String(function);
  w.String("filename");
  w.String("train.py");
  w.String("line");
  w.Uint(7);
  w.EndDict();
  w.EndList();
}
void Entry(exporter::PickleWriter& w, const char* action, uint64_t addr, uint64_t size,
           uint64_t time_us) {
  w.BeginDict();
  w.String("action");
  w.String(action);
  w.String(std::string_view(action) == "oom" ? "device_free" : "addr");
  w.Uint(addr);
  w.String("size");
  w.Uint(size);
  w.String("stream");
  w.Uint(0);
  w.String("time_us");
  w.Uint(time_us);
  w.String("frames");
  Frames(w, action);
  w.EndDict();
}

constexpr uint64_t kSeg = 0x7f0000000000;
// One 20 MiB segment holding a 10 MiB block at +8 MiB: what is left after the history below
// (an 8 MiB block at +0 came and went). `history`: the device trace; `list`: the bare list
// torch.cuda.memory_snapshot() returns.
std::string Snapshot(bool history, bool list = false, bool broken = false) {
  exporter::PickleWriter w;
  if (!list) {
    w.BeginDict();
    w.String("segments");
  }
  w.BeginList();
  w.BeginDict();
  w.String("device");
  w.Uint(0);
  w.String("address");
  w.Uint(kSeg);
  w.String("total_size");
  w.Uint(20 * kMiB);
  w.String("stream");
  w.Uint(0);
  w.String("blocks");
  w.BeginList();
  const uint64_t pieces[][2] = {{0, 8}, {8, 10}, {18, 2}};
  for (int i = 0; i < 3; ++i) {
    w.BeginDict();
    w.String("address");
    w.Uint(kSeg + pieces[i][0] * kMiB);
    w.String("size");
    w.Uint(pieces[i][1] * kMiB);
    w.String("state");
    w.String(i == 1 ? "active_allocated" : "inactive");
    w.EndDict();
  }
  w.EndList();
  w.EndDict();
  w.EndList();
  if (list) return w.Finish();
  w.String("device_traces");
  w.BeginList();
  w.BeginList();
  if (history) {
    Entry(w, "segment_alloc", kSeg, 20 * kMiB, 100);
    Entry(w, "alloc", kSeg, 8 * kMiB, 110);
    Entry(w, "alloc", kSeg + 8 * kMiB, 10 * kMiB, 120);
    // Broken: the block freed lies outside every segment.
    const uint64_t freed = broken ? kSeg + 30 * kMiB : kSeg;
    Entry(w, "free_requested", freed, 8 * kMiB, 130);
    Entry(w, "free_completed", freed, 8 * kMiB, 130);
  }
  // 12 MiB asked, 5 MiB free on the device: held 10 + 12 <= free 5 + reserved 20, so neither
  // capacity nor other processes; the 10 cached + 5 free bytes exist, not in one piece.
  Entry(w, "oom", 5 * kMiB, 12 * kMiB, 140);
  w.EndList();
  w.EndList();
  w.EndDict();
  return w.Finish();
}

ModelSummary Import(const std::string& bytes, torch::ImportResult* result = nullptr) {
  auto imported = torch::ImportTorchSnapshotBytes(bytes, "test.pickle");
  EXPECT_TRUE(imported.ok()) << imported.status();
  if (!imported.ok()) return {};
  ProcessModel model;
  for (const v1::Frame& f : imported->frames) model.Apply(f);
  if (result != nullptr) *result = *imported;
  return model.Summarize();
}

json JsonReport(const ModelSummary& s) {
  ModuleOffsetSymbolizer symbolizer(s.modules);
  std::ostringstream out;
  RenderJson(s, symbolizer, out);
  return json::parse(out.str());
}

TEST(ImportHistoryTest, TheHistoryIsReplayedSoPeaksAreTheHistorys) {
  torch::ImportResult result;
  const ModelSummary s = Import(Snapshot(/*history=*/true), &result);
  EXPECT_TRUE(result.history_replayed);
  EXPECT_TRUE(result.warnings.empty()) << result.warnings.front();
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].allocated_bytes, 10 * kMiB);       // the snapshot's moment
  EXPECT_EQ(s.devices[0].peak_allocated_bytes, 18 * kMiB);  // both blocks, at 120 us
  EXPECT_EQ(s.devices[0].peak_reserved_bytes, 20 * kMiB);
  EXPECT_TRUE(s.imported_history);
  const json j = JsonReport(s);
  EXPECT_EQ(j["devices"][0]["peak_scope"], "in the snapshot's history");
  ASSERT_EQ(j["ooms"].size(), 1u);
  EXPECT_EQ(j["ooms"][0]["class"], "fragmentation") << j["ooms"][0]["explanation"];
}

TEST(ImportHistoryTest, WithoutHistoryPeaksAreLabelledAtSnapshotTime) {
  torch::ImportResult result;
  const ModelSummary s = Import(Snapshot(/*history=*/false), &result);
  EXPECT_FALSE(result.history_replayed);
  EXPECT_EQ(s.devices[0].peak_allocated_bytes, 10 * kMiB);
  const json j = JsonReport(s);
  EXPECT_EQ(j["devices"][0]["peak_scope"], "at snapshot time");
  EXPECT_EQ(j["ooms"][0]["peak_scope"], "at snapshot time");
  // The device's free bytes decide the class even without its total.
  EXPECT_EQ(j["ooms"][0]["class"], "fragmentation") << j["ooms"][0]["explanation"];
}

TEST(ImportHistoryTest, AHistoryThatDoesNotLeadToTheSnapshotIsNotReplayed) {
  torch::ImportResult result;
  const ModelSummary s = Import(Snapshot(/*history=*/true, false, /*broken=*/true), &result);
  EXPECT_FALSE(result.history_replayed);
  ASSERT_FALSE(result.warnings.empty());
  EXPECT_NE(result.warnings[0].find("device_traces[0][4]"), std::string::npos)
      << result.warnings[0];
  EXPECT_EQ(s.devices[0].allocated_bytes, 10 * kMiB);
  EXPECT_EQ(JsonReport(s)["devices"][0]["peak_scope"], "at snapshot time");
}

TEST(ImportHistoryTest, TheBareListOfMemorySnapshotIsRead) {
  const ModelSummary s = Import(Snapshot(false, /*list=*/true));
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].reserved_bytes, 20 * kMiB);
  EXPECT_EQ(s.devices[0].allocated_bytes, 10 * kMiB);
  // Anything else at the top is still refused, naming what was found.
  exporter::PickleWriter w;
  w.String("not a snapshot");
  auto bad = torch::ImportTorchSnapshotBytes(w.Finish(), "odd.pickle");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("odd.pickle"), std::string_view::npos);
  EXPECT_NE(bad.status().message().find("list of segments"), std::string_view::npos);
}

}  // namespace
}  // namespace fragscope::testing
