#include "attach/control.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "fragscope/attach_contract.h"
#include "recording/agent_log.h"

namespace fragscope::agent {
namespace {

void Warn(const char* what, const char* path, int error) {
  AgentLog("control socket: %s %.300s: %s", what, path, strerror(error));
}

// A word's length without its terminating NUL.
template <size_t N>
constexpr size_t Len(const char (&)[N]) {
  return N - 1;
}

bool StartsWith(const char* line, size_t length, const char* word) {
  size_t n = strlen(word);
  return length >= n && memcmp(line, word, n) == 0 && (length == n || line[n] == ' ');
}

}  // namespace

bool ControlDirFor(const char* xdg_runtime_dir, uid_t uid, char* out, size_t capacity) {
  int n =
      xdg_runtime_dir != nullptr && xdg_runtime_dir[0] != '\0'
          ? snprintf(out, capacity, "%s/%s", xdg_runtime_dir, control_socket::kDirUnderRuntimeDir)
          : snprintf(out, capacity, "%s%u", control_socket::kFallbackDirPrefix,
                     static_cast<unsigned>(uid));
  return n > 0 && static_cast<size_t>(n) < capacity;
}

ControlCommand ParseControlCommand(const char* line, size_t length) {
  ControlCommand cmd;
  while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r')) --length;
  if (StartsWith(line, length, control_socket::kWake)) {
    size_t arg = Len(control_socket::kWake);
    while (arg < length && line[arg] == ' ') ++arg;
    size_t arg_len = length - arg;
    if (arg_len == 0 || arg_len >= sizeof(cmd.argument) || line[arg] != '/') {
      cmd.kind = ControlCommandKind::kInvalid;  // an absolute socket path is required
      return cmd;
    }
    memcpy(cmd.argument, line + arg, arg_len);
    cmd.argument[arg_len] = '\0';
    cmd.kind = ControlCommandKind::kWake;
  } else if (StartsWith(line, length, control_socket::kSyncTorch)) {
    // `sync-torch <wait ms> <why>`: digits without a leading zero, one space, a short word.
    const size_t first_digit = Len(control_socket::kSyncTorch) + 1;
    size_t at = first_digit;
    uint64_t wait = 0;
    size_t digits = 0;
    while (at < length && line[at] >= '0' && line[at] <= '9' && digits < 7) {
      wait = wait * 10 + static_cast<uint64_t>(line[at] - '0');
      ++at;
      ++digits;
    }
    size_t why = at + 1;
    size_t why_len = 0;
    while (why + why_len < length && line[why + why_len] >= 'a' && line[why + why_len] <= 'z') {
      ++why_len;
    }
    const bool ok = digits > 0 && line[first_digit] != '0' &&
                    wait <= control_socket::kSyncTorchMaxWaitMs && at < length && line[at] == ' ' &&
                    why_len >= 1 && why_len <= control_socket::kSyncTorchMaxWhy &&
                    why + why_len == length;
    if (!ok) {
      cmd.kind = ControlCommandKind::kInvalid;
      return cmd;
    }
    memcpy(cmd.argument, line + why, why_len);
    cmd.argument[why_len] = '\0';
    cmd.wait_ms = static_cast<uint32_t>(wait);
    cmd.kind = ControlCommandKind::kSyncTorch;
  } else if (length == Len(control_socket::kSleep) &&
             memcmp(line, control_socket::kSleep, length) == 0) {
    cmd.kind = ControlCommandKind::kSleep;
  } else if (length == Len(control_socket::kStatus) &&
             memcmp(line, control_socket::kStatus, length) == 0) {
    cmd.kind = ControlCommandKind::kStatus;
  } else {
    cmd.kind = ControlCommandKind::kInvalid;
  }
  return cmd;
}

bool ControlServer::Listen(const char* dir) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    Warn("cannot create", dir, errno);
    return false;
  }
  struct stat st;
  if (lstat(dir, &st) != 0) {
    Warn("cannot inspect", dir, errno);
    return false;
  }
  // Anyone who can enter the directory could replace our socket with theirs.
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    Warn("refusing a directory not private to this user:", dir, EPERM);
    return false;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  int n = snprintf(path_, sizeof(path_), "%s/%s%d%s", dir, control_socket::kSocketPrefix,
                   static_cast<int>(getpid()), control_socket::kSocketSuffix);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(addr.sun_path)) {
    Warn("path too long:", dir, ENAMETOOLONG);
    path_[0] = '\0';
    return false;
  }
  // Bound under a temporary name and renamed into place once listening: a client that finds
  // the socket file (fragscope attach polls for it) must never connect between bind and listen,
  // which fails with ECONNREFUSED and read as "no answer on its control socket".
  n = snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/.%s%d%s.new", dir,
               control_socket::kSocketPrefix, static_cast<int>(getpid()),
               control_socket::kSocketSuffix);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(addr.sun_path)) {
    Warn("path too long:", dir, ENAMETOOLONG);
    path_[0] = '\0';
    return false;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    Warn("cannot create socket", path_, errno);
    return false;
  }
  unlink(addr.sun_path);  // left by an earlier process that had our pid
  mode_t old_mask = umask(077);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old_mask);
  if (rc != 0 || listen(fd, 4) != 0 || rename(addr.sun_path, path_) != 0) {
    Warn("cannot listen on", path_, errno);
    if (rc == 0) unlink(addr.sun_path);
    close(fd);
    path_[0] = '\0';
    return false;
  }
  fd_ = fd;
  return true;
}

ControlCommand ControlServer::Next(int timeout_ms) {
  ControlCommand none;
  if (fd_ < 0) return none;
  pollfd p{fd_, POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return none;
  int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return none;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(client, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
    ++refused_peers_;
    static const char kRefused[] = "error refused: not the same user\n";
    ssize_t ignored = send(client, kRefused, sizeof(kRefused) - 1, MSG_NOSIGNAL);
    (void)ignored;
    close(client);
    return none;
  }
  // A peer that connects and says nothing must not hold the agent's thread.
  timeval timeout{1, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  char line[sizeof(ControlCommand::argument) + 16];
  size_t used = 0;
  while (used < sizeof(line)) {
    ssize_t got = recv(client, line + used, sizeof(line) - used, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    used += static_cast<size_t>(got);
    if (memchr(line, '\n', used) != nullptr) break;
  }
  const char* end = static_cast<const char*>(memchr(line, '\n', used));
  if (end == nullptr) {
    close(client);
    return none;
  }
  client_ = client;
  return ParseControlCommand(line, static_cast<size_t>(end - line));
}

void ControlServer::Reply(const char* text) {
  if (client_ < 0) return;
  char line[1024];
  int n = snprintf(line, sizeof(line), "%s\n", text);
  if (n > 0) {
    ssize_t ignored =
        send(client_, line, std::min(static_cast<size_t>(n), sizeof(line) - 1), MSG_NOSIGNAL);
    (void)ignored;
  }
  close(client_);
  client_ = -1;
}

void ControlServer::Close() {
  if (client_ >= 0) close(client_);
  client_ = -1;
  if (fd_ >= 0) {
    close(fd_);
    unlink(path_);
  }
  fd_ = -1;
}

void ControlServer::ForgetAfterFork() {
  if (client_ >= 0) close(client_);
  if (fd_ >= 0) close(fd_);
  client_ = -1;
  fd_ = -1;
  path_[0] = '\0';
}

}  // namespace fragscope::agent
