// Where the stream goes: a trace file (FRAGSCOPE_OUTPUT) or a collector's Unix stream socket
// (FRAGSCOPE_SOCKET). Both get exactly the same bytes. A failure never reaches the program:
// the first one prints one warning on stderr, and from then on writes are refused so the caller
// counts what it could not ship. Close + Open starts over (the drain's reconnect); later
// failures of the same Output print nothing.
//
// Thread safety: none; used by whichever thread holds the drain lock.
#ifndef FRAGSCOPE_INTERPOSE_TRANSPORT_H_
#define FRAGSCOPE_INTERPOSE_TRANSPORT_H_

#include <cstddef>

namespace fragscope::agent {

class Output {
 public:
  Output() = default;
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  // Opens `socket_path` if non-empty, else creates/truncates `file_path`. The file descriptor is
  // close-on-exec. False (after one warning) if neither works.
  bool Open(const char* file_path, const char* socket_path);
  // Writes all of `data`; false once the output has failed (then it stays failed). `sent`, if
  // given, gets the bytes of `data` that did go out (all of them on success): a send that timed
  // out may have passed the first frames to the collector.
  bool Write(const void* data, size_t size, size_t* sent = nullptr);
  // A file only: cuts it back to its first `size` bytes and writes on from there (an End taken
  // back). False if that fails (the file is then left as it was).
  bool Rewind(size_t size);
  // Closes the descriptor (used by a forked child: closing its copy leaves the parent's file
  // or connection open).
  void Close();
  bool is_open() const { return fd_ >= 0 && !failed_; }
  bool failed() const { return failed_; }
  bool is_file() const { return !is_socket_; }
  // A file only: true once the open file has no name left (deleted, or its folder removed while
  // the program runs): what is written to it can no longer be read by anyone. One fstat.
  bool Unlinked() const;

 private:
  // One warning (the first failure only) naming what failed on path_.
  void Fail(const char* what, int error);
  // The collector at path_ runs as another user and would refuse the stream: said once (even
  // after another failure was), with both uids and what to do.
  void FailOtherUser(unsigned collector_uid, unsigned own_uid);

  int fd_ = -1;
  bool is_socket_ = false;
  bool failed_ = false;
  bool warned_ = false;
  bool warned_other_user_ = false;
  char path_[512] = {};  // what was opened, for the warning
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_TRANSPORT_H_
