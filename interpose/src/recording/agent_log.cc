#include "recording/agent_log.h"

#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "recording/agent_check.h"

namespace fragscope::agent {

void AgentLog(const char* format, ...) {
  const int saved_errno = errno;
  constexpr char kPrefix[] = "fragscope: ";
  constexpr size_t kPrefixLen = sizeof(kPrefix) - 1;
  // A path of up to PATH_MAX (4096) bytes and the words around it; small enough for any stack a
  // hook may run on.
  char line[5120];
  memcpy(line, kPrefix, kPrefixLen);
  va_list args;
  va_start(args, format);
  const int n = vsnprintf(line + kPrefixLen, sizeof(line) - kPrefixLen - 1, format, args);
  va_end(args);
  if (n >= 0) {
    size_t len = kPrefixLen + static_cast<size_t>(n);
    if (len > sizeof(line) - 2) len = sizeof(line) - 2;  // cut: keep room for the newline
    line[len++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
  }
  errno = saved_errno;
}

void AgentCheckFailed(const char* condition, const char* file, int line) {
  AgentLog("internal check failed: %s (%s:%d)", condition, file, line);
  abort();
}

}  // namespace fragscope::agent
