// One agent stream (a connected socket or an opened trace file) applied to a ProcessModel and,
// optionally, copied to a trace file. Live and saved traces go through this same code, which is
// what makes `fragscope run` and `fragscope report` print the same numbers.
#ifndef FRAGSCOPE_SERVER_STREAM_SESSION_H_
#define FRAGSCOPE_SERVER_STREAM_SESSION_H_

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fragscope.pb.h"
#include "fragscope/model/process_model.h"
#include "fragscope/server/seq_orderer.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/frame_writer.h"

namespace fragscope {

// How a stream ended.
struct StreamOutcome {
  FrameReader::Result result = FrameReader::Result::kEnd;  // kEnd, kTruncated or kError
  std::string error;           // for kTruncated / kError, names the stream and offset
  bool saw_end_frame = false;  // the agent said goodbye; false: the process died or was cut
  uint64_t frames = 0;
  std::string trace_error;  // writing the copy failed (disk full, ...); the model is still whole
};

// One thread drives a session from start to finish (Run). Summarize() and hello() may be called
// from other threads at any time (a daemon answering queries while the stream flows); model()
// is for the driving thread or after Run returned.
class StreamSession {
 public:
  // Decides where the copy of this stream goes once its Hello is known; return an empty string
  // for no copy. Called at most once, with the first frame (normally Hello).
  using TracePathChooser = std::function<std::string(const v1::Frame& first)>;
  // Called on the driving thread after a failed allocation was applied, with the summary at
  // that point, so OOM post-mortems can be written as they happen.
  using FailureObserver = std::function<void(const ModelSummary& summary)>;

  // The trace copy's file was removed while the stream ran (its file or its folder deleted: a
  // cleanup cron, `rm -rf traces/`). The open file still holds every byte written, so the copy
  // is written again at the same path and goes on there; without these hooks it is not watched.
  struct TraceRemovalHooks {
    // Runs first, with the copy's path: make its folder exist again.
    std::function<void(const std::string& path)> restore;
    // How that went: the bytes written again (the whole copy), or why the copy is lost.
    std::function<void(const std::string& path, const absl::StatusOr<uint64_t>& rewritten)>
        rewritten;
  };

  // Frames appended to the trace copy when the stream ends, before the copy is closed, made from
  // the model as it ended (the stream's SymbolTable: collector/symbolize/symbol_table_builder.h,
  // read while the traced binaries are still here). They are applied to the model as well, so a
  // live report and the report of the file agree.
  using TraceEpilogue = std::function<std::vector<v1::Frame>(const ProcessModel& model)>;

  StreamSession(ModelOptions options, TracePathChooser choose_trace_path);
  ~StreamSession();
  void set_failure_observer(FailureObserver observer) { on_failure_ = std::move(observer); }
  // Watches the copy's file from the next copy opened (set before Run).
  void set_trace_removal_hooks(TraceRemovalHooks hooks) { removal_hooks_ = std::move(hooks); }
  // Runs only for a stream whose copy is written (set before Run).
  void set_trace_epilogue(TraceEpilogue epilogue) { epilogue_ = std::move(epilogue); }

  // Reads `reader` to its end. Every whole frame reaches the model, damaged tails included.
  StreamOutcome Run(FrameReader& reader);

  const ProcessModel& model() const { return model_; }
  // The state now, safe against a concurrent Run().
  ModelSummary Summarize() const;
  std::optional<v1::Hello> hello() const;
  uint64_t frames_applied() const;
  const std::string& trace_path() const { return trace_path_; }

 private:
  // Decides where the copy goes (choose_trace_path_) and opens it: once, with the first frame.
  void OpenTraceCopy(const v1::Frame& first, StreamOutcome& outcome);
  void CopyToTrace(const v1::Frame& frame, StreamOutcome& outcome);
  void FlushTraceCopy(StreamOutcome& outcome);
  // A write or flush of the copy failed: said in the outcome, and the copy stops.
  void StopTraceCopy(const absl::Status& error, StreamOutcome& outcome);
  // With removal hooks: opens watch_fd_ on the copy just created, so that its removal shows (its
  // link count falls to 0) and its bytes can be read back.
  void WatchTraceCopy(StreamOutcome& outcome);
  // At a flush: if the copy's file was removed, writes it again whole at trace_path_ (the
  // removal hooks say so), or stops the copy saying what is lost.
  void RestoreRemovedTraceCopy(StreamOutcome& outcome);
  // Writes the frames of watch_fd_'s file into a new file at trace_path_ and moves writer_ and
  // watch_fd_ there. The bytes written, or why not.
  absl::StatusOr<uint64_t> RewriteTraceCopy();

  // The most frames Run applies under one holding of mu_.
  static constexpr int kFramesPerLock = 64;

  mutable std::mutex mu_;  // guards model_, orderer_, hello_ and frames_ against query threads
  ProcessModel model_;
  uint64_t frames_ = 0;
  TracePathChooser choose_trace_path_;
  FailureObserver on_failure_;
  SeqOrderer orderer_;
  std::optional<v1::Hello> hello_;
  bool chose_ = false;
  std::string trace_path_;
  std::optional<FrameWriter> writer_;
  TraceRemovalHooks removal_hooks_;
  TraceEpilogue epilogue_;
  int watch_fd_ = -1;  // the copy's file, read-only, while removal hooks watch it
};

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_STREAM_SESSION_H_
