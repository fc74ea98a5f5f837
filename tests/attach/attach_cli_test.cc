// `fragscope attach PID`: against a program started with its agent dormant (the trace it keeps
// ends in the state the fake driver reports), detaching after --duration, and the errors a user
// meets (no such process, another user's, not a CUDA process, an agent that is not dormant).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent_of_another_build.h"
#include "attach_client.h"
#include "traced_process.h"

namespace fragscope::agent_test {
namespace {

const std::string kCli = FRAGSCOPE_CLI_BIN;

RunOptions Cli(const TempDir& dir) { return RunOptions{false, {{"XDG_RUNTIME_DIR", dir.path()}}}; }

// Once the attach streams, takes agent_attach_app through its phases 2 and 3 and lets both end.
void RunPhasesUnderTheAttach(LiveProcess& app, LiveProcess& attach, const std::string& control) {
  ASSERT_TRUE(WaitForStatus(control, "ok streaming")) << attach.err();
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 2"));
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 3"));
  ASSERT_EQ(app.Finish(), 0) << app.err();
  ASSERT_EQ(attach.Finish(), 0) << attach.err();
}

TEST(AttachCliTest, CollectsUntilTheProcessEndsAndMatchesTheDriver) {
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Dormant(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control)) << app.err();
  LiveProcess attach(kCli,
                     {"attach", std::to_string(app.pid()), "-o", dir.File("t.fst"), "--format",
                      "json", "--report", dir.File("report.json")},
                     Cli(dir));
  ASSERT_NO_FATAL_FAILURE(RunPhasesUnderTheAttach(app, attach, control));
  EXPECT_NE(attach.err().find("the process ended"), std::string::npos) << attach.err();

  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.hello(), nullptr);
  EXPECT_TRUE(trace.hello()->attached());
  ASSERT_NE(trace.end(), nullptr);
  EXPECT_EQ(Replay(trace), GroundTruth(dir.File("truth")));
  // The report knows the OOM of phase 2 and that the stream comes from an attach.
  nlohmann::json report = nlohmann::json::parse(ReadFile(dir.File("report.json")), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << ReadFile(dir.File("report.json"));
  EXPECT_NE(report.dump().find("\"attached\":true"), std::string::npos) << report.dump();
  // And the kept trace reads on its own.
  RunResult again = RunProgram(kCli, {"report", dir.File("t.fst")}, Cli(dir));
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// `fragscope run --dormant -- CMD` is the README's way to start a job for a later attach: it
// becomes CMD (so the pid a shell's $! gives is the program's) with its agent dormant.
TEST(AttachCliTest, RunDormantBecomesTheProgramThatAttachWakes) {
  TempDir dir;
  LiveProcess app(
      kCli, {"run", "--dormant", "--", AppPath("agent_attach_app")},
      RunOptions{false,
                 {{"XDG_RUNTIME_DIR", dir.path()}, {"FAKECUDA_LIVE_DUMP", dir.File("truth")}}});
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control)) << "no agent in pid " << app.pid() << ": " << app.err();
  EXPECT_EQ(Status(control).rfind("ok dormant", 0), 0u);
  EXPECT_NE(app.err().find("`fragscope attach " + std::to_string(app.pid()) + "` wakes it"),
            std::string::npos)
      << app.err();
  LiveProcess attach(kCli, {"attach", std::to_string(app.pid()), "-o", dir.File("t.fst")},
                     Cli(dir));
  ASSERT_NO_FATAL_FAILURE(RunPhasesUnderTheAttach(app, attach, control));
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  EXPECT_EQ(Replay(trace), GroundTruth(dir.File("truth")));
}

TEST(AttachCliTest, DurationDetachesAndLeavesTheAgentDormant) {
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Dormant(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control));
  RunResult attach = RunProgram(
      kCli, {"attach", std::to_string(app.pid()), "--duration", "1", "-o", dir.File("t.fst")},
      Cli(dir));
  ASSERT_EQ(attach.exit_code, 0) << attach.err;
  EXPECT_NE(attach.err.find("detached"), std::string::npos) << attach.err;
  EXPECT_FALSE(attach.out.empty());  // the text report
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_NE(trace.end(), nullptr);  // a detach closes the stream properly
  EXPECT_EQ(Replay(trace).size(), 4u);
  EXPECT_EQ(Status(control).rfind("ok dormant", 0), 0u);
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 2"));
  app.Send("go");
  ASSERT_EQ(app.Finish(), 0) << app.err();
  EXPECT_EQ(ReadTrace(dir.File("t.fst")).frames.size(), trace.frames.size())
      << "events after the detach reached the trace";
}

// A dormant agent of another build (here: this build's library with its version string
// changed, which is all that tells two builds apart) is woken and read, and the attach says so.
TEST(AttachCliTest, ADormantAgentOfAnotherBuildIsReported) {
  TempDir dir;
  RunResult version_run = RunProgram(kCli, {"--version"}, Cli(dir));
  ASSERT_EQ(version_run.exit_code, 0) << version_run.err;
  const std::string version = fragscope::testing::VersionFromOutput(version_run.out);
  ASSERT_EQ(mkdir(dir.File("other").c_str(), 0700), 0);
  const std::string agent = dir.File("other/libfragscope.so");  // the name attach looks for
  const std::string other =
      fragscope::testing::CopyAgentOfAnotherBuild(AgentLibrary(), version, agent);
  ASSERT_FALSE(other.empty());

  RunOptions dormant = Dormant(dir);
  dormant.preload = false;
  dormant.env["LD_PRELOAD"] = agent;
  LiveProcess app(AppPath("agent_attach_app"), {}, dormant);
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control)) << app.err();
  LiveProcess attach(kCli, {"attach", std::to_string(app.pid()), "-o", dir.File("t.fst")},
                     Cli(dir));
  ASSERT_NO_FATAL_FAILURE(RunPhasesUnderTheAttach(app, attach, control));
  EXPECT_NE(attach.err().find("pid " + std::to_string(app.pid()) + " runs an agent of version '" +
                              other + "', but this fragscope is version '" + version + "'"),
            std::string::npos)
      << attach.err();
  // Read all the same: the events are there.
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  EXPECT_EQ(Replay(trace), GroundTruth(dir.File("truth")));
}

// A rank the program set while the agent slept (an mp.spawn worker's init_process_group, long
// before the attach) names the woken stream: its Hello carries it.
TEST(AttachCliTest, ARankSetWhileDormantNamesTheWokenStream) {
  TempDir dir;
  RunOptions options = Dormant(dir);
  options.env["ATTACH_APP_RANK"] = "3:8";
  LiveProcess app(AppPath("agent_attach_app"), {}, options);
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control));
  RunResult attach = RunProgram(kCli,
                                {"attach", std::to_string(app.pid()), "--duration", "1", "-o",
                                 dir.File("t.fst"), "--format", "json"},
                                Cli(dir));
  ASSERT_EQ(attach.exit_code, 0) << attach.err;
  nlohmann::json report = nlohmann::json::parse(attach.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << attach.out;
  EXPECT_EQ(report["process"]["rank"], 3) << report["process"].dump();
  EXPECT_EQ(report["process"]["world_size"], 8) << report["process"].dump();
  Trace trace = ReadTrace(dir.File("t.fst"));
  ASSERT_TRUE(trace.clean) << trace.error;
  ASSERT_FALSE(trace.frames.empty());
  ASSERT_TRUE(trace.frames[0].has_hello());
  EXPECT_EQ(trace.frames[0].hello().rank(), 3u);
  EXPECT_EQ(trace.frames[0].hello().world_size(), 8u);
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 2"));
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 3"));
  app.Send("go");
  ASSERT_EQ(app.Finish(), 0) << app.err();
}

TEST(AttachCliTest, ErrorsSayWhatIsWrongAndWhatToDo) {
  TempDir dir;
  // Usage.
  EXPECT_EQ(RunProgram(kCli, {"attach"}, Cli(dir)).exit_code, 2);
  EXPECT_EQ(RunProgram(kCli, {"attach", "12x"}, Cli(dir)).exit_code, 2);
  EXPECT_EQ(RunProgram(kCli, {"attach", "1", "--duration", "-4"}, Cli(dir)).exit_code, 2);
  // A pid that no longer exists: a child we reaped.
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  RunResult r = RunProgram(kCli, {"attach", std::to_string(gone)}, Cli(dir));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("no process with pid"), std::string::npos) << r.err;
  // A process that does not use CUDA: nothing to inject into (inject_test.cc covers a CUDA
  // process started without the agent).
  {
    LiveProcess plain("/bin/sleep", {"60"}, RunOptions{false, {}});
    r = RunProgram(kCli, {"attach", std::to_string(plain.pid())}, Cli(dir));
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_NE(r.err.find("is not a CUDA process"), std::string::npos) << r.err;
  }
  // An agent that streams from the start has no control socket.
  {
    LiveProcess streaming(AppPath("agent_attach_app"), {},
                          RunOptions{true, {{"FRAGSCOPE_OUTPUT", dir.File("own.fst")}}});
    ASSERT_TRUE(streaming.WaitForLine("ready 1"));
    r = RunProgram(kCli, {"attach", std::to_string(streaming.pid())}, Cli(dir));
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_NE(r.err.find("agent loaded but no control socket"), std::string::npos) << r.err;
  }
}

// --report is written at the end of an attach that may last hours: a path that cannot be
// written is refused before the process is touched, and the file, like every file fragscope
// writes, is never group- or world-writable, whatever the umask.
TEST(AttachCliTest, ReportPathIsCheckedFirstAndTheReportIsNotWorldWritable) {
  TempDir dir;
  LiveProcess app(AppPath("agent_attach_app"), {}, Dormant(dir));
  ASSERT_TRUE(app.WaitForLine("ready 1")) << app.err();
  const std::string control = AgentSocket(dir, app.pid());
  ASSERT_TRUE(WaitForFile(control)) << app.err();
  const std::string bad = dir.File("no-such-dir/report.json");
  RunResult r = RunProgram(kCli, {"attach", std::to_string(app.pid()), "--report", bad}, Cli(dir));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("choose a writable path"), std::string::npos) << r.err;
  EXPECT_EQ(Status(control).rfind("ok dormant", 0), 0u) << "the refused attach woke the agent";

  const mode_t saved = umask(0);  // inherited by the attach below
  RunResult ok = RunProgram(kCli,
                            {"attach", std::to_string(app.pid()), "--duration", "1", "--format",
                             "json", "--report", dir.File("report.json")},
                            Cli(dir));
  umask(saved);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  struct stat st;
  ASSERT_EQ(stat(dir.File("report.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  nlohmann::json report = nlohmann::json::parse(ReadFile(dir.File("report.json")), nullptr, false);
  EXPECT_FALSE(report.is_discarded()) << ReadFile(dir.File("report.json"));
  app.Send("go");
  ASSERT_TRUE(app.WaitForLine("ready 2"));
  app.Send("go");
  ASSERT_EQ(app.Finish(), 0) << app.err();
}

TEST(AttachCliTest, AnotherUsersProcessIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to start a process under another uid";
  TempDir dir;
  pid_t other = fork();
  if (other == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    pause();
    _exit(0);
  }
  // The child changes uid right away; wait until /proc shows it.
  std::string status_path = "/proc/" + std::to_string(other) + "/status";
  for (int i = 0; i < 6000 && ReadFile(status_path).find("65534") == std::string::npos; ++i) {
    usleep(10000);
  }
  RunResult r = RunProgram(kCli, {"attach", std::to_string(other)}, Cli(dir));
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("belongs to uid 65534"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fragscope::agent_test
