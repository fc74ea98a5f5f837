// fragscope-collector's OOM post-mortem files, written while the program runs:
// `<stream>.oom-<seq>.txt` and `.json`, each holding that OOM's post-mortem alone (oom_file.h).
//
// - An OOM a sub-allocator raised (PyTorch's, fragscope_alloc_failed) is final when it arrives:
//   its file is written at once.
// - A plain driver failure (cudaMalloc) may still be retried: its file is written once the
//   program has not recovered within `recovery_window_ms` (no success of that size on the
//   device), checked by Tick(), so a program that hangs after its OOM still leaves one; or at
//   the end of the stream, whichever comes first.
// - Repeats of one failure (same device, request and class: a retry loop) share the first one's
//   file, which says how many there were once the stream ends: hundreds of OOMs write one file.
// - When the stream ends, a file whose OOM the program later recovered from is written again,
//   saying so.
//
// Thread-safe: OnFailure and OnStreamEnd run on streams' threads, Tick on the daemon's timer.
#ifndef FRAGSCOPE_COLLECTOR_TOOLS_OOM_FILE_WRITER_H_
#define FRAGSCOPE_COLLECTOR_TOOLS_OOM_FILE_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fragscope/model/model_summary.h"
#include "fragscope/server/stream_session.h"

namespace fragscope {

class OomFileWriter {
 public:
  struct Options {
    std::string dir;
    uint64_t recovery_window_ms = 2000;
    std::size_t max_files_per_stream = 32;  // distinct failures; later ones are in the report
  };
  // Writes `text` to `path` whole; false (and said) when it could not.
  using WriteFile = std::function<bool(const std::string& path, const std::string& text)>;
  using Say = std::function<void(const std::string& line)>;

  OomFileWriter(Options options, WriteFile write, Say say);

  // After a failure was applied to `stream`'s model; `name` is what its files are called now.
  void OnFailure(const StreamSession* stream, const std::string& name, const ModelSummary& summary,
                 uint64_t now_ms);
  // Writes the files of driver OOMs whose window passed without recovery (reads the streams'
  // current summaries).
  void Tick(uint64_t now_ms);
  // The stream ended: every OOM is judged for good, files are completed (repeats, recovery),
  // and the stream is forgotten. `name` is its final name (files already written keep theirs).
  void OnStreamEnd(const StreamSession* stream, const std::string& name,
                   const ModelSummary& final_summary);

 private:
  using GroupKey = std::tuple<int, uint64_t, std::string>;  // device, request, class
  struct Group {
    uint64_t first_seq = 0;  // the OOM whose post-mortem the file holds
    uint64_t last_seq = 0;
    uint64_t count = 0;
    std::string base;               // path without .txt/.json; empty: no file (over the limit)
    std::string because;            // why the file was written when it was
    uint64_t recovered_by_seq = 0;  // as last written
    // The summary the file was first written from: a recovered driver failure is no OOM in
    // later summaries, and its post-mortem and stacks are gone from them.
    std::shared_ptr<const ModelSummary> at_failure;
  };
  struct Pending {
    uint64_t seq = 0;
    uint64_t deadline_ms = 0;
  };
  struct Stream {
    std::string name;
    std::map<GroupKey, Group> groups;
    std::set<uint64_t> decided;  // OOMs counted into a group (or left to the report)
    uint64_t seen_up_to = 0;     // failures up to this seq were looked at
    std::vector<Pending> pending;
    bool over_limit_said = false;
  };

  // Counts the OOM `seq` of `summary` into its group; writes the group's file when new.
  void Decide(Stream& s, const ModelSummary& summary, uint64_t seq, const std::string& because);
  void Write(const Stream& s, const Group& g, bool stream_ended);

  const Options options_;
  WriteFile write_;
  Say say_;
  std::mutex mu_;
  std::map<const StreamSession*, Stream> streams_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_COLLECTOR_TOOLS_OOM_FILE_WRITER_H_
