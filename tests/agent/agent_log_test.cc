// AgentLog: one whole line per call on stderr, prefixed, cut but still a line when too long,
// errno as it was.
#include "recording/agent_log.h"

#include <errno.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fragscope::agent {
namespace {

// What `emit` writes to stderr.
template <typename Emit>
std::string CaptureStderr(Emit emit) {
  char path[] = "/tmp/agent-log-test-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  emit();
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  lseek(fd, 0, SEEK_SET);
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) text.append(buffer, n);
  close(fd);
  unlink(path);
  return text;
}

TEST(AgentLogTest, OneLineWithThePrefix) {
  const std::string out =
      CaptureStderr([] { AgentLog("cannot %s %s: %d", "open", "/x/t.fst", 2); });
  EXPECT_EQ(out, "fragscope: cannot open /x/t.fst: 2\n");
}

TEST(AgentLogTest, ALongLineIsCutAndStillEndsTheLine) {
  const std::string path(20000, 'p');
  const std::string out = CaptureStderr([&] { AgentLog("the file %s was deleted", path.c_str()); });
  ASSERT_GT(out.size(), 4096u);  // a whole PATH_MAX path fits
  EXPECT_LT(out.size(), path.size());
  EXPECT_EQ(out.rfind("fragscope: the file ppp", 0), 0u);
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1);
}

TEST(AgentLogTest, KeepsErrno) {
  errno = EIO;
  CaptureStderr([] {
    errno = EIO;
    AgentLog("x");
    EXPECT_EQ(errno, EIO);
  });
}

}  // namespace
}  // namespace fragscope::agent
