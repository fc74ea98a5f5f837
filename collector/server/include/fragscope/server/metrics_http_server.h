// A minimal HTTP endpoint for Prometheus scrapes: GET /metrics answers with the text
// exposition, anything else 404. Binds loopback unless the caller explicitly allows another
// address (nothing listens on a network address by default).
#ifndef FRAGSCOPE_SERVER_METRICS_HTTP_SERVER_H_
#define FRAGSCOPE_SERVER_METRICS_HTTP_SERVER_H_

#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace fragscope {

// Where --metrics asks to listen: "localhost:PORT" (127.0.0.1), "A.B.C.D:PORT" or "[IPv6]:PORT";
// anything else is an error that names the accepted forms. No other name is resolved.
struct MetricsAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int port = 0;
  bool loopback = false;  // 127.0.0.0/8, ::1 or ::ffff:127.x.y.z
};
absl::StatusOr<MetricsAddress> ParseMetricsAddress(const std::string& address);

// Thread-safe: one serving thread; Stop() from any thread.
class MetricsHttpServer {
 public:
  // `address` as ParseMetricsAddress takes it; port 0 picks a free one (see port()).
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
