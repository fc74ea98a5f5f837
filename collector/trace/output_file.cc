#include "fragscope/trace/output_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_format.h"

namespace fragscope {

absl::StatusOr<int> CreateOutputFile(const std::string& path, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s: cannot create: %s; choose a writable path", path, std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777 & ~mode) != 0) {
    // A file that existed before with more bits. Not ours (EPERM): left as it is, like any
    // file the user points us at.
    (void)::fchmod(fd, st.st_mode & 07777 & mode);
  }
  return fd;
}

absl::Status CheckOutputFileWritable(const std::string& path) {
  // O_NONBLOCK: a FIFO without a reader yet must not hang the check (ENXIO: it will have one).
  int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  bool created = false;
  if (fd < 0 && errno == ENXIO) return absl::OkStatus();
  if (fd < 0 && errno == ENOENT) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kOutputFileMode);
    created = fd >= 0;
  }
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s: cannot create: %s; choose a writable path", path, std::strerror(errno)));
  }
  ::close(fd);
  if (created) ::unlink(path.c_str());
  return absl::OkStatus();
}

absl::Status WriteOutputFile(const std::string& path, std::string_view bytes, mode_t mode) {
  absl::StatusOr<int> fd = CreateOutputFile(path, mode);
  if (!fd.ok()) return fd.status();
  std::size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(*fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  struct stat st;
  const bool regular = ::fstat(*fd, &st) == 0 && S_ISREG(st.st_mode);
  if (::close(*fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    // A cut or empty report would read as a whole one later (a full disk left 0-byte reports):
    // a regular file that could not be written whole is removed. Devices and FIFOs stay.
    const bool removed = regular && ::unlink(path.c_str()) == 0;
    return absl::DataLossError(absl::StrFormat("%s: write failed after %d of %d bytes: %s%s", path,
                                               done, bytes.size(), std::strerror(err),
                                               removed ? " (the partial file was removed)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace fragscope
