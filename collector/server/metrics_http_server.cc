#include "fragscope/server/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace fragscope {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, bool allow_remote, std::function<std::string()> render) {
  auto colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--metrics '%s': expected HOST:PORT, e.g. 127.0.0.1:9464", address));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--metrics '%s': host must be an IPv4 address such as 127.0.0.1", address));
  }
  const bool loopback = (ntohl(addr.sin_addr.s_addr) >> 24) == 127;
  if (!loopback && !allow_remote) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--metrics '%s' is not a loopback address; pass --metrics-allow-remote to expose "
        "metrics on the network",
        address));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 16) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrFormat("--metrics %s: cannot listen: %s", address, std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<MetricsHttpServer> s(
      new MetricsHttpServer(fd, ntohs(addr.sin_port), std::move(render)));
  s->thread_ = std::thread([raw = s.get()] { raw->Serve(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  shutdown(fd_, SHUT_RDWR);  // wakes accept()
  if (thread_.joinable()) thread_.join();
  close(fd_);
}

void MetricsHttpServer::Serve() {
  while (!stopping_.load()) {
    int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    // A scraper that never sends must not stall the endpoint.
    timeval tv{2, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[2048];
    ssize_t n = recv(c, buf, sizeof(buf) - 1, 0);
    std::string request = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    std::string body, status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8";
    if (request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0) {
      body = render_();
    } else {
      status = "404 Not Found";
      type = "text/plain; charset=utf-8";
      body = "fragscope-collector serves GET /metrics\n";
    }
    std::string response = absl::StrFormat(
        "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
        status, type, body.size(), body);
    size_t done = 0;
    while (done < response.size()) {
      ssize_t w = send(c, response.data() + done, response.size() - done, MSG_NOSIGNAL);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    close(c);
  }
}

}  // namespace fragscope
