#include "fragscope/server/stream_session.h"

#include <utility>

#include "fragscope/trace/arena_frame_reader.h"
#include "fragscope/trace/hot_frame_decoder.h"

namespace fragscope {

StreamSession::StreamSession(ModelOptions options, TracePathChooser choose_trace_path)
    : model_(std::move(options)), choose_trace_path_(std::move(choose_trace_path)) {}

ModelSummary StreamSession::Summarize() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_.Summarize();
}

std::optional<v1::Hello> StreamSession::hello() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hello_;
}

uint64_t StreamSession::frames_applied() const {
  std::lock_guard<std::mutex> lock(mu_);
  return frames_;
}

void StreamSession::OpenTraceCopy(const v1::Frame& first, StreamOutcome& outcome) {
  chose_ = true;
  if (choose_trace_path_) trace_path_ = choose_trace_path_(first);
  if (trace_path_.empty()) return;
  auto writer = FrameWriter::CreateFile(trace_path_);
  if (writer.ok()) {
    writer_.emplace(std::move(*writer));
  } else {
    outcome.trace_error = std::string(writer.status().message());
  }
}

// Small enough to inline into Run: most sessions write no copy, and a call per frame to learn
// that was a few per cent of a replay.
inline void StreamSession::CopyToTrace(const v1::Frame& frame, StreamOutcome& outcome) {
  if (!chose_) OpenTraceCopy(frame, outcome);
  if (!writer_) return;
  if (absl::Status s = writer_->Write(frame); !s.ok()) StopTraceCopy(s, outcome);
}

void StreamSession::FlushTraceCopy(StreamOutcome& outcome) {
  if (absl::Status s = writer_->Flush(); !s.ok()) StopTraceCopy(s, outcome);
}

void StreamSession::StopTraceCopy(const absl::Status& error, StreamOutcome& outcome) {
  outcome.trace_error = std::string(error.message());
  writer_.reset();  // stop writing; the model keeps going
}

StreamOutcome StreamSession::Run(FrameReader& reader) {
  StreamOutcome outcome;
  // Event frames are decoded by hand and reach the model as decoded, the rest are parsed on an
  // arena (arena_frame_reader.h): the orderer builds and copies only the few frames it must
  // hold, so a heap frame built and destroyed per event is not needed (it cost as much as the
  // model itself), nor a message built per event only to be read back (~4 % of a replay).
  ArenaFrameReader frames(reader);
  const v1::Frame* frame = nullptr;
  const HotEvent* event = nullptr;  // an event frame as decoded, when Next leaves one
  v1::Frame built;                  // such an event built into a frame, for the trace copy
  FrameReader::Result r;
  // The model sees events in seq order (see SeqOrderer); the trace copy keeps arrival order,
  // and a saved trace goes through this same path, so live and saved numbers agree.
  bool failure_applied = false;
  auto apply = [&](const v1::Frame& f) {
    if (f.has_hello() && !hello_) hello_ = f.hello();
    model_.Apply(f);
    ++frames_;
    failure_applied = failure_applied || f.has_failed();
  };
  // Decoded events in order go to the model as they are (no frame built: hot_event_view.h).
  auto apply_event = [&](const HotEvent& e) {
    model_.Apply(e);
    ++frames_;
  };
  // mu_ is held over runs of frames that are already in the read buffer, at most
  // kFramesPerLock of them, not taken per frame (a lock and an unlock per event were ~4 % of a
  // replay). It is dropped before any read that may wait for the agent and before the failure
  // observer, so a query waits at most for one short run.
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  int frames_under_lock = 0;
  for (;;) {
    // Before a read that may wait for the agent: the lock goes, and the trace copy reaches the
    // disk. A daemon killed hard (SIGKILL, the OOM killer) then loses no more than what was in
    // flight; buffered up to 1 MiB, a slow stream's copy lost its Hello and hours of events.
    if (writer_ || lock.owns_lock()) {
      const bool buffered = reader.NextFrameBuffered();
      if (lock.owns_lock() && (frames_under_lock >= kFramesPerLock || !buffered)) lock.unlock();
      if (!buffered && writer_) FlushTraceCopy(outcome);  // queries need not wait for the disk
    }
    if ((r = frames.Next(&frame, &event)) != FrameReader::Result::kFrame) break;
    ++outcome.frames;
    if (event != nullptr) {
      // The copy (and the choice of its path, on a first frame) needs the frame itself.
      if (writer_ || !chose_) {
        StoreHotEvent(*event, &built);
        CopyToTrace(built, outcome);
      }
    } else {
      if (frame->has_end()) outcome.saw_end_frame = true;
      CopyToTrace(*frame, outcome);
    }
    if (!lock.owns_lock()) {
      lock.lock();
      frames_under_lock = 0;
    }
    if (event != nullptr) {
      orderer_.Push(*event, apply_event, apply);
    } else {
      orderer_.Push(*frame, apply);
    }
    ++frames_under_lock;
    // Failures are rare, so a full summary per failure costs nothing that matters.
    if (failure_applied && on_failure_) {
      lock.unlock();
      on_failure_(Summarize());
    }
    failure_applied = false;
  }
  if (!lock.owns_lock()) lock.lock();
  orderer_.Flush(apply);
  lock.unlock();
  if (failure_applied && on_failure_) on_failure_(Summarize());
  outcome.result = r;
  if (r != FrameReader::Result::kEnd) outcome.error = reader.error();
  if (writer_) {
    if (absl::Status s = writer_->Close(); !s.ok()) outcome.trace_error = std::string(s.message());
    writer_.reset();
  }
  return outcome;
}

}  // namespace fragscope
