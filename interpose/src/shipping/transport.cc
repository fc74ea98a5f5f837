#include "shipping/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "recording/agent_log.h"

namespace fragscope::agent {
namespace {

// A collector that stops reading must not stall the program forever: a blocked send gives up
// after this long and the output counts as disconnected.
constexpr int kSendTimeoutSeconds = 2;

}  // namespace

void Output::Fail(const char* what, int error) {
  failed_ = true;
  if (warned_) return;
  warned_ = true;
  AgentLog(
      "cannot %s %.300s: %s; the program continues, events are counted as dropped%s", what, path_,
      strerror(error),
      is_socket_ ? " until a collector accepts the stream again (retried every few seconds)" : "");
}

void Output::FailOtherUser(unsigned collector_uid, unsigned own_uid) {
  failed_ = true;
  if (warned_other_user_) return;
  warned_other_user_ = true;
  warned_ = true;  // this is the reason; a later "cannot connect" would only blur it
  AgentLog(
      "the collector at %.300s runs as uid %u and takes streams of its own user only; this "
      "program runs as uid %u, so nothing is sent there (the program continues, events are "
      "counted as dropped): run fragscope-collector as uid %u, or point FRAGSCOPE_SOCKET at a "
      "collector of your own",
      path_, collector_uid, own_uid, own_uid);
}

bool Output::Open(const char* file_path, const char* socket_path) {
  failed_ = false;
  if (socket_path != nullptr && socket_path[0] != '\0') {
    is_socket_ = true;
    snprintf(path_, sizeof(path_), "%s", socket_path);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (strlen(socket_path) >= sizeof(addr.sun_path)) {
      Fail("connect to", ENAMETOOLONG);
      return false;
    }
    strcpy(addr.sun_path, socket_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      Fail("connect to", errno);
      return false;
    }
    timeval timeout{kSendTimeoutSeconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    int rc;
    do {
      rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      int error = errno;
      close(fd);
      Fail("connect to", error);
      return false;
    }
    // A collector serves only its own user (SO_PEERCRED) and closes anyone else's connection
    // unread: the connect succeeds and only a later write fails, which would read as a
    // collector that went away and, on the next try, as a reconnect. The listener's uid (as it
    // was at listen()) says it at once; unknown, the stream is tried as before.
    ucred cred{};
    socklen_t len = sizeof(cred);
    const uid_t own_uid = geteuid();
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid != own_uid) {
      close(fd);
      FailOtherUser(cred.uid, own_uid);
      return false;
    }
    fd_ = fd;
    return true;
  }
  is_socket_ = false;
  snprintf(path_, sizeof(path_), "%s", file_path != nullptr ? file_path : "(output)");
  int fd;
  do {
    fd = open(file_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    Fail("write trace file", errno);
    return false;
  }
  fd_ = fd;
  return true;
}

bool Output::Write(const void* data, size_t size, size_t* sent) {
  if (sent != nullptr) *sent = 0;
  if (fd_ < 0 || failed_) return false;
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = is_socket_ ? send(fd_, p, size, MSG_NOSIGNAL) : write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail(is_socket_ ? "send to collector" : "write trace file", errno);
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
    if (sent != nullptr) *sent += static_cast<size_t>(n);
  }
  return true;
}

bool Output::Unlinked() const {
  struct stat st;
  return fd_ >= 0 && !is_socket_ && fstat(fd_, &st) == 0 && st.st_nlink == 0;
}

bool Output::Rewind(size_t size) {
  if (fd_ < 0 || failed_ || is_socket_) return false;
  const off_t at = static_cast<off_t>(size);
  return ftruncate(fd_, at) == 0 && lseek(fd_, at, SEEK_SET) == at;
}

void Output::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  failed_ = false;
}

}  // namespace fragscope::agent
