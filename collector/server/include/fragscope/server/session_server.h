// A collector endpoint: a private Unix socket that agents connect to (one StreamSession per
// connection, each on its own thread) and that query clients (`fragscope top`) ask for the
// live state. `fragscope run` embeds one; `fragscope-collector` is one as a daemon.
#ifndef FRAGSCOPE_SERVER_SESSION_SERVER_H_
#define FRAGSCOPE_SERVER_SESSION_SERVER_H_

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "fragscope/model/model_options.h"
#include "fragscope/model/model_summary.h"
#include "fragscope/report/symbolizer.h"
#include "fragscope/server/socket_listener.h"
#include "fragscope/server/stream_session.h"
#include "fragscope/trace/decode_budget.h"

namespace fragscope {

// A query client opens the socket and sends these 16 bytes instead of a trace header; the server
// answers with one JSON document (DescribeJson) and closes.
inline constexpr char kQueryMagic[8] = {'F', 'R', 'A', 'G', 'S', 'C', 'P', 'Q'};
inline constexpr std::size_t kQueryHeaderBytes = 16;

struct CollectedStream {
  std::shared_ptr<StreamSession> session;
  StreamOutcome outcome;
  pid_t peer_pid = 0;
};

struct SessionServerOptions {
  ModelOptions model;
  // Where the copy of a stream goes, from its first frame and the peer's pid ("" = no copy).
  // Called once per stream, on its thread, with the stream's session (an identity that lasts
  // as long as the stream: the same object on_failure and on_stream_end get).
  std::function<std::string(const StreamSession& session, const v1::Frame& first, pid_t peer)>
      trace_path;
  // After each failed allocation is applied (OOM post-mortems as they happen). Runs on the
  // stream's thread; must be thread-safe across streams.
  std::function<void(const StreamSession&, pid_t peer, const ModelSummary&)> on_failure;
  // Watches each stream's trace copy for its removal (its file or folder deleted while the
  // stream runs) and writes it again whole at the same path (StreamSession::TraceRemovalHooks);
  // unset: not watched. The hooks run on the stream's thread; must be thread-safe across streams.
  StreamSession::TraceRemovalHooks trace_removal;
  // Frames appended to each stream's trace copy when it ends (StreamSession::TraceEpilogue:
  // its SymbolTable). Runs on the stream's thread; must be thread-safe across streams.
  StreamSession::TraceEpilogue trace_epilogue;
  // When a stream ends (clean or cut), with the stream's final summary. Runs on the stream's
  // thread.
  std::function<void(const CollectedStream&, const ModelSummary& final_summary)> on_stream_end;
  // Keep ended streams for Finish()/DescribeJson (run), or let them go (daemon: memory stays
  // bounded by the processes still connected).
  bool keep_ended_streams = true;
  // With keep_ended_streams false: how many streams that ended stay in DescribeJson's answer
  // (`connected` false, their final summary), the latest ones, so `fragscope top` still shows
  // the rank that crashed at night. Not in Streams() (metrics describe running processes).
  std::size_t ended_streams_shown = 0;
  // Names the frames of DescribeJson's stacks (what `fragscope top` shows) from a stream's
  // module list; unset: module+offset only. Each stream keeps the one made for it across
  // queries (symbolizers cache per pc, and opening a module's debug information is the slow
  // part), and gets a new one when its module list has grown.
  std::function<std::unique_ptr<Symbolizer>(const std::vector<ModuleInfo>&)> make_symbolizer;
  // Bytes of big frames being parsed at once across all streams (decode_budget.h): streams that
  // send big frames together take turns parsing them, so a daemon serving many agents stays
  // near one frame's worth of parse memory where each stream alone could cost that much.
  uint64_t decode_budget_bytes = DecodeBudget::OneFrameAtTheLimits();
  // Called on the accepting thread for the first refused connection of each uid (a peer of
  // another user: SocketListener), to say so; later ones of that uid are refused quietly.
  std::function<void(const RefusedPeer&)> on_refused_peer;
};

// Thread-safe.
class SessionServer {
 public:
  static absl::StatusOr<std::unique_ptr<SessionServer>> Start(const std::string& socket_path,
                                                              SessionServerOptions options);
  ~SessionServer();  // cuts every stream still open

  const std::string& socket_path() const { return listener_.path(); }

  // Waits up to `linger_ms` for open streams to end, cuts the rest, stops accepting and returns
  // every kept stream in connection order.
  std::vector<CollectedStream> Finish(int linger_ms);

  // {"schema_version":1,"streams":[{"peer_pid","pid","exe","host","connected","frames",
  //  "report":{...fragscope report JSON...}}]}
  std::string DescribeJson() const;

  // The state of every stream that has said hello, now (for metrics exporters).
  struct StreamState {
    pid_t peer_pid = 0;
    v1::Hello hello;
    bool connected = false;
    uint64_t frames = 0;  // frames applied to the model so far
    ModelSummary summary;
  };
  std::vector<StreamState> Streams() const;
  int refused_peers() const { return listener_.refused_peers(); }
  const DecodeBudget& decode_budget() const { return decode_budget_; }

 private:
  // A stream's symbolizer for query answers, and how many modules it was made with.
  struct QuerySymbolizer {
    std::size_t modules = 0;
    std::unique_ptr<Symbolizer> symbolizer;
  };
  struct Live {
    CollectedStream stream;
    int fd = -1;
    bool done = false;
    std::thread thread;
    std::shared_ptr<QuerySymbolizer> query_symbolizer = std::make_shared<QuerySymbolizer>();
  };
  struct LiveState {
    StreamState state;
    std::shared_ptr<QuerySymbolizer> query_symbolizer;
  };
  std::vector<LiveState> LiveStates() const;

  SessionServer(SocketListener listener, SessionServerOptions options)
      : listener_(std::move(listener)),
        options_(std::move(options)),
        decode_budget_(options_.decode_budget_bytes) {}
  void AcceptLoop();
  void Serve(Live* live);
  void AnswerQuery(int fd);
  void StopAndJoin();

  SocketListener listener_;
  SessionServerOptions options_;
  DecodeBudget decode_budget_;  // shared by every stream's reader
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Live>> streams_;  // guarded by mu_
  // One DescribeJson at a time: the streams' symbolizers are not thread-safe.
  mutable std::mutex query_mu_;
  // Streams let go that DescribeJson still shows, oldest first (ended_streams_shown at most).
  std::deque<LiveState> ended_;  // guarded by mu_
  // Threads of streams not kept (queries, ended daemon streams) detach themselves so a
  // long-running daemon does not pile up finished threads; shutdown waits for them here.
  int detached_running_ = 0;  // guarded by mu_
  std::condition_variable detached_done_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_SESSION_SERVER_H_
