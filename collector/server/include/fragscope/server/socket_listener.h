// A Unix stream socket that agents connect to. Only processes of the same user are accepted
// (SO_PEERCRED), and the socket lives in a 0700 directory, so no other user can read a trace.
#ifndef FRAGSCOPE_SERVER_SOCKET_LISTENER_H_
#define FRAGSCOPE_SERVER_SOCKET_LISTENER_H_

#include <sys/types.h>

#include <functional>
#include <set>
#include <string>

#include "absl/status/statusor.h"

namespace fragscope {

// Creates a private directory for sockets: $XDG_RUNTIME_DIR/fragscope or /tmp/fragscope-$UID,
// mode 0700, refusing one owned by someone else. Returns its path.
absl::StatusOr<std::string> PrivateRuntimeDir();

// A connection refused because its process runs as another user.
struct RefusedPeer {
  uid_t uid = 0;  // the peer's (effective) uid when it connected
  pid_t pid = 0;  // 0 when the peer is in a pid namespace we cannot see
  uid_t own_uid = 0;
  std::string socket_path;
};

// Owns the listening fd and unlinks the socket path on destruction. Not thread-safe except
// Shutdown(), which may be called from another thread to wake a blocked Accept().
class SocketListener {
 public:
  static absl::StatusOr<SocketListener> Listen(const std::string& path);
  SocketListener(SocketListener&& other) noexcept;
  SocketListener& operator=(SocketListener&&) = delete;
  ~SocketListener();

  // Blocks until a peer of our uid connects; returns its fd (caller owns it), or -1 once
  // Shutdown() was called. Peers of another uid are closed and counted; the first of each uid
  // goes to the refusal observer (a refused agent retries every few seconds: one word per
  // user says what is going on without filling a log).
  int Accept(pid_t* peer_pid);
  // Called by Accept, on its thread. Unset: refusals are only counted.
  void set_refusal_observer(std::function<void(const RefusedPeer&)> observer) {
    on_refused_ = std::move(observer);
  }
  void Shutdown();
  int refused_peers() const { return refused_peers_; }
  const std::string& path() const { return path_; }

 private:
  SocketListener(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  int refused_peers_ = 0;
  std::function<void(const RefusedPeer&)> on_refused_;
  std::set<uid_t> refused_uids_;  // those said to the observer; users of one host: a few
};

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_SOCKET_LISTENER_H_
