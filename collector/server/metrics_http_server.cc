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

namespace {

constexpr char kForms[] = "localhost:PORT, 127.0.0.1:PORT or [::1]:PORT";

}  // namespace

absl::StatusOr<MetricsAddress> ParseMetricsAddress(const std::string& address) {
  MetricsAddress out;
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || (!address.empty() && address.back() == ']')) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics '%s': expected HOST:PORT (%s; port 0 picks a free one)", address, kForms));
  }
  std::string host = address.substr(0, colon);
  const std::string port_text = address.substr(colon + 1);
  int port = -1;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535 ||
      port_text.find_first_not_of("0123456789") != std::string::npos) {
    // "::1" alone lands here too: its last colon is taken for the port's.
    const bool bare_ipv6 = host.find(':') != std::string::npos && host.front() != '[';
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics '%s': %s", address,
        bare_ipv6
            ? "put an IPv6 address in brackets, e.g. [::1]:9464"
            : absl::StrFormat("'%s' is not a port (0-65535); expected %s", port_text, kForms)));
  }
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics '%s': put an IPv6 address in brackets, e.g. [::1]:%d", address, port));
  }
  // localhost is the one name taken: binding 127.0.0.1 is what it means everywhere, and other
  // names would need a resolver whose answer may change under a running daemon.
  if (host == "localhost") host = "127.0.0.1";
  out.port = port;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a.sin6_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--metrics '%s': %s is not an IPv6 address; expected %s", address, host, kForms));
    }
    out.loopback = IN6_IS_ADDR_LOOPBACK(&a.sin6_addr) ||
                   (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr) && a.sin6_addr.s6_addr[12] == 127);
    std::memcpy(&out.storage, &a, sizeof(a));
    out.length = sizeof(a);
    return out;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics '%s': host '%s' is not localhost, an IPv4 address or a bracketed IPv6 "
        "address; expected %s",
        address, host, kForms));
  }
  out.loopback = (ntohl(a.sin_addr.s_addr) >> 24) == 127;
  std::memcpy(&out.storage, &a, sizeof(a));
  out.length = sizeof(a);
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, bool allow_remote, std::function<std::string()> render) {
  absl::StatusOr<MetricsAddress> parsed = ParseMetricsAddress(address);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->loopback && !allow_remote) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--metrics '%s' is not a loopback address; pass --metrics-allow-remote to expose "
        "metrics on the network",
        address));
  }
  sockaddr_storage addr = parsed->storage;
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), parsed->length) != 0 ||
      listen(fd, 16) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrFormat("--metrics %s: cannot listen: %s", address, std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const uint16_t port = addr.ss_family == AF_INET6
                            ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                            : reinterpret_cast<sockaddr_in*>(&addr)->sin_port;
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(fd, ntohs(port), std::move(render)));
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
