#include "reliability_support.h"
#include "fragscope/server/seq_orderer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "fragscope/model/process_model.h"
#include "fragscope/trace/frame_reader.h"

extern char** environ;

namespace fragscope::reliability_test {

std::string RelApp(const std::string& name) {
  return std::string(FRAGSCOPE_REL_APP_DIR) + "/" + name;
}
std::string CliBin() { return FRAGSCOPE_REL_CLI_BIN; }
std::string CollectorBin() { return FRAGSCOPE_REL_COLLECTOR_BIN; }
std::string DemoBin() { return FRAGSCOPE_REL_DEMO_BIN; }
std::string LibOmp() { return FRAGSCOPE_REL_LIBOMP; }
bool UnderSanitizer() { return std::string(FRAGSCOPE_REL_SANITIZE).size() > 0; }

// RunProgram's environment rule (agent_test::ChildCommand): nothing of the caller's tracing setup
// leaks in.
Background::Background(const std::string& program, const std::vector<std::string>& args,
                       const RunOptions& options, const std::string& out_path,
                       const std::string& err_path)
    : out_path_(out_path), err_path_(err_path) {
  agent_test::ChildCommand command(program, args, options);
  pid_ = fork();
  if (pid_ == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    execve(command.program(), command.argv(), command.envp());
    _exit(127);
  }
}

Background::~Background() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

void Background::Kill(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

RunResult Background::Wait() {
  RunResult result;
  if (pid_ <= 0) return result;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.out = agent_test::ReadFile(out_path_);
  result.err = agent_test::ReadFile(err_path_);
  return result;
}

Reconciled ReadAndModel(const std::string& trace_path, bool replay_by_seq) {
  Reconciled r;
  absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(trace_path);
  if (!reader.ok()) {
    r.error = std::string(reader.status().message());
    return r;
  }
  r.opened = true;
  // The collector's own path: frames go through the SeqOrderer every StreamSession uses.
  ProcessModel model;
  SeqOrderer orderer;
  const auto apply = [&model](const v1::Frame& f) { model.Apply(f); };
  v1::Frame frame;
  // The snapshot reason the agent promises next after a Drops frame (RESYNC after ring drops,
  // STREAM_START after a reconnect, whose snapshot may be preceded by the stacks it names).
  // (REASON_UNSPECIFIED: none expected.)
  v1::Snapshot::Reason expect_snapshot = v1::Snapshot::REASON_UNSPECIFIED;
  uint64_t max_seq = 0;
  struct Change {
    bool alloc;
    uint64_t address, size;
  };
  std::map<uint64_t, Change> by_seq;
  for (;;) {
    FrameReader::Result res = reader->Next(&frame);
    if (res != FrameReader::Result::kFrame) {
      r.clean = res == FrameReader::Result::kEnd;
      if (!r.clean) r.error = reader->error();
      break;
    }
    ++r.frames;
    const bool stacks_before_snapshot =
        expect_snapshot == v1::Snapshot::REASON_STREAM_START && frame.has_stacks();
    if (expect_snapshot != v1::Snapshot::REASON_UNSPECIFIED && !stacks_before_snapshot) {
      r.every_drop_followed_by_resync = r.every_drop_followed_by_resync && frame.has_snapshot() &&
                                        frame.snapshot().reason() == expect_snapshot;
      expect_snapshot = v1::Snapshot::REASON_UNSPECIFIED;
    }
    switch (frame.body_case()) {
      case v1::Frame::kAlloc:
      case v1::Frame::kFree:
      case v1::Frame::kMap:
      case v1::Frame::kHandle:
      case v1::Frame::kFailed:
      case v1::Frame::kBlock:
      case v1::Frame::kMark: {
        ++r.events;
        const uint64_t seq = agent_test::SeqOf(frame);
        if (seq < max_seq) ++r.seq_inversions;
        max_seq = std::max(max_seq, seq);
        if (replay_by_seq && frame.has_alloc() && frame.alloc().device() == 0) {
          by_seq[seq] = Change{true, frame.alloc().address(), frame.alloc().size()};
        }
        if (replay_by_seq && frame.has_free() && frame.free().result() == 0) {
          by_seq[seq] = Change{false, frame.free().address(), 0};
        }
        break;
      }
      case v1::Frame::kHello:
        r.resumed = frame.hello().resumed();
        break;
      case v1::Frame::kDrops:
        r.dropped_frames += frame.drops().dropped_events();
        if (frame.drops().reason() == v1::Drops::REASON_DISCONNECTED) {
          r.disconnect_dropped += frame.drops().dropped_events();
          expect_snapshot = v1::Snapshot::REASON_STREAM_START;
        } else {
          expect_snapshot = v1::Snapshot::REASON_RESYNC;
        }
        break;
      case v1::Frame::kSnapshot:
        if (frame.snapshot().reason() == v1::Snapshot::REASON_RESYNC) ++r.resync_snapshots;
        if (frame.snapshot().reason() == v1::Snapshot::REASON_PERIODIC) ++r.periodic_snapshots;
        break;
      case v1::Frame::kMemInfo:
        ++r.meminfo_frames;
        break;
      case v1::Frame::kEnd:
        r.has_end = true;
        r.end_recorded = frame.end().events_recorded();
        r.end_dropped = frame.end().total_dropped();
        r.end_in_snapshots = frame.end().events_in_snapshots();
        break;
      default:
        break;
    }
    orderer.Push(frame, apply);
  }
  orderer.Flush(apply);
  r.orderer_late = orderer.late();
  r.orderer_covered = orderer.covered_by_snapshot();
  if (expect_snapshot != v1::Snapshot::REASON_UNSPECIFIED) r.every_drop_followed_by_resync = false;
  uint64_t replay_bytes = 0;
  for (const auto& [seq, change] : by_seq) {
    auto it = r.seq_replay_live.find(change.address);
    if (it != r.seq_replay_live.end()) {
      replay_bytes -= it->second;
      r.seq_replay_live.erase(it);
    }
    if (change.alloc) {
      r.seq_replay_live[change.address] = change.size;
      replay_bytes += change.size;
    }
    r.seq_replay_peak_bytes = std::max(r.seq_replay_peak_bytes, replay_bytes);
  }
  for (const SegmentLayout& s : model.SegmentLayouts(0, std::numeric_limits<std::size_t>::max())) {
    r.model_live[s.base] = s.size;
  }
  ModelSummary summary = model.Summarize();
  r.model_unmatched_events = summary.unmatched_events;
  r.model_events = summary.events;
  for (const DeviceSummary& d : summary.devices) {
    if (d.ordinal != 0) continue;
    r.model_reserved_bytes = d.reserved_bytes;
    r.model_peak_reserved_bytes = d.peak_reserved_bytes;
  }
  return r;
}

std::map<uint64_t, uint64_t> LiveDump(const std::string& path) {
  std::map<uint64_t, uint64_t> live;
  for (const auto& line : agent_test::Lines(agent_test::ReadFile(path))) {
    // "<kind> 0x<address> <size> <device>" as written by the fake driver.
    if (line.size() >= 4 && line[0] == "device" && line[3] == "0") {
      live[agent_test::ParseAddress(line[1])] = std::stoull(line[2]);
    }
  }
  return live;
}

int64_t EventsMade(const std::string& out) {
  for (const auto& line : agent_test::Lines(out)) {
    if (line.size() >= 2 && line[0] == "events") return std::stoll(line[1]);
  }
  return -1;
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace fragscope::reliability_test
