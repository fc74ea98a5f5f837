// One agent stream (a connected socket or an opened trace file) applied to a ProcessModel and,
// optionally, copied to a trace file. Live and saved traces go through this same code, which is
// what makes `fragscope run` and `fragscope report` print the same numbers.
#ifndef FRAGSCOPE_SERVER_STREAM_SESSION_H_
#define FRAGSCOPE_SERVER_STREAM_SESSION_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fragscope.pb.h"
#include "fragscope/model/process_model.h"
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

// Not thread-safe; one thread drives a session from start to finish.
class StreamSession {
 public:
  // Decides where the copy of this stream goes once its Hello is known; return an empty string
  // for no copy. Called at most once, with the first frame (normally Hello).
  using TracePathChooser = std::function<std::string(const v1::Frame& first)>;

  StreamSession(ModelOptions options, TracePathChooser choose_trace_path);

  // Reads `reader` to its end. Every whole frame reaches the model, damaged tails included.
  StreamOutcome Run(FrameReader& reader);

  const ProcessModel& model() const { return model_; }
  const std::optional<v1::Hello>& hello() const { return hello_; }
  const std::string& trace_path() const { return trace_path_; }

 private:
  void CopyToTrace(const v1::Frame& frame, StreamOutcome& outcome);

  ProcessModel model_;
  TracePathChooser choose_trace_path_;
  std::optional<v1::Hello> hello_;
  bool chose_ = false;
  std::string trace_path_;
  std::optional<FrameWriter> writer_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_STREAM_SESSION_H_
