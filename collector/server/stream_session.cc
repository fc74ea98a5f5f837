#include "fragscope/server/stream_session.h"

#include <utility>

namespace fragscope {

StreamSession::StreamSession(ModelOptions options, TracePathChooser choose_trace_path)
    : model_(std::move(options)), choose_trace_path_(std::move(choose_trace_path)) {}

void StreamSession::CopyToTrace(const v1::Frame& frame, StreamOutcome& outcome) {
  if (!chose_) {
    chose_ = true;
    if (choose_trace_path_) trace_path_ = choose_trace_path_(frame);
    if (!trace_path_.empty()) {
      auto writer = FrameWriter::CreateFile(trace_path_);
      if (writer.ok()) {
        writer_.emplace(std::move(*writer));
      } else {
        outcome.trace_error = std::string(writer.status().message());
      }
    }
  }
  if (!writer_) return;
  if (absl::Status s = writer_->Write(frame); !s.ok()) {
    outcome.trace_error = std::string(s.message());
    writer_.reset();  // stop writing; the model keeps going
  }
}

StreamOutcome StreamSession::Run(FrameReader& reader) {
  StreamOutcome outcome;
  v1::Frame frame;
  FrameReader::Result r;
  while ((r = reader.Next(&frame)) == FrameReader::Result::kFrame) {
    ++outcome.frames;
    if (frame.has_hello() && !hello_) hello_ = frame.hello();
    if (frame.has_end()) outcome.saw_end_frame = true;
    CopyToTrace(frame, outcome);
    model_.Apply(frame);
  }
  outcome.result = r;
  if (r != FrameReader::Result::kEnd) outcome.error = reader.error();
  if (writer_) {
    if (absl::Status s = writer_->Close(); !s.ok()) outcome.trace_error = std::string(s.message());
    writer_.reset();
  }
  return outcome;
}

}  // namespace fragscope
