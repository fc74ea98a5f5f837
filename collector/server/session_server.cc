#include "fragscope/server/session_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <sstream>

#include "absl/strings/str_format.h"
#include "fragscope/report/json_writer.h"
#include "fragscope/report/report_json.h"
#include "fragscope/trace/frame_reader.h"

namespace fragscope {

namespace {

bool ReadExactly(int fd, char* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

void WriteAll(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away; nothing to do
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SessionServer>> SessionServer::Start(const std::string& socket_path,
                                                                    SessionServerOptions options) {
  auto listener = SocketListener::Listen(socket_path);
  if (!listener.ok()) return listener.status();
  listener->set_refusal_observer(options.on_refused_peer);
  std::unique_ptr<SessionServer> s(new SessionServer(std::move(*listener), std::move(options)));
  s->accept_thread_ = std::thread([raw = s.get()] { raw->AcceptLoop(); });
  return s;
}

SessionServer::~SessionServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& live : streams_) {
      if (!live->done && live->fd >= 0) shutdown(live->fd, SHUT_RDWR);
    }
  }
  StopAndJoin();
}

void SessionServer::StopAndJoin() {
  listener_.Shutdown();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& live : streams_) {
      if (live->thread.joinable()) threads.push_back(std::move(live->thread));
    }
  }
  // Joined without the lock: the threads take it on their way out.
  for (auto& t : threads) t.join();
  std::unique_lock<std::mutex> lock(mu_);
  detached_done_.wait(lock, [this] { return detached_running_ == 0; });
}

void SessionServer::AcceptLoop() {
  for (;;) {
    pid_t peer = 0;
    int fd = listener_.Accept(&peer);
    if (fd < 0) return;
    auto live = std::make_unique<Live>();
    Live* raw = live.get();
    raw->fd = fd;
    raw->stream.peer_pid = peer;
    raw->stream.session =
        std::make_shared<StreamSession>(options_.model, [this, raw, peer](const v1::Frame& first) {
          return options_.trace_path ? options_.trace_path(*raw->stream.session, first, peer)
                                     : std::string();
        });
    if (options_.on_failure) {
      raw->stream.session->set_failure_observer([this, raw, peer](const ModelSummary& summary) {
        options_.on_failure(*raw->stream.session, peer, summary);
      });
    }
    if (options_.trace_epilogue) raw->stream.session->set_trace_epilogue(options_.trace_epilogue);
    if (options_.trace_removal.restore || options_.trace_removal.rewritten) {
      raw->stream.session->set_trace_removal_hooks(options_.trace_removal);
    }
    std::lock_guard<std::mutex> lock(mu_);
    raw->thread = std::thread([this, raw] { Serve(raw); });
    streams_.push_back(std::move(live));
  }
}

void SessionServer::Serve(Live* live) {
  char magic[sizeof(kQueryMagic)];
  ssize_t peeked = recv(live->fd, magic, sizeof(magic), MSG_PEEK | MSG_WAITALL);
  bool is_query = peeked == static_cast<ssize_t>(sizeof(magic)) &&
                  std::memcmp(magic, kQueryMagic, sizeof(magic)) == 0;
  StreamOutcome outcome;
  if (is_query) {
    AnswerQuery(live->fd);
    close(live->fd);
  } else {
    // FromFd takes ownership of the fd; live->fd only serves shutdown() from Finish().
    auto reader = FrameReader::FromFd(
        live->fd, absl::StrFormat("agent stream (pid %d)", live->stream.peer_pid));
    if (reader.ok()) {
      reader->set_decode_budget(&decode_budget_);
      outcome = live->stream.session->Run(*reader);
    } else {
      outcome.result = FrameReader::Result::kError;
      outcome.error = std::string(reader.status().message());
    }
  }
  std::unique_ptr<Live> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live->stream.outcome = std::move(outcome);
    live->done = true;
    live->fd = -1;
    if (is_query || !options_.keep_ended_streams) {
      for (auto it = streams_.begin(); it != streams_.end(); ++it) {
        // A thread StopAndJoin already took is being joined: leave its entry for Finish().
        if (it->get() == live && (*it)->thread.joinable()) {
          dropped = std::move(*it);
          streams_.erase(it);
          dropped->thread.detach();
          ++detached_running_;
          break;
        }
      }
    }
  }
  // One summary of the ended stream serves both its end callback and `top`'s list of ended
  // streams: a summary walks every segment, which is slow for a big model.
  const CollectedStream& ended_stream = dropped ? dropped->stream : live->stream;
  const bool show_ended = dropped && !is_query && options_.ended_streams_shown > 0;
  std::optional<ModelSummary> final_summary;
  if (!is_query && (options_.on_stream_end || show_ended)) {
    final_summary = ended_stream.session->Summarize();
  }
  if (!is_query && options_.on_stream_end) options_.on_stream_end(ended_stream, *final_summary);
  if (show_ended) {
    if (std::optional<v1::Hello> hello = dropped->stream.session->hello()) {
      LiveState ended{
          StreamState{dropped->stream.peer_pid, *hello, false,
                      dropped->stream.session->frames_applied(), std::move(*final_summary)},
          dropped->query_symbolizer};
      std::lock_guard<std::mutex> lock(mu_);
      ended_.push_back(std::move(ended));
      while (ended_.size() > options_.ended_streams_shown) ended_.pop_front();
    }
  }
  if (dropped) {
    std::lock_guard<std::mutex> lock(mu_);
    --detached_running_;
    detached_done_.notify_all();  // under the lock: the server may go away right after
  }
}

void SessionServer::AnswerQuery(int fd) {
  char header[kQueryHeaderBytes];
  if (!ReadExactly(fd, header, sizeof(header))) return;
  WriteAll(fd, DescribeJson());
}

std::vector<SessionServer::LiveState> SessionServer::LiveStates() const {
  struct Copied {
    CollectedStream stream;
    bool connected;
    std::shared_ptr<QuerySymbolizer> query_symbolizer;
  };
  std::vector<Copied> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& live : streams_) {
      streams.push_back({live->stream, !live->done, live->query_symbolizer});
    }
  }
  std::vector<LiveState> out;
  for (const Copied& c : streams) {
    std::optional<v1::Hello> hello = c.stream.session->hello();
    if (!hello) continue;  // a connection that has not said who it is yet
    out.push_back({StreamState{c.stream.peer_pid, *hello, c.connected,
                               c.stream.session->frames_applied(), c.stream.session->Summarize()},
                   c.query_symbolizer});
  }
  return out;
}

std::vector<SessionServer::StreamState> SessionServer::Streams() const {
  std::vector<StreamState> out;
  for (LiveState& l : LiveStates()) out.push_back(std::move(l.state));
  return out;
}

std::string SessionServer::DescribeJson() const {
  std::lock_guard<std::mutex> query_lock(query_mu_);
  std::vector<LiveState> states = LiveStates();
  {
    std::lock_guard<std::mutex> lock(mu_);
    states.insert(states.end(), ended_.begin(), ended_.end());
  }
  std::ostringstream out;
  JsonWriter w(out, /*pretty=*/false);
  w.BeginObject();
  w.Field("schema_version", 1);
  w.Key("streams");
  w.BeginArray();
  for (const LiveState& l : states) {
    const StreamState& s = l.state;
    std::ostringstream report;
    JsonReportOptions opts;
    opts.pretty = false;
    opts.include_timeline = false;
    QuerySymbolizer& q = *l.query_symbolizer;
    if (options_.make_symbolizer &&
        (q.symbolizer == nullptr || q.modules != s.summary.modules.size())) {
      q.symbolizer = options_.make_symbolizer(s.summary.modules);
      q.modules = s.summary.modules.size();
    }
    if (q.symbolizer != nullptr) {
      RenderJson(s.summary, *q.symbolizer, report, opts);
    } else {
      RenderJson(s.summary, report, opts);
    }
    w.BeginObject();
    w.Field("peer_pid", static_cast<int>(s.peer_pid));
    w.Field("pid", static_cast<uint64_t>(s.hello.pid()));
    w.Field("exe", s.hello.exe());
    w.Field("host", s.hello.host());
    w.Field("connected", s.connected);
    w.Field("frames", static_cast<uint64_t>(s.frames));
    w.Key("report");
    w.RawValue(report.str());
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  out << "\n";
  return out.str();
}

std::vector<CollectedStream> SessionServer::Finish(int linger_ms) {
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
  StopAndJoin();
  std::vector<CollectedStream> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& live : streams_) out.push_back(live->stream);
  streams_.clear();
  return out;
}

}  // namespace fragscope
