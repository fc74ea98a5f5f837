#include "output_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace fragscope {

OutputDir::OutputDir(std::string path, mode_t mode, std::string made_again_note,
                     std::function<void(const std::string& line)> say)
    : path_(std::move(path)),
      mode_(mode),
      made_again_note_(std::move(made_again_note)),
      say_(std::move(say)) {}

bool OutputDir::Ensure() {
  std::lock_guard<std::mutex> lock(mu_);
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0) {
    said_cannot_ = false;
    return false;
  }
  // Anything but "gone" (a parent turned unreadable, say) is left to the writes to name.
  if (errno != ENOENT) return false;
  const std::string gone = std::strerror(errno);
  std::string dir = path_;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // "out/" is made as "out"
  // Parents that went with it (`rm -rf traces/` under --dir traces/job1) are made again too.
  for (std::size_t slash = dir.find('/', 1); slash != std::string::npos;
       slash = dir.find('/', slash + 1)) {
    (void)::mkdir(dir.substr(0, slash).c_str(), mode_);
  }
  if (::mkdir(dir.c_str(), mode_) != 0) {
    if (errno == EEXIST) return false;  // made again by someone else: nothing to say
    if (!said_cannot_) {
      say_(absl::StrFormat(
          "the output folder %s was removed while the daemon ran (stat: %s) and cannot be "
          "created again (mkdir: %s): traces, post-mortems and reports are lost until it exists; "
          "create it (mkdir -m %04o %s)",
          path_, gone, std::strerror(errno), mode_, path_));
      said_cannot_ = true;
    }
    return false;
  }
  said_cannot_ = false;
  say_(absl::StrFormat(
      "the output folder %s was removed while the daemon ran (stat: %s); created it again "
      "(mode %04o, as at start): %s",
      path_, gone, mode_, made_again_note_));
  return true;
}

}  // namespace fragscope
