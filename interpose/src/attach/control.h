// The agent's side of the per-process control socket through which `fragscope attach` wakes a
// dormant agent. Its path, commands and answer words are the attach contract
// (fragscope/attach_contract.h); the control dir is created mode 0700 and refused when another
// user owns it or others may enter. Answers in detail: interpose/README.md "Attach".
//
// Security: only peers of our own uid are served (SO_PEERCRED), whatever the file modes say.
//
// Thread safety: none; owned by the agent's background (drain) thread. No heap allocation.
#ifndef FRAGSCOPE_INTERPOSE_CONTROL_H_
#define FRAGSCOPE_INTERPOSE_CONTROL_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace fragscope::agent {

enum class ControlCommandKind { kNone, kWake, kSleep, kStatus, kSyncTorch, kInvalid };

struct ControlCommand {
  ControlCommandKind kind = ControlCommandKind::kNone;
  // wake: the collector's socket path; sync-torch: why (1 to 16 lowercase letters).
  char argument[4096] = {};
  uint32_t wait_ms = 0;  // sync-torch: 1 to control_socket::kSyncTorchMaxWaitMs
};

// Writes the control directory for `xdg_runtime_dir` (may be null/empty) and `uid` into `out`.
bool ControlDirFor(const char* xdg_runtime_dir, uid_t uid, char* out, size_t capacity);

// Parses one command line (without or with its trailing newline).
ControlCommand ParseControlCommand(const char* line, size_t length);

class ControlServer {
 public:
  ControlServer() = default;
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Creates `dir` (0700) if needed, checks it is ours and private, and listens on
  // `dir/agent-<pid>.sock` (0600), replacing a stale socket of a dead process with our pid.
  // False, with one line on stderr, if that is not possible.
  bool Listen(const char* dir);
  bool listening() const { return fd_ >= 0; }
  const char* path() const { return path_; }

  // Waits up to `timeout_ms` for a client of our uid and reads its command (a peer that sends
  // nothing within a second is dropped). Returns kNone when there was none; the client stays
  // open until Reply().
  ControlCommand Next(int timeout_ms);
  // Sends `line` (a newline is added) to the client of the last command and closes it.
  void Reply(const char* line);

  int refused_peers() const { return refused_peers_; }

  // Closes and unlinks the socket (exit).
  void Close();
  // A forked child: closes its copies of the descriptors; the socket file is the parent's.
  void ForgetAfterFork();

 private:
  int fd_ = -1;
  int client_ = -1;
  int refused_peers_ = 0;
  char path_[4200] = {};
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_CONTROL_H_
