#include "fragscope/server/socket_listener.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace fragscope {

absl::StatusOr<std::string> PrivateRuntimeDir() {
  std::string dir;
  if (const char* xdg = getenv("XDG_RUNTIME_DIR"); xdg != nullptr && xdg[0] == '/') {
    dir = std::string(xdg) + "/fragscope";
  } else {
    dir = absl::StrFormat("/tmp/fragscope-%d", getuid());
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot create runtime directory: %s; set XDG_RUNTIME_DIR to a "
                        "private writable directory",
                        dir, std::strerror(errno)));
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s: exists but is not a directory owned by uid %d; remove it or set XDG_RUNTIME_DIR", dir,
        getuid()));
  }
  if ((st.st_mode & 077) != 0 && chmod(dir.c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: is accessible to other users and cannot be made private", dir));
  }
  return dir;
}

absl::StatusOr<SocketListener> SocketListener::Listen(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: socket path longer than %d bytes; use a shorter XDG_RUNTIME_DIR", path,
                        sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::string("socket: ") + std::strerror(errno));
  unlink(path.c_str());
  mode_t old = umask(077);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old);
  if (rc != 0 || listen(fd, 64) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrFormat("%s: cannot listen: %s", path, std::strerror(err)));
  }
  return SocketListener(fd, path);
}

SocketListener::SocketListener(SocketListener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      refused_peers_(other.refused_peers_),
      on_refused_(std::move(other.on_refused_)),
      refused_uids_(std::move(other.refused_uids_)) {}

SocketListener::~SocketListener() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(path_.c_str());
  }
}

int SocketListener::Accept(pid_t* peer_pid) {
  for (;;) {
    int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return -1;  // shut down (EINVAL after shutdown) or fatal
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    const bool known = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
    if (!known || cred.uid != getuid()) {
      ++refused_peers_;
      close(c);
      if (known && on_refused_ && refused_uids_.insert(cred.uid).second) {
        on_refused_(RefusedPeer{cred.uid, cred.pid, getuid(), path_});
      }
      continue;
    }
    if (peer_pid != nullptr) *peer_pid = cred.pid;
    return c;
  }
}

void SocketListener::Shutdown() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

}  // namespace fragscope
