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

std::vector<std::string> AgentLibraryCandidates() {
  const std::string prefix = InstallPrefix();
  return {prefix + "/lib/libfragscope.so", prefix + "/lib64/libfragscope.so",
          prefix + "/lib/x86_64-linux-gnu/libfragscope.so"};
}

std::string AgentLibraryPath() {
  if (const char* env = getenv("FRAGSCOPE_AGENT"); env != nullptr && env[0] != '\0') return env;
  const std::vector<std::string> candidates = AgentLibraryCandidates();
  for (const std::string& candidate : candidates) {
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return candidates.front();
}

std::string MissingAgentMessage(const std::string& library) {
  const char* next =
      ". Reinstall the package it came from, build it (scripts/setup), or pass "
      "--agent PATH / FRAGSCOPE_AGENT";
  if (const char* env = getenv("FRAGSCOPE_AGENT"); env != nullptr && env[0] != '\0') {
    return "agent library " + library + " not found (FRAGSCOPE_AGENT=" + env +
           "); point FRAGSCOPE_AGENT at an existing libfragscope.so or unset it";
  }
  const std::vector<std::string> candidates = AgentLibraryCandidates();
  if (library != candidates.front()) {  // libfragscope_cupti.so, looked for beside the agent
    return "library " + library + " not found (it belongs beside the agent)" + next;
  }
  std::string looked;
  for (const std::string& candidate : candidates) {
    looked += (looked.empty() ? "" : ", ") + candidate;
  }
  return "agent library libfragscope.so not found; looked next to this fragscope (" +
         InstallPrefix() + "/bin) in " + looked + next;
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
