// Collector: replaying a trace into ProcessModel, and the largest-free-range query.
//
//   collector_bench --generate=N --trace=FILE     writes an N-event trace and exits
//   collector_bench --trace=FILE [gbench flags]   BM_ReadOnly, BM_Replay over that file
//   collector_bench [gbench flags]                BM_LargestFreeQuery (model of 1 M live blocks)
//   collector_bench --stats=FILE                  prints what an agent trace says it recorded and
//                                                 dropped (scripts/bench, for the hook benchmark)
//
// The trace looks like an agent's (FrameWriter, streamed: never more than one frame in memory):
// Hello, DeviceInfo, a module map and 256 stacks, then N events: 70 % sub-allocator blocks in 64
// annotated 256 MiB segments, 20 % cudaMalloc/cudaFree segments, 10 % stream-ordered pool blocks,
// a MemInfo every 1000 events and a PERIODIC Snapshot of the whole live set every 100 000 (the
// smallest default FRAGSCOPE_SNAPSHOT_EVERY of the agent: the most snapshot work), then End. Each
// event picks a slot at random and allocates it when free, frees it when live, so the live set
// stays about half the slots
// (~12 000 entries) whatever N is: peak RSS should not grow with N.
//
// Replay is one pass (Iterations(1)): read + Apply every frame, counters events_per_s (wall),
// events_per_cpu_s (process CPU time: the figure "on one core" on a shared machine) and
// peak_rss_mb (getrusage, the process's peak; run each benchmark in its own process so the
// figure is the replay's). BM_ReadOnly reads without applying, to separate decoding from model;
// both read through ArenaFrameReader, as StreamSession does. BM_ReadHeapFrames reads into a heap
// Frame instead (FrameReader::Next(Frame*), as fragscope-dump and the tests read), to show what the
// arena saves.
//
// On a loaded machine even CPU time moves by 10 % between runs; for before/after comparisons of
// the model, count instructions instead, which do not depend on load (RESULTS.md):
//   valgrind --tool=callgrind ./fragscope_collector_bench --trace=T --benchmark_filter=BM_Replay
// (same for BM_ReadOnly; the difference divided by the events is the model's cost per event).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "fragscope.pb.h"
#include "fragscope/model/model_summary.h"
#include "fragscope/model/process_model.h"
#include "fragscope/server/stream_session.h"
#include "fragscope/trace/arena_frame_reader.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/frame_writer.h"

namespace fragscope::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr int kStacks = 256;
constexpr int kAnnotatedSegments = 64;
constexpr uint64_t kAnnotatedSegmentBytes = 256 * kMiB;
constexpr int kBlocksPerSegment = 256;  // 1 MiB slots
constexpr int kSegmentSlots = 4096;     // cudaMalloc segments, 128 MiB apart
constexpr int kPoolSlots = 4096;        // cudaMallocAsync blocks, 1 MiB apart
constexpr uint64_t kAnnotatedBase = uint64_t{0x7f00} << 32;
constexpr uint64_t kSegmentBase = uint64_t{0x7e00} << 32;
constexpr uint64_t kPoolBase = uint64_t{0x7d00} << 32;
constexpr uint64_t kPool = 0xabc000;
constexpr uint64_t kSnapshotEvery = 100000;
constexpr uint64_t kMemInfoEvery = 1000;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "collector_bench: %s\n", what.c_str());
  std::exit(2);
}

template <typename Event>
void Stamp(Event* e, uint64_t seq, uint64_t stack) {
  e->set_seq(seq);
  e->set_time_ns(seq * 100);
  e->set_tid(1234);
  e->set_stack_id(stack);
}

// Streams an N-event trace to `path`.
class TraceGenerator {
 public:
  explicit TraceGenerator(FrameWriter* out) : out_(out), rng_(42) {}

  void Run(uint64_t events) {
    Preamble();
    for (uint64_t i = 0; i < events; ++i) {
      uint32_t r = rng_() % 100;
      if (r < 70) {
        BlockEvent();
      } else if (r < 90) {
        SegmentEvent();
      } else {
        PoolEvent();
      }
      if (seq_ % kMemInfoEvery == 0) MemInfo();
      if (seq_ % kSnapshotEvery == 0) Snapshot();
    }
    v1::Frame f;
    f.mutable_end()->set_seq(seq_);
    f.mutable_end()->set_events_recorded(seq_);
    f.mutable_end()->set_exit_status(0);
    Write(f);
  }

 private:
  void Write(const v1::Frame& f) {
    if (absl::Status s = out_->Write(f); !s.ok()) Die(std::string(s.message()));
  }

  uint64_t Stack() { return 1 + rng_() % kStacks; }

  void Preamble() {
    v1::Frame f;
    v1::Hello* h = f.mutable_hello();
    h->set_format_major(1);
    h->set_pid(4242);
    h->set_exe("/usr/bin/python3");
    h->set_backend(v1::Hello::BACKEND_PRELOAD);
    h->set_stack_depth(32);
    Write(f);
    f.Clear();
    f.mutable_device()->set_ordinal(0);
    f.mutable_device()->set_total_bytes(80 * kGiB);
    f.mutable_device()->set_uuid(std::string(16, '\x01'));
    f.mutable_device()->set_name("Bench GPU");
    Write(f);
    f.Clear();
    v1::Module* m = f.mutable_module_map()->add_modules();
    m->set_path("/usr/lib/libbench.so");
    m->set_load_address(0x400000);
    m->set_size(64 * kMiB);
    Write(f);
    f.Clear();
    for (int id = 1; id <= kStacks; ++id) {
      v1::Stack* s = f.mutable_stacks()->add_stacks();
      s->set_id(id);
      for (int i = 0; i < 32; ++i) s->add_pcs(0x400000 + ((id * 7919 + i * 104729) % (60 * kMiB)));
    }
    Write(f);
    // The annotated segments live for the whole trace.
    for (int i = 0; i < kAnnotatedSegments; ++i) {
      f.Clear();
      v1::AllocEvent* e = f.mutable_alloc();
      Stamp(e, ++seq_, Stack());
      e->set_api(v1::API_cudaMalloc);
      e->set_address(kAnnotatedBase + i * kGiB);
      e->set_size(kAnnotatedSegmentBytes);
      e->set_device(0);
      e->set_kind(v1::MEMORY_KIND_DEVICE);
      Write(f);
    }
  }

  void BlockEvent() {
    const int slot = static_cast<int>(rng_() % (kAnnotatedSegments * kBlocksPerSegment));
    const uint64_t address =
        kAnnotatedBase + (slot / kBlocksPerSegment) * kGiB + (slot % kBlocksPerSegment) * kMiB;
    v1::Frame f;
    v1::BlockEvent* e = f.mutable_block();
    const bool alloc = block_size_[slot] == 0;
    if (alloc) block_size_[slot] = 512 * (1 + rng_() % 2048);  // 512 B .. 1 MiB
    Stamp(e, ++seq_, alloc ? Stack() : 0);
    e->set_api(alloc ? v1::API_fragscope_block_alloc : v1::API_fragscope_block_free);
    e->set_op(alloc ? v1::BlockEvent::OP_ALLOC : v1::BlockEvent::OP_FREE);
    e->set_address(address);
    e->set_size(block_size_[slot]);
    e->set_device(0);
    e->set_allocator(1);
    if (!alloc) block_size_[slot] = 0;
    Write(f);
  }

  void SegmentEvent() {
    const int slot = static_cast<int>(rng_() % kSegmentSlots);
    const uint64_t address = kSegmentBase + slot * 128 * kMiB;
    v1::Frame f;
    if (segment_size_[slot] == 0) {
      segment_size_[slot] = 2 * kMiB * (1 + rng_() % 32);
      v1::AllocEvent* e = f.mutable_alloc();
      Stamp(e, ++seq_, Stack());
      e->set_api(v1::API_cudaMalloc);
      e->set_address(address);
      e->set_size(segment_size_[slot]);
      e->set_device(0);
      e->set_kind(v1::MEMORY_KIND_DEVICE);
    } else {
      v1::FreeEvent* e = f.mutable_free();
      Stamp(e, ++seq_, 0);
      e->set_api(v1::API_cudaFree);
      e->set_address(address);
      e->set_size(segment_size_[slot]);
      e->set_device(0);
      segment_size_[slot] = 0;
    }
    Write(f);
  }

  void PoolEvent() {
    const int slot = static_cast<int>(rng_() % kPoolSlots);
    const uint64_t address = kPoolBase + slot * kMiB;
    v1::Frame f;
    if (pool_size_[slot] == 0) {
      pool_size_[slot] = 512 * (1 + rng_() % 2048);
      v1::AllocEvent* e = f.mutable_alloc();
      Stamp(e, ++seq_, Stack());
      e->set_api(v1::API_cudaMallocAsync);
      e->set_address(address);
      e->set_size(pool_size_[slot]);
      e->set_device(0);
      e->set_stream(0);
      e->set_pool(kPool);
      e->set_kind(v1::MEMORY_KIND_POOL);
    } else {
      v1::FreeEvent* e = f.mutable_free();
      Stamp(e, ++seq_, 0);
      e->set_api(v1::API_cudaFreeAsync);
      e->set_address(address);
      e->set_size(pool_size_[slot]);
      e->set_device(0);
      e->set_pool(kPool);
      pool_size_[slot] = 0;
    }
    Write(f);
  }

  void MemInfo() {
    v1::Frame f;
    v1::MemInfo* m = f.mutable_mem_info();
    m->set_seq(seq_);
    m->set_time_ns(seq_ * 100);
    m->set_device(0);
    m->set_free_bytes(40 * kGiB);
    m->set_total_bytes(80 * kGiB);
    Write(f);
  }

  void Snapshot() {
    v1::Frame f;
    v1::Snapshot* s = f.mutable_snapshot();
    s->set_seq(seq_);
    s->set_time_ns(seq_ * 100);
    s->set_reason(v1::Snapshot::REASON_PERIODIC);
    s->set_complete_history(true);
    auto add_alloc = [&](uint64_t address, uint64_t size, v1::Api api, v1::MemoryKind kind,
                         uint64_t pool) {
      v1::LiveAllocation* a = s->add_allocations();
      a->set_address(address);
      a->set_size(size);
      a->set_device(0);
      a->set_pool(pool);
      a->set_api(api);
      a->set_kind(kind);
    };
    for (int i = 0; i < kAnnotatedSegments; ++i) {
      add_alloc(kAnnotatedBase + i * kGiB, kAnnotatedSegmentBytes, v1::API_cudaMalloc,
                v1::MEMORY_KIND_DEVICE, 0);
    }
    for (int i = 0; i < kSegmentSlots; ++i) {
      if (segment_size_[i] != 0) {
        add_alloc(kSegmentBase + i * 128 * kMiB, segment_size_[i], v1::API_cudaMalloc,
                  v1::MEMORY_KIND_DEVICE, 0);
      }
    }
    for (int i = 0; i < kPoolSlots; ++i) {
      if (pool_size_[i] != 0) {
        add_alloc(kPoolBase + i * kMiB, pool_size_[i], v1::API_cudaMallocAsync,
                  v1::MEMORY_KIND_POOL, kPool);
      }
    }
    for (int i = 0; i < kAnnotatedSegments * kBlocksPerSegment; ++i) {
      if (block_size_[i] == 0) continue;
      v1::LiveBlock* b = s->add_blocks();
      b->set_address(kAnnotatedBase + (i / kBlocksPerSegment) * kGiB +
                     (i % kBlocksPerSegment) * kMiB);
      b->set_size(block_size_[i]);
      b->set_device(0);
      b->set_allocator(1);
    }
    Write(f);
  }

  FrameWriter* out_;
  std::mt19937_64 rng_;
  uint64_t seq_ = 0;
  std::vector<uint64_t> block_size_ =
      std::vector<uint64_t>(kAnnotatedSegments * kBlocksPerSegment, 0);
  std::vector<uint64_t> segment_size_ = std::vector<uint64_t>(kSegmentSlots, 0);
  std::vector<uint64_t> pool_size_ = std::vector<uint64_t>(kPoolSlots, 0);
};

double PeakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Opens `path` for one pass, or marks the benchmark skipped with the reader's error.
std::optional<FrameReader> OpenOrSkip(benchmark::State& state, const std::string& path) {
  absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(path);
  if (reader.ok()) return std::move(*reader);
  state.SkipWithError(std::string(reader.status().message()).c_str());
  return std::nullopt;
}

// One pass over `path` reading into a heap v1::Frame (what StreamSession did until it took
// ArenaFrameReader): what the arena saves, in BM_ReadOnly's terms.
void ReadHeapFrames(benchmark::State& state, const std::string& path) {
  for (auto _ : state) {
    std::optional<FrameReader> reader = OpenOrSkip(state, path);
    if (!reader) return;
    v1::Frame frame;
    uint64_t frames = 0;
    const double cpu_start = CpuSeconds();
    while (reader->Next(&frame) == FrameReader::Result::kFrame) ++frames;
    const double cpu_seconds = CpuSeconds() - cpu_start;
    state.counters["frames"] = static_cast<double>(frames);
    state.counters["cpu_seconds"] = cpu_seconds;
  }
}

// Events as the agent counts them: End.events_recorded of the last frame, else the frames.
double EventCount(uint64_t events_recorded, uint64_t frames) {
  return static_cast<double>(events_recorded > 0 ? events_recorded : frames);
}

// The counters of a timed replay (BM_Replay, BM_Report: the same names, so scripts/bench reads
// them alike).
void SetReplayCounters(benchmark::State& state, double events, uint64_t frames, double seconds,
                       double cpu_seconds) {
  state.SetIterationTime(seconds);
  state.counters["events"] = events;
  state.counters["frames"] = static_cast<double>(frames);
  state.counters["seconds"] = seconds;
  state.counters["events_per_s"] = events / seconds;
  // One thread: process CPU time is the replay's time on one core, whatever else the machine
  // runs (wall time also counts the waits for a core).
  state.counters["cpu_seconds"] = cpu_seconds;
  state.counters["events_per_cpu_s"] = events / cpu_seconds;
}

// One pass over `path`; applies frames to a model when `apply`.
void ReplayOnce(benchmark::State& state, const std::string& path, bool apply) {
  for (auto _ : state) {
    std::optional<FrameReader> reader = OpenOrSkip(state, path);
    if (!reader) return;
    ProcessModel model;
    // The model's part of the collector's replay loop (StreamSession without the seq orderer
    // and its lock: BM_Report): event frames applied as decoded, the rest parsed into an
    // arena, applied, let go.
    ArenaFrameReader frames_in(*reader);
    const v1::Frame* frame = nullptr;
    const HotEvent* event = nullptr;
    uint64_t frames = 0;
    uint64_t events_recorded = 0;
    const double cpu_start = CpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    while (frames_in.Next(&frame, &event) == FrameReader::Result::kFrame) {
      ++frames;
      if (event != nullptr) {
        if (apply) model.Apply(*event);
        continue;
      }
      if (apply) model.Apply(*frame);
      if (frame->has_end()) events_recorded = frame->end().events_recorded();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu_seconds = CpuSeconds() - cpu_start;
    SetReplayCounters(state, EventCount(events_recorded, frames), frames, seconds, cpu_seconds);
    if (apply) {
      ModelSummary summary = model.Summarize();
      benchmark::DoNotOptimize(summary);
      state.counters["unmatched_events"] = static_cast<double>(summary.unmatched_events);
    }
  }
  state.counters["peak_rss_mb"] = PeakRssMiB();
}

// EventCount of the trace at `path`: a pass that reads only.
double EventsIn(const std::string& path) {
  absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(path);
  if (!reader.ok()) return 0;
  ArenaFrameReader frames_in(*reader);
  const v1::Frame* frame = nullptr;
  uint64_t frames = 0, recorded = 0;
  while (frames_in.Next(&frame) == FrameReader::Result::kFrame) {
    if (frame->has_end()) recorded = frame->end().events_recorded();
    ++frames;
  }
  return EventCount(recorded, frames);
}

// One pass over `path` the way `fragscope report` and the daemon take it: StreamSession (seq
// orderer, the lock query threads take, the reader) around the same model. BM_Replay minus this
// is what the session adds to the model.
void ReportOnce(benchmark::State& state, const std::string& path) {
  for (auto _ : state) {
    std::optional<FrameReader> reader = OpenOrSkip(state, path);
    if (!reader) return;
    StreamSession session(ModelOptions{}, nullptr);
    const double cpu_start = CpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    const StreamOutcome outcome = session.Run(*reader);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu_seconds = CpuSeconds() - cpu_start;
    if (outcome.result != FrameReader::Result::kEnd) {
      state.SkipWithError(outcome.error.c_str());
      return;
    }
    SetReplayCounters(state, EventsIn(path) /* not timed */, outcome.frames, seconds, cpu_seconds);
    ModelSummary summary = session.Summarize();
    benchmark::DoNotOptimize(summary);
    state.counters["unmatched_events"] = static_cast<double>(summary.unmatched_events);
  }
  state.counters["peak_rss_mb"] = PeakRssMiB();
}

// 1000 annotated 1 GiB segments, each holding 1000 blocks of varying size with gaps.
ProcessModel& MillionBlockModel() {
  static ProcessModel* model = [] {
    auto* m = new ProcessModel;
    std::mt19937_64 rng(7);
    uint64_t seq = 0;
    v1::Frame f;
    f.mutable_device()->set_ordinal(0);
    f.mutable_device()->set_total_bytes(2048 * kGiB);
    m->Apply(f);
    for (int s = 0; s < 1000; ++s) {
      const uint64_t base = kAnnotatedBase + s * kGiB;
      f.Clear();
      v1::AllocEvent* a = f.mutable_alloc();
      Stamp(a, ++seq, 1 + s % kStacks);
      a->set_api(v1::API_cudaMalloc);
      a->set_address(base);
      a->set_size(kGiB);
      a->set_device(0);
      a->set_kind(v1::MEMORY_KIND_DEVICE);
      m->Apply(f);
      for (int b = 0; b < 1000; ++b) {
        f.Clear();
        v1::BlockEvent* e = f.mutable_block();
        Stamp(e, ++seq, 1 + rng() % kStacks);
        e->set_api(v1::API_fragscope_block_alloc);
        e->set_op(v1::BlockEvent::OP_ALLOC);
        e->set_address(base + b * kMiB);
        e->set_size(512 * (1 + rng() % 2047));  // < 1 MiB: a free gap after every block
        e->set_device(0);
        e->set_allocator(1);
        m->Apply(f);
      }
    }
    return m;
  }();
  return *model;
}

// Summarize() is the public way to read the largest free range (DeviceSummary); the model
// keeps the figure in O(1) internally but exposes no cheaper accessor.
void BM_LargestFreeQuery(benchmark::State& state) {
  const ProcessModel& model = MillionBlockModel();
  uint64_t largest = 0;
  for (auto _ : state) {
    ModelSummary s = model.Summarize();
    largest = s.devices.empty() ? 0 : s.devices[0].largest_free_range_bytes;
    benchmark::DoNotOptimize(largest);
  }
  state.counters["queries_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["largest_free_bytes"] = static_cast<double>(largest);
  state.counters["peak_rss_mb"] = PeakRssMiB();
}
BENCHMARK(BM_LargestFreeQuery)->Unit(benchmark::kMicrosecond);

// Takes --name=value out of argv (gbench rejects flags it does not know).
std::string TakeFlag(int* argc, char** argv, const char* name) {
  const std::string prefix = std::string("--") + name + "=";
  std::string value;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      value = argv[i] + prefix.size();
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return value;
}

// One line of JSON about an agent's trace: frames, events recorded and dropped (End, else the
// Drops frames), whether it ended cleanly.
int PrintStats(const std::string& path) {
  absl::StatusOr<fragscope::FrameReader> reader = fragscope::FrameReader::OpenFile(path);
  if (!reader.ok()) Die(std::string(reader.status().message()));
  fragscope::v1::Frame frame;
  uint64_t frames = 0, events = 0, dropped = 0, recorded = 0;
  bool ended = false;
  while (reader->Next(&frame) == fragscope::FrameReader::Result::kFrame) {
    ++frames;
    if (frame.has_alloc() || frame.has_free() || frame.has_map() || frame.has_handle() ||
        frame.has_failed()) {
      ++events;
    } else if (frame.has_drops()) {
      dropped = std::max<uint64_t>(dropped, frame.drops().total_dropped());
    } else if (frame.has_end()) {
      ended = true;
      recorded = frame.end().events_recorded();
      dropped = std::max<uint64_t>(dropped, frame.end().total_dropped());
    }
  }
  std::printf(
      "{\"frames\": %llu, \"events_shipped\": %llu, \"events_recorded\": %llu, "
      "\"dropped\": %llu, \"ended\": %s}\n",
      static_cast<unsigned long long>(frames), static_cast<unsigned long long>(events),
      static_cast<unsigned long long>(recorded), static_cast<unsigned long long>(dropped),
      ended ? "true" : "false");
  return 0;
}

}  // namespace
}  // namespace fragscope::bench

int main(int argc, char** argv) {
  using namespace fragscope::bench;
  const std::string stats = TakeFlag(&argc, argv, "stats");
  if (!stats.empty()) return PrintStats(stats);
  const std::string generate = TakeFlag(&argc, argv, "generate");
  const std::string trace = TakeFlag(&argc, argv, "trace");
  if (!generate.empty()) {
    if (trace.empty()) Die("--generate needs --trace=FILE");
    // Plain, as the agent's own trace files are: the replay figures are the reader's and the
    // model's, not zstd's.
    absl::StatusOr<fragscope::FrameWriter> writer =
        fragscope::FrameWriter::CreateFile(trace, fragscope::TraceCompression::kNone);
    if (!writer.ok()) Die(std::string(writer.status().message()));
    TraceGenerator(&*writer).Run(std::strtoull(generate.c_str(), nullptr, 10));
    if (absl::Status s = writer->Close(); !s.ok()) Die(std::string(s.message()));
    return 0;
  }
  if (!trace.empty()) {
    benchmark::RegisterBenchmark("BM_ReadOnly",
                                 [trace](benchmark::State& s) { ReplayOnce(s, trace, false); })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_ReadHeapFrames",
                                 [trace](benchmark::State& s) { ReadHeapFrames(s, trace); })
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_Replay",
                                 [trace](benchmark::State& s) { ReplayOnce(s, trace, true); })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_Report",
                                 [trace](benchmark::State& s) { ReportOnce(s, trace); })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
