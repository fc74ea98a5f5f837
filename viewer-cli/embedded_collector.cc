#include "embedded_collector.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_format.h"
#include "fragscope/trace/frame_reader.h"

namespace fragscope::cli {

absl::StatusOr<std::unique_ptr<EmbeddedCollector>> EmbeddedCollector::Start(
    ModelOptions options, std::string trace_path) {
  auto dir = PrivateRuntimeDir();
  if (!dir.ok()) return dir.status();
  auto listener = SocketListener::Listen(absl::StrFormat("%s/run-%d.sock", *dir, getpid()));
  if (!listener.ok()) return listener.status();
  std::unique_ptr<EmbeddedCollector> c(
      new EmbeddedCollector(std::move(*listener), std::move(options), std::move(trace_path)));
  c->accept_thread_ = std::thread([raw = c.get()] { raw->AcceptLoop(); });
  return c;
}

EmbeddedCollector::~EmbeddedCollector() {
  listener_.Shutdown();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& live : streams_) {
    if (live->fd >= 0) shutdown(live->fd, SHUT_RDWR);
    if (live->thread.joinable()) live->thread.join();
  }
}

std::string EmbeddedCollector::TracePathFor(const v1::Frame& first) {
  if (trace_path_.empty()) return "";
  if (!first.has_hello()) return trace_path_ + ".unknown";
  const v1::Hello& h = first.hello();
  if (static_cast<pid_t>(h.pid()) == root_pid_ && h.stream_index() == 0) return trace_path_;
  std::string path = absl::StrFormat("%s.%d", trace_path_, h.pid());
  if (h.stream_index() > 0) path += absl::StrFormat(".%d", h.stream_index());
  return path;
}

void EmbeddedCollector::AcceptLoop() {
  for (;;) {
    pid_t peer = 0;
    int fd = listener_.Accept(&peer);
    if (fd < 0) return;
    auto live = std::make_unique<Live>();
    Live* raw = live.get();
    raw->fd = fd;
    raw->stream.peer_pid = peer;
    raw->stream.session = std::make_unique<StreamSession>(
        options_, [this](const v1::Frame& first) { return TracePathFor(first); });
    std::lock_guard<std::mutex> lock(mu_);
    raw->thread = std::thread([this, raw] {
      // FromFd takes ownership of the fd; the copy in raw->fd only serves shutdown().
      auto reader = FrameReader::FromFd(
          raw->fd, absl::StrFormat("agent stream (pid %d)", raw->stream.peer_pid));
      StreamOutcome outcome;
      if (reader.ok()) {
        outcome = raw->stream.session->Run(*reader);
      } else {
        outcome.result = FrameReader::Result::kError;
        outcome.error = std::string(reader.status().message());
      }
      std::lock_guard<std::mutex> inner(mu_);
      raw->stream.outcome = std::move(outcome);
      raw->done = true;
      raw->fd = -1;
    });
    streams_.push_back(std::move(live));
  }
}

std::vector<CollectedStream> EmbeddedCollector::Finish(int linger_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(linger_ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool all_done = true;
      for (auto& live : streams_) all_done = all_done && live->done;
      if (all_done || std::chrono::steady_clock::now() >= deadline) {
        for (auto& live : streams_) {
          if (!live->done && live->fd >= 0) shutdown(live->fd, SHUT_RDWR);
        }
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  listener_.Shutdown();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<CollectedStream> out;
  std::vector<std::unique_ptr<Live>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams.swap(streams_);
  }
  for (auto& live : streams) {
    if (live->thread.joinable()) live->thread.join();
    out.push_back(std::move(live->stream));
  }
  return out;
}

}  // namespace fragscope::cli
