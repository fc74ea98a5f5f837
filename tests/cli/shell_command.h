// Commands run as a user types them in a shell, for the tests that drive the installed or built
// programs end to end (tests/cli, tests/package).
#ifndef FRAGSCOPE_TESTS_CLI_SHELL_COMMAND_H_
#define FRAGSCOPE_TESTS_CLI_SHELL_COMMAND_H_

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace fragscope::testing {

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// `command` under /bin/sh, its output and exit status (-1 if it did not exit).
inline Result Shell(const std::string& command) {
  Result r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The whole file ("" if it cannot be read).
inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// How many times `needle` occurs in `text` (overlapping occurrences counted).
inline int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace fragscope::testing

#endif  // FRAGSCOPE_TESTS_CLI_SHELL_COMMAND_H_
