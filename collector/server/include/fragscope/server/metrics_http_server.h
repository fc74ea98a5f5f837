// A minimal HTTP endpoint for Prometheus scrapes: GET /metrics answers with the text
// exposition, anything else 404. Binds loopback unless the caller explicitly allows another
// address (nothing listens on a network address by default).
#ifndef FRAGSCOPE_SERVER_METRICS_HTTP_SERVER_H_
#define FRAGSCOPE_SERVER_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace fragscope {

// Thread-safe: one serving thread; Stop() from any thread.
class MetricsHttpServer {
 public:
  // `address` is "HOST:PORT" with an IPv4 host; port 0 picks a free one (see port()).
  // Non-loopback hosts are refused unless `allow_remote`.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, bool allow_remote, std::function<std::string()> render);
  ~MetricsHttpServer();
  int port() const { return port_; }
  void Stop();

 private:
  MetricsHttpServer(int fd, int port, std::function<std::string()> render)
      : fd_(fd), port_(port), render_(std::move(render)) {}
  void Serve();

  int fd_;
  int port_;
  std::function<std::string()> render_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_METRICS_HTTP_SERVER_H_
