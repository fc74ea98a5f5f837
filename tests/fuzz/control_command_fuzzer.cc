// Fuzz target: the agent's control-socket protocol (interpose/src/attach/control.h), which any
// process of the same user can speak to a traced job.
//
// The bytes go two ways:
//   - straight to ParseControlCommand, compared with an independent reading of the protocol
//     (below): one line, `wake </absolute/path>`, `sleep`, `status` or
//     `sync-torch <1..600000> <word>`, anything else invalid;
//   - through a real ControlServer: a client connects to its socket, sends the bytes in uneven
//     chunks and closes its side; Next() must return the parse of the first line when a newline
//     arrives within the server's line buffer, and nothing otherwise, without ever blocking
//     past its timeouts, and Reply() must reach the client.
// The server is the agent's code (fragscope_agent_core), built without exceptions or heap use.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "attach/control.h"
#include "fuzz_util.h"

namespace {

using fragscope::agent::ControlCommand;
using fragscope::agent::ControlCommandKind;
using fragscope::agent::ControlServer;

struct Expected {
  ControlCommandKind kind = ControlCommandKind::kInvalid;
  std::string argument;
  uint32_t wait_ms = 0;
};

// `sync-torch <ms> <why>`: ms a decimal number 1..600000 written without a leading zero, why
// 1 to 16 lowercase ASCII letters, single spaces.
bool ReadSyncTorch(std::string_view line, Expected* e) {
  constexpr std::string_view kVerb = "sync-torch ";
  if (line.substr(0, kVerb.size()) != kVerb) return false;
  line.remove_prefix(kVerb.size());
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return false;
  const std::string_view ms = line.substr(0, space);
  const std::string_view why = line.substr(space + 1);
  if (ms.empty() || ms.size() > 6 || ms.front() == '0') return false;
  uint64_t value = 0;
  for (char c : ms) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > 600000 || why.empty() || why.size() > 16) return false;
  for (char c : why) {
    if (c < 'a' || c > 'z') return false;
  }
  e->kind = ControlCommandKind::kSyncTorch;
  e->argument.assign(why);
  e->wait_ms = static_cast<uint32_t>(value);
  return true;
}

// The protocol as interpose/README.md "Attach" states it, written independently of control.cc.
Expected ReadProtocol(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  Expected e;
  if (line == "sleep") {
    e.kind = ControlCommandKind::kSleep;
  } else if (line == "status") {
    e.kind = ControlCommandKind::kStatus;
  } else if (ReadSyncTorch(line, &e)) {
    // kind, argument and wait set
  } else if (line.substr(0, 5) == "wake " || line == "wake") {
    std::string_view arg = line.substr(4);
    while (!arg.empty() && arg.front() == ' ') arg.remove_prefix(1);
    if (!arg.empty() && arg.front() == '/' && arg.size() < sizeof(ControlCommand::argument)) {
      e.kind = ControlCommandKind::kWake;
      e.argument.assign(arg);
    }
  }
  return e;
}

void CheckSame(const ControlCommand& got, const Expected& want, const char* route) {
  FUZZ_CHECK(got.kind == want.kind, "%s: kind %d, the protocol says %d", route,
             static_cast<int>(got.kind), static_cast<int>(want.kind));
  if (want.kind == ControlCommandKind::kSyncTorch) {
    FUZZ_CHECK(got.wait_ms == want.wait_ms && std::string_view(got.argument) == want.argument,
               "%s: sync-torch %u '%s', expected %u '%s'", route, got.wait_ms, got.argument,
               want.wait_ms, want.argument.c_str());
    return;
  }
  if (want.kind != ControlCommandKind::kWake) return;
  FUZZ_CHECK(memchr(got.argument, '\0', sizeof(got.argument)) != nullptr,
             "%s: wake argument not terminated", route);
  // A path with an embedded NUL is cut there by the C string; compare what the agent would use.
  std::string_view want_c(want.argument.c_str());
  FUZZ_CHECK(std::string_view(got.argument) == want_c, "%s: wake argument '%s', expected '%s'",
             route, got.argument, want.argument.c_str());
}

// One listening server for the whole run, in a private temporary directory.
ControlServer& Server() {
  static ControlServer* server = [] {
    char dir[] = "/tmp/fragscope-control-fuzz-XXXXXX";
    FUZZ_CHECK(mkdtemp(dir) != nullptr, "mkdtemp failed");
    std::string control_dir = std::string(dir) + "/control";
    auto* s = new ControlServer();
    FUZZ_CHECK(s->Listen(control_dir.c_str()), "Listen(%s) failed", control_dir.c_str());
    return s;
  }();
  return *server;
}

int Connect(const char* path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket failed");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  FUZZ_CHECK(std::strlen(path) < sizeof(addr.sun_path), "socket path too long: %s", path);
  std::memcpy(addr.sun_path, path, std::strlen(path) + 1);
  FUZZ_CHECK(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0,
             "connect(%s) failed", path);
  return fd;
}

void ThroughSocket(const uint8_t* data, size_t size) {
  ControlServer& server = Server();
  int client = Connect(server.path());
  std::string reply;
  std::thread peer([&] {
    // Uneven chunks: the server must assemble a line from several reads.
    size_t done = 0, chunk = 1;
    while (done < size) {
      size_t n = std::min(chunk, size - done);
      ssize_t sent = send(client, data + done, n, MSG_NOSIGNAL);
      if (sent <= 0) break;  // the server stopped reading (line buffer full): fine
      done += static_cast<size_t>(sent);
      chunk = chunk * 3 % 97 + 1;
    }
    shutdown(client, SHUT_WR);
    char buf[256];
    ssize_t n;
    while ((n = recv(client, buf, sizeof(buf), 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  });
  ControlCommand got = server.Next(/*timeout_ms=*/5000);
  // What the server can have read: its line buffer (argument + 16 bytes) at most.
  constexpr size_t kLineBuffer = sizeof(ControlCommand::argument) + 16;
  std::string_view sent(reinterpret_cast<const char*>(data), size);
  std::string_view window = sent.substr(0, kLineBuffer);
  size_t newline = window.find('\n');
  if (newline == std::string_view::npos) {
    FUZZ_CHECK(got.kind == ControlCommandKind::kNone, "no newline in %zu bytes, yet kind %d",
               window.size(), static_cast<int>(got.kind));
  } else {
    CheckSame(got, ReadProtocol(window.substr(0, newline)), "socket");
    server.Reply("ok fuzz");
  }
  peer.join();
  close(client);
  if (newline != std::string_view::npos) {
    FUZZ_CHECK(reply == "ok fuzz\n", "reply '%s'", reply.c_str());
  } else {
    FUZZ_CHECK(reply.empty(), "a client without a command got '%s'", reply.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  CheckSame(fragscope::agent::ParseControlCommand(bytes.data(), bytes.size()), ReadProtocol(bytes),
            "parse");
  ThroughSocket(data, size);
  return 0;
}
