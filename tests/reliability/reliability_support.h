// Helpers shared by the reliability tests: paths baked in by CMake, a traced program started in
// the background, and a one-pass reader that reconciles a (possibly huge) trace with the model.
#ifndef FRAGSCOPE_TESTS_RELIABILITY_RELIABILITY_SUPPORT_H_
#define FRAGSCOPE_TESTS_RELIABILITY_RELIABILITY_SUPPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../agent/traced_process.h"

namespace fragscope::reliability_test {

using agent_test::RunOptions;
using agent_test::RunResult;

std::string RelApp(const std::string& name);  // tests/reliability/apps programs
std::string CliBin();                         // `fragscope`
std::string CollectorBin();                   // `fragscope-collector`
std::string DemoBin();                        // tests/demo/fragmenting_training
std::string LibOmp();                         // LLVM's libomp.so.5, "" when not installed
// True in a -DFRAGSCOPE_SANITIZE build (memory bounds and rates mean nothing there).
bool UnderSanitizer();

// A program started in the background with RunProgram's environment rules (clean FRAGSCOPE_*,
// FAKECUDA_* and LD_PRELOAD, the fake libraries on LD_LIBRARY_PATH, `options` on top), its
// stdout/stderr going to files.
class Background {
 public:
  Background(const std::string& program, const std::vector<std::string>& args,
             const RunOptions& options, const std::string& out_path, const std::string& err_path);
  ~Background();  // kills (SIGKILL) and reaps the process if still running
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  pid_t pid() const { return pid_; }
  // Waits for exit; fills exit_code/signal like RunProgram (out/err read from the files).
  RunResult Wait();
  void Kill(int sig);

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
};

// What one pass over a trace found.
struct Reconciled {
  bool opened = false;
  bool clean = false;  // ended on a frame boundary
  std::string error;
  bool has_end = false;
  uint64_t frames = 0;
  uint64_t events = 0;            // alloc/free/map/handle/failed/block/mark frames
  uint64_t dropped_frames = 0;    // sum of Drops.dropped_events
  uint64_t end_recorded = 0;      // End.events_recorded
  uint64_t end_dropped = 0;       // End.total_dropped
  uint64_t end_in_snapshots = 0;  // End.events_in_snapshots
  uint64_t resync_snapshots = 0;
  uint64_t periodic_snapshots = 0;
  uint64_t meminfo_frames = 0;
  uint32_t resumed = 0;             // Hello.resumed: the agent's reconnects before this stream
  uint64_t disconnect_dropped = 0;  // Drops (REASON_DISCONNECTED).dropped_events, summed
  bool every_drop_followed_by_resync = true;
  // The model's final live set on device 0: segment base -> size, from ProcessModel.
  std::map<uint64_t, uint64_t> model_live;
  uint64_t model_reserved_bytes = 0;
  uint64_t model_unmatched_events = 0;
  uint64_t model_events = 0;  // ModelSummary::events: event and MemInfo frames it applied
  uint64_t model_peak_reserved_bytes = 0;
  // Event frames whose seq is below one already read: the stream is not in seq order there.
  uint64_t seq_inversions = 0;
  // The SeqOrderer's counts (see seq_orderer.h): frames applied after a later seq (a release
  // over a gap that later filled) and state events skipped as covered by a snapshot.
  uint64_t orderer_late = 0;
  uint64_t orderer_covered = 0;
  // With `replay_by_seq`: alloc/free frames replayed in seq order (address -> size), what the
  // trace says is live on device 0 when order is taken from seq rather than from the stream.
  std::map<uint64_t, uint64_t> seq_replay_live;
  // The largest sum of seq_replay_live's sizes along the way.
  uint64_t seq_replay_peak_bytes = 0;
};

Reconciled ReadAndModel(const std::string& trace_path, bool replay_by_seq = false);

// The fake driver's FAKECUDA_LIVE_DUMP as address -> size, for the kinds a cudaMalloc makes.
std::map<uint64_t, uint64_t> LiveDump(const std::string& path);

// "events N" as printed by the reliability apps; -1 if absent.
int64_t EventsMade(const std::string& out);

// Number of occurrences of `needle` in `text`.
int Count(const std::string& text, const std::string& needle);

}  // namespace fragscope::reliability_test

#endif  // FRAGSCOPE_TESTS_RELIABILITY_RELIABILITY_SUPPORT_H_
