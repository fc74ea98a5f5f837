// The --metrics endpoint's address: localhost, IPv4 and bracketed IPv6 loopback each serve
// /metrics; anything else is refused with the forms it takes, and a network address needs
// --metrics-allow-remote.
#include "fragscope/server/metrics_http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace fragscope {
namespace {

// GET /metrics over `family` to the loopback address; "" when it cannot connect.
std::string Get(int family, int port) {
  sockaddr_storage addr{};
  socklen_t length = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    a->sin6_addr = in6addr_loopback;
    length = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    length = sizeof(*a);
  }
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    if (fd >= 0) close(fd);
    return "";
  }
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  std::string out;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) > 0) {
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

bool HasIpv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

TEST(MetricsAddress, LocalhostIpv4AndIpv6LoopbackServe) {
  const auto render = [] { return std::string("fragscope_up 1\n"); };
  for (const char* address : {"localhost:0", "127.0.0.1:0"}) {
    auto server = MetricsHttpServer::Start(address, false, render);
    ASSERT_TRUE(server.ok()) << address << ": " << server.status();
    EXPECT_NE(Get(AF_INET, (*server)->port()).find("fragscope_up 1"), std::string::npos) << address;
  }
  if (!HasIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback here";
  auto server = MetricsHttpServer::Start("[::1]:0", false, render);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
  EXPECT_NE(Get(AF_INET6, (*server)->port()).find("fragscope_up 1"), std::string::npos);
}

TEST(MetricsAddress, AnythingElseIsRefusedWithTheFormsItTakes) {
  struct Case {
    const char* address;
    const char* says;
  };
  for (const Case& c : {Case{"9464",
                             "expected HOST:PORT (localhost:PORT, 127.0.0.1:PORT or "
                             "[::1]:PORT"},
                        Case{"::1:9464", "put an IPv6 address in brackets, e.g. [::1]:9464"},
                        Case{"[::1]", "expected HOST:PORT"}, Case{"[::1]:x", "'x' is not a port"},
                        Case{"localhost:70000", "'70000' is not a port"},
                        Case{"127.0.0.1:+5", "'+5' is not a port"},
                        Case{"example.com:9464", "host 'example.com' is not localhost"},
                        Case{"[127.0.0.1]:9464", "[127.0.0.1] is not an IPv6 address"}}) {
    auto parsed = ParseMetricsAddress(c.address);
    ASSERT_FALSE(parsed.ok()) << c.address;
    EXPECT_NE(parsed.status().message().find(c.says), std::string::npos)
        << c.address << ": " << parsed.status();
    EXPECT_NE(parsed.status().message().find(std::string("'") + c.address + "'"), std::string::npos)
        << "names the value: " << parsed.status();
  }
  auto remote = MetricsHttpServer::Start("[::]:0", false, [] { return std::string(); });
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find("--metrics-allow-remote"), std::string::npos);
  auto mapped = ParseMetricsAddress("[::ffff:127.0.0.1]:9464");
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_TRUE(mapped->loopback);
  EXPECT_EQ(mapped->port, 9464);
}

}  // namespace
}  // namespace fragscope
