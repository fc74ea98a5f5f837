// The collector `fragscope run` embeds: listens on a private Unix socket, gives every agent
// that connects (the program, and any child it forks or execs with the agent inherited) its own
// StreamSession on its own thread, and hands back the sessions when the run is over.
#ifndef FRAGSCOPE_VIEWER_CLI_EMBEDDED_COLLECTOR_H_
#define FRAGSCOPE_VIEWER_CLI_EMBEDDED_COLLECTOR_H_

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "fragscope/model/model_options.h"
#include "fragscope/server/socket_listener.h"
#include "fragscope/server/stream_session.h"

namespace fragscope::cli {

struct CollectedStream {
  std::unique_ptr<StreamSession> session;
  StreamOutcome outcome;
  pid_t peer_pid = 0;
};

// Thread-safe: Start() and Finish() from the owning thread; sessions run on their own threads.
class EmbeddedCollector {
 public:
  // `trace_path` empty: no trace files. Otherwise the stream of `root_pid` goes to trace_path and
  // any other process's to trace_path.<pid>.
  static absl::StatusOr<std::unique_ptr<EmbeddedCollector>> Start(ModelOptions options,
                                                                  std::string trace_path);
  ~EmbeddedCollector();

  const std::string& socket_path() const { return listener_.path(); }
  void set_root_pid(pid_t pid) { root_pid_ = pid; }

  // Waits up to `linger_ms` for connected agents to finish their streams (processes that
  // outlive the program keep theirs open), cuts the rest, and returns every stream in the order
  // they connected.
  std::vector<CollectedStream> Finish(int linger_ms);

 private:
  EmbeddedCollector(SocketListener listener, ModelOptions options, std::string trace_path)
      : listener_(std::move(listener)),
        options_(std::move(options)),
        trace_path_(std::move(trace_path)) {}
  void AcceptLoop();
  std::string TracePathFor(const v1::Frame& first);

  struct Live {
    CollectedStream stream;
    int fd = -1;
    bool done = false;
    std::thread thread;
  };

  SocketListener listener_;
  ModelOptions options_;
  std::string trace_path_;
  pid_t root_pid_ = 0;
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Live>> streams_;  // guarded by mu_
};

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_EMBEDDED_COLLECTOR_H_
