#include "fragscope/server/stream_session.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "fragscope/trace/arena_frame_reader.h"
#include "fragscope/trace/hot_frame_decoder.h"
#include "fragscope/trace/trace_format.h"

namespace fragscope {

namespace {
// The copies a collector keeps are compressed (proto/README.md, "Compressed trace files").
constexpr TraceCompression kTraceCompression = TraceCompression::kZstd;
}  // namespace

StreamSession::StreamSession(ModelOptions options, TracePathChooser choose_trace_path)
    : model_(std::move(options)), choose_trace_path_(std::move(choose_trace_path)) {}

StreamSession::~StreamSession() {
  if (watch_fd_ >= 0) ::close(watch_fd_);
}

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
  auto writer = FrameWriter::CreateFile(trace_path_, kTraceCompression);
  if (writer.ok()) {
    writer_.emplace(std::move(*writer));
    WatchTraceCopy(outcome);
  } else {
    outcome.trace_error = std::string(writer.status().message());
  }
}

void StreamSession::WatchTraceCopy(StreamOutcome& outcome) {
  if (!removal_hooks_.restore && !removal_hooks_.rewritten) return;
  for (int attempt = 0;; ++attempt) {
    watch_fd_ = ::open(trace_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (watch_fd_ >= 0 || errno != ENOENT || attempt > 0) break;
    // Removed right after it was created, with only its header written: made again, nothing
    // is lost.
    if (removal_hooks_.restore) removal_hooks_.restore(trace_path_);
    auto again = FrameWriter::CreateFile(trace_path_, kTraceCompression);
    if (!again.ok()) {
      StopTraceCopy(again.status(), outcome);
      return;
    }
    writer_.emplace(std::move(*again));
  }
  // Not watched otherwise (out of descriptors, say): the copy goes on as it would without hooks.
}

void StreamSession::RestoreRemovedTraceCopy(StreamOutcome& outcome) {
  struct stat st;
  if (watch_fd_ < 0 || ::fstat(watch_fd_, &st) != 0 || st.st_nlink > 0) return;
  if (removal_hooks_.restore) removal_hooks_.restore(trace_path_);
  absl::StatusOr<uint64_t> rewritten = RewriteTraceCopy();
  if (removal_hooks_.rewritten) removal_hooks_.rewritten(trace_path_, rewritten);
  if (!rewritten.ok()) StopTraceCopy(rewritten.status(), outcome);
}

absl::StatusOr<uint64_t> StreamSession::RewriteTraceCopy() {
  struct stat old_file;
  const uint64_t old_bytes = ::fstat(watch_fd_, &old_file) == 0 ? old_file.st_size : 0;
  // The removed file holds whole frames only, as the copy was flushed just before: its bytes
  // are the new file's first. On a failure the new file keeps what reached it (a cut trace
  // reads up to the cut).
  uint64_t copied = 0;
  absl::StatusOr<FrameWriter> fresh =
      FrameWriter::CreateFileFrom(trace_path_, watch_fd_, kTraceCompression, &copied);
  if (!fresh.ok()) {
    if (copied == 0) {
      return absl::DataLossError(absl::StrFormat(
          "%s was removed while its stream ran and cannot be written again (%s): the %d bytes it "
          "held are lost, and the copy stops",
          trace_path_, fresh.status().message(), old_bytes));
    }
    return absl::DataLossError(absl::StrFormat(
        "%s was removed while its stream ran and could be written again only in part (%s): it "
        "holds the first %d of %d bytes, and the copy stops there",
        trace_path_, fresh.status().message(), copied, old_bytes));
  }
  const int fresh_watch = ::open(trace_path_.c_str(), O_RDONLY | O_CLOEXEC);
  writer_.emplace(std::move(*fresh));  // closes the removed file: its space is freed
  ::close(watch_fd_);
  watch_fd_ = fresh_watch;  // -1 (not watched any more) only if it went at once again
  return writer_->bytes_written();
}

// Frames the session makes itself (the epilogue's); the stream's own are copied as they came.
void StreamSession::CopyToTrace(const v1::Frame& frame, StreamOutcome& outcome) {
  if (!chose_) OpenTraceCopy(frame, outcome);
  if (!writer_) return;
  if (absl::Status s = writer_->Write(frame); !s.ok()) StopTraceCopy(s, outcome);
}

void StreamSession::FlushTraceCopy(StreamOutcome& outcome) {
  if (absl::Status s = writer_->Flush(); !s.ok()) {
    StopTraceCopy(s, outcome);
    return;
  }
  RestoreRemovedTraceCopy(outcome);  // one fstat per pause
}

void StreamSession::StopTraceCopy(const absl::Status& error, StreamOutcome& outcome) {
  outcome.trace_error = std::string(error.message());
  writer_.reset();  // stop writing; the model keeps going
  if (watch_fd_ >= 0) ::close(watch_fd_);
  watch_fd_ = -1;
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
  v1::Frame built;                  // a first frame that is an event, to name the copy by
  std::string copied;               // the frames taken since the last one, as they came
  // Only while there may be a copy to write: appending every frame's bytes for nothing cost a
  // replay ~8 %.
  if (choose_trace_path_ || !trace_path_.empty()) reader.set_copy(&copied);
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
    if (frame != nullptr && frame->has_end()) outcome.saw_end_frame = true;
    if (!chose_) {  // the first frame names the copy's path
      if (event != nullptr) StoreHotEvent(*event, &built);
      OpenTraceCopy(event != nullptr ? built : *frame, outcome);
    }
    // The copy holds the frames' bytes as they came, not the frames serialized again.
    if (writer_ && !copied.empty()) {
      if (absl::Status s = writer_->WriteFramed(copied); !s.ok()) StopTraceCopy(s, outcome);
    }
    copied.clear();
    if (!writer_) reader.set_copy(nullptr);  // none chosen, or it stopped: for good
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
  if (writer_ && epilogue_) {
    // Made without the lock (only this thread changes the model; queries only read it): reading
    // debug information may take a while.
    std::vector<v1::Frame> more = epilogue_(model_);
    lock.lock();
    for (const v1::Frame& f : more) apply(f);
    lock.unlock();
    for (const v1::Frame& f : more) CopyToTrace(f, outcome);
  }
  reader.set_copy(nullptr);
  outcome.result = r;
  if (r != FrameReader::Result::kEnd) outcome.error = reader.error();
  // A copy removed since the last pause is written again before it is closed and gone for good.
  if (writer_) FlushTraceCopy(outcome);
  if (writer_) {
    if (absl::Status s = writer_->Close(); !s.ok()) outcome.trace_error = std::string(s.message());
    writer_.reset();
  }
  if (watch_fd_ >= 0) ::close(watch_fd_);
  watch_fd_ = -1;
  return outcome;
}

}  // namespace fragscope
