#include "stream_file_names.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_format.h"
#include "fragscope/trace/output_file.h"

namespace fragscope {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

StreamFileNames::StreamFileNames(std::string dir) : dir_(std::move(dir)) {}

bool StreamFileNames::TakenLocked(const std::string& name) const {
  return held_.count(name) > 0 || Exists(dir_ + "/" + name + ".fst") ||
         Exists(dir_ + "/" + name + ".report.txt");
}

std::string StreamFileNames::NameFor(const void* stream, const std::string& base, uint64_t start_s,
                                     bool reserve_trace) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = names_.find(stream); it != names_.end()) return it->second;
  std::string name = base;
  for (int n = 1;; ++n) {
    if (!TakenLocked(name)) {
      if (!reserve_trace) break;
      // Claimed on disk: another collector writing into this folder cannot take it either.
      const int fd = ::open((dir_ + "/" + name + ".fst").c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kOutputFileMode);
      if (fd >= 0) {
        ::close(fd);
        break;
      }
      if (errno != EEXIST) break;  // the trace's own open will say why
    }
    name = n == 1 ? absl::StrFormat("%s.t%d", base, start_s)
                  : absl::StrFormat("%s.t%d-%d", base, start_s, n);
  }
  names_[stream] = name;
  held_.insert(name);
  return name;
}

std::string StreamFileNames::Find(const void* stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(stream);
  return it == names_.end() ? std::string() : it->second;
}

bool StreamFileNames::Rename(const void* stream, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(stream);
  if (it == names_.end() || held_.count(name) > 0 || Exists(dir_ + "/" + name + ".report.txt")) {
    return false;
  }
  held_.erase(it->second);
  it->second = name;
  held_.insert(name);
  return true;
}

void StreamFileNames::Forget(const void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(stream);
  if (it == names_.end()) return;
  held_.erase(it->second);
  names_.erase(it);
}

}  // namespace fragscope
