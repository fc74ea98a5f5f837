// AgentLog: one whole line per call on stderr, prefixed, cut but still a line when too long,
// errno as it was. FRAGSCOPE_DCHECK: aborts with a line naming the check where tests run, and
// costs nothing (the condition is not evaluated) in a Release build.
#include "recording/agent_log.h"

#include "recording/agent_check.h"
#include "recording/live_table.h"

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

#if FRAGSCOPE_DEBUG_CHECKS
TEST(AgentCheckDeathTest, AFailedCheckNamesItselfAndAborts) {
  EXPECT_DEATH(FRAGSCOPE_DCHECK(1 + 1 == 3),
               "fragscope: internal check failed: 1 \\+ 1 == 3 \\(.*agent_log_test.cc:[0-9]+\\)");
}

// A real precondition: a removal is stamped once, by the thread that erased the entry.
TEST(AgentCheckDeathTest, StampingATombstoneTwiceIsCaught) {
  LiveTable table;
  ASSERT_TRUE(table.Init(64));
  LiveEntry e = ZeroLiveEntry();
  e.cls = LiveClass::kAllocation;
  e.address = 0x1000;
  e.size = 4096;
  e.seq = 1;
  size_t index = 0;
  ASSERT_TRUE(table.Insert(e, &index));
  ASSERT_TRUE(table.Erase(LiveClass::kAllocation, 0x1000, nullptr, &index));
  table.SetRemovedSeq(index, 2);
  EXPECT_DEATH(table.SetRemovedSeq(index, 3), "internal check failed");
}
#else
TEST(AgentCheckTest, OffTheConditionIsNotEvaluated) {
  int evaluated = 0;
  FRAGSCOPE_DCHECK(++evaluated == 0);
  EXPECT_EQ(evaluated, 0);
}
#endif

}  // namespace
}  // namespace fragscope::agent
