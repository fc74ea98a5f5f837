#include "install_layout.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>

namespace fragscope::cli {

std::string InstallPrefix() {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return ".";
  self[n] = '\0';
  std::string dir(self);
  dir = dir.substr(0, dir.rfind('/'));
  return dir.substr(0, dir.rfind('/'));
}

std::string AgentLibraryPath() {
  if (const char* env = getenv("FRAGSCOPE_AGENT"); env != nullptr && env[0] != '\0') return env;
  const std::string prefix = InstallPrefix();
  for (const char* rel : {"/lib/libfragscope.so", "/lib64/libfragscope.so",
                          "/lib/x86_64-linux-gnu/libfragscope.so"}) {
    std::string candidate = prefix + rel;
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return prefix + "/lib/libfragscope.so";
}

std::string AdapterDir() {
  if (const char* env = getenv("FRAGSCOPE_ADAPTER_DIR"); env != nullptr && env[0] != '\0') {
    return env;
  }
  for (const std::string& candidate :
       {InstallPrefix() + "/share/fragscope/adapter", std::string(FRAGSCOPE_SOURCE_ADAPTER_DIR)}) {
    if (access((candidate + "/sitecustomize.py").c_str(), R_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace fragscope::cli
