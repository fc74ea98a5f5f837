#include "fragscope/symbolize/debuginfod_fetcher.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

namespace fragscope {

DebuginfodFetcher::~DebuginfodFetcher() {
  if (client_ != nullptr && end_ != nullptr) end_(client_);
  if (library_ != nullptr) dlclose(library_);
}

bool DebuginfodFetcher::Load() {
  if (tried_load_) return client_ != nullptr;
  tried_load_ = true;
  const char* urls = std::getenv("DEBUGINFOD_URLS");
  if (urls == nullptr || *urls == '\0') return false;
  library_ = dlopen("libdebuginfod.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) return false;
  auto begin = reinterpret_cast<void* (*)()>(dlsym(library_, "debuginfod_begin"));
  find_debuginfo_ = reinterpret_cast<int (*)(void*, const unsigned char*, int, char**)>(
      dlsym(library_, "debuginfod_find_debuginfo"));
  end_ = reinterpret_cast<void (*)(void*)>(dlsym(library_, "debuginfod_end"));
  if (begin == nullptr || find_debuginfo_ == nullptr || end_ == nullptr) return false;
  client_ = begin();
  return client_ != nullptr;
}

std::optional<std::string> DebuginfodFetcher::FindDebugInfo(const std::string& build_id) {
  if (build_id.empty() || !Load()) return std::nullopt;
  char* path = nullptr;
  const int fd = find_debuginfo_(client_, reinterpret_cast<const unsigned char*>(build_id.data()),
                                 static_cast<int>(build_id.size()), &path);
  if (fd < 0) return std::nullopt;  // -errno: not found on any server, or none reachable
  close(fd);
  if (path == nullptr) return std::nullopt;
  std::string result(path);
  std::free(path);
  return result;
}

}  // namespace fragscope
