// A Unix stream socket that agents connect to. Only processes of the same user are accepted
// (SO_PEERCRED), and the socket lives in a 0700 directory, so no other user can read a trace.
#ifndef FRAGSCOPE_SERVER_SOCKET_LISTENER_H_
#define FRAGSCOPE_SERVER_SOCKET_LISTENER_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace fragscope {

// Creates a private directory for sockets: $XDG_RUNTIME_DIR/fragscope or /tmp/fragscope-$UID,
// mode 0700, refusing one owned by someone else. Returns its path.
absl::StatusOr<std::string> PrivateRuntimeDir();

// Owns the listening fd and unlinks the socket path on destruction. Not thread-safe except
// Shutdown(), which may be called from another thread to wake a blocked Accept().
class SocketListener {
 public:
  static absl::StatusOr<SocketListener> Listen(const std::string& path);
  SocketListener(SocketListener&& other) noexcept;
  SocketListener& operator=(SocketListener&&) = delete;
  ~SocketListener();

  // Blocks until a peer of our uid connects; returns its fd (caller owns it), or -1 once
  // Shutdown() was called. Peers of another uid are closed and counted.
  int Accept(pid_t* peer_pid);
  void Shutdown();
  int refused_peers() const { return refused_peers_; }
  const std::string& path() const { return path_; }

 private:
  SocketListener(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  int refused_peers_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_SOCKET_LISTENER_H_
