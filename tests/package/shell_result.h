// What the package tests need to run commands as a user types them.
#ifndef FRAGSCOPE_TESTS_PACKAGE_SHELL_RESULT_H_
#define FRAGSCOPE_TESTS_PACKAGE_SHELL_RESULT_H_

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace fragscope::package_test {

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

}  // namespace fragscope::package_test

#endif  // FRAGSCOPE_TESTS_PACKAGE_SHELL_RESULT_H_
