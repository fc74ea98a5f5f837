// fragscope-collector as a long-running daemon: many processes at once, OOM post-mortems
// written as they happen, `fragscope top` on a live process, and other users refused.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_of_another_build.h"
#include "gtest/gtest.h"

namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ShellStatus(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  int status = p ? pclose(p) : -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Starts a process that holds `bytes` until the returned fd is closed.
pid_t StartHolder(const std::string& socket, uint64_t bytes, int* stdin_fd) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return -1;
  pid_t app = fork();
  if (app == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    setenv("FRAGSCOPE_SOCKET", socket.c_str(), 1);
    setenv("LD_PRELOAD", FRAGSCOPE_AGENT_LIB, 1);
    std::string arg = std::to_string(bytes);
    execl(FRAGSCOPE_HOLD_BIN, FRAGSCOPE_HOLD_BIN, arg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  char ready[6] = {};
  if (read(from_child[0], ready, 5) != 5) return -1;
  close(from_child[0]);
  *stdin_fd = to_child[1];
  return app;
}

class CollectorDaemon : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fragscope-daemon-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    socket_ = dir_ + "/c.sock";
    log_ = dir_ + "/daemon.log";
    std::vector<std::string> args = {FRAGSCOPE_COLLECTOR_BIN, "--socket", socket_, "--dir",
                                     dir_ + "/out"};
    for (const std::string& a : ExtraArgs()) args.push_back(a);
    daemon_ = fork();
    ASSERT_GE(daemon_, 0);
    if (daemon_ == 0) {
      if (freopen(log_.c_str(), "w", stderr) == nullptr) _exit(126);
      if (const rlim_t limit = FileSizeLimit(); limit > 0) {
        // A disk that fills up: writes past `limit` bytes fail (EFBIG) instead of killing.
        const rlimit r{limit, limit};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &r) != 0) _exit(125);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 500 && !fs::exists(socket_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(fs::exists(socket_)) << Slurp(log_);
  }
  virtual std::vector<std::string> ExtraArgs() const { return {}; }
  virtual rlim_t FileSizeLimit() const { return 0; }  // bytes per file the daemon may write
  void TearDown() override {
    if (daemon_ > 0) {
      kill(daemon_, SIGTERM);
      int status = 0;
      waitpid(daemon_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Slurp(log_);
    }
    fs::remove_all(dir_);
  }
  std::string AgentEnv() const {
    return "FRAGSCOPE_SOCKET=" + socket_ + " LD_PRELOAD=" + FRAGSCOPE_AGENT_LIB + " ";
  }
  // The daemon logs each stream's end once its final report is written.
  void WaitForLog(const std::string& needle, int count) {
    for (int i = 0; i < 1000; ++i) {
      std::string log = Slurp(log_);
      int found = 0;
      for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) {
        ++found;
      }
      if (found >= count) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "never saw " << count << " x '" << needle << "' in:\n" << Slurp(log_);
  }

  std::string dir_, socket_, log_;
  pid_t daemon_ = -1;
};

TEST_F(CollectorDaemon, ManyProcessesEachGetTraceReportsAndPostMortems) {
  // Three demo "ranks" at once; each dies of its second OOM (exit 1).
  std::string out;
  int status = ShellStatus("for i in 0 1 2; do RANK=$i WORLD_SIZE=3 FAKECUDA_CAPACITY=4G " +
                               AgentEnv() + FRAGSCOPE_DEMO_BIN + " >/dev/null & done; wait",
                           &out);
  EXPECT_EQ(status, 0) << out;
  WaitForLog(" ended ", 3);
  int traces = 0, oom_txt = 0, oom_json = 0, reports = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/out")) {
    std::string name = e.path().filename();
    if (name.ends_with(".fst")) {
      ++traces;
      // Named by rank, so `ls` reads as the job.
      EXPECT_TRUE(name.starts_with("fragmenting_training-rank")) << name;
    }
    if (name.find(".oom-") != std::string::npos && name.ends_with(".txt")) ++oom_txt;
    if (name.find(".oom-") != std::string::npos && name.ends_with(".json")) ++oom_json;
    if (name.ends_with(".report.json")) {
      ++reports;
      auto j = nlohmann::json::parse(Slurp(e.path()));
      ASSERT_EQ(j["ooms"].size(), 2u) << name;
      EXPECT_EQ(j["ooms"][0]["class"], "fragmentation");
    }
  }
  EXPECT_EQ(traces, 3);
  EXPECT_EQ(reports, 3);
  EXPECT_EQ(oom_txt, 6) << "two OOMs per process, each written as it happened";
  EXPECT_EQ(oom_json, 6);
  std::string log = Slurp(log_);
  EXPECT_NE(log.find("class: fragmentation ->"), std::string::npos) << log;
  EXPECT_EQ(log.find("its agent is version"), std::string::npos) << "same build: no warning";
  // The morning after: every rank's trace at once names the rank whose OOM came first.
  std::string job;
  EXPECT_EQ(ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " report " + dir_ + "/out/*.fst", &job), 0)
      << job;
  EXPECT_NE(job.find("==== job: 3 processes, 6 OOMs in 3 of them ===="), std::string::npos) << job;
  EXPECT_NE(job.find("First OOM: rank "), std::string::npos) << job;
}

// The post-mortem files of a stream in the daemon's folder: name -> contents.
std::map<std::string, std::string> PostMortemFiles(const std::string& dir, const char* ext) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    if (name.find(".oom-") != std::string::npos && name.ends_with(ext)) {
      files[name] = Slurp(e.path());
    }
  }
  return files;
}

// A plain cudaMalloc OOM after which the program hangs: its post-mortem is written while the
// program still runs, holding that OOM alone, and completed when the stream ends.
TEST_F(CollectorDaemon, AHangAfterAnOomStillLeavesItsPostMortem) {
  FILE* app = popen((AgentEnv() + FRAGSCOPE_OOM_RETRY_APP + " hang").c_str(), "w");
  ASSERT_NE(app, nullptr);
  std::map<std::string, std::string> txt;
  for (int i = 0; i < 600 && txt.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    txt = PostMortemFiles(dir_ + "/out", ".txt");
  }
  ASSERT_EQ(txt.size(), 1u) << Slurp(log_);
  const std::string& during = txt.begin()->second;
  EXPECT_NE(during.find("Written because the program had not allocated that size within 2.0 s"),
            std::string::npos)
      << during;
  EXPECT_NE(during.find("Not recovered so far"), std::string::npos) << during;
  EXPECT_NE(during.find("OOM on device 0: requested 64.00 GiB"), std::string::npos) << during;
  // That OOM alone, not the whole report again.
  EXPECT_EQ(during.find("Verdict:"), std::string::npos) << during;
  EXPECT_EQ(during.find("At the end of the run:"), std::string::npos) << during;
  const auto json = nlohmann::json::parse(PostMortemFiles(dir_ + "/out", ".json").begin()->second);
  EXPECT_EQ(json["oom"]["requested_bytes"], uint64_t{64} << 30);
  EXPECT_EQ(json["recovered"], false);
  EXPECT_EQ(json["stream_ended"], false);
  pclose(app);  // stdin closes: the program ends
  WaitForLog(" ended ", 1);
  const std::string after = PostMortemFiles(dir_ + "/out", ".txt").begin()->second;
  EXPECT_NE(after.find("Not recovered: no later success of that size before the stream ended"),
            std::string::npos)
      << after;
}

// A program that recovers after its OOM's file was written: the file says so at the end.
TEST_F(CollectorDaemon, APostMortemSaysWhenTheProgramLaterRecovered) {
  std::string out;
  EXPECT_EQ(ShellStatus("FAKECUDA_CAPACITY=4G " + AgentEnv() + FRAGSCOPE_OOM_RETRY_APP +
                            " recover " + dir_ + "/out",
                        &out),
            0)
      << out;
  WaitForLog(" ended ", 1);
  const auto txt = PostMortemFiles(dir_ + "/out", ".txt");
  ASSERT_EQ(txt.size(), 1u) << Slurp(log_);
  EXPECT_NE(txt.begin()->second.find("RECOVERED: the program later allocated that size"),
            std::string::npos)
      << txt.begin()->second;
  const auto json = nlohmann::json::parse(PostMortemFiles(dir_ + "/out", ".json").begin()->second);
  EXPECT_EQ(json["recovered"], true);
  EXPECT_GT(json["recovered_by_seq"].get<uint64_t>(), json["oom"]["seq"].get<uint64_t>());
  EXPECT_NE(Slurp(log_).find("the program recovered from the OOM at seq"), std::string::npos);
}

// A retry loop of 300 failures writes one post-mortem, which counts them, not 300 reports.
TEST_F(CollectorDaemon, ARetryLoopWritesOnePostMortem) {
  std::string out;
  EXPECT_EQ(ShellStatus(AgentEnv() + FRAGSCOPE_OOM_RETRY_APP + " retry 300", &out), 1) << out;
  WaitForLog(" ended ", 1);
  const auto txt = PostMortemFiles(dir_ + "/out", ".txt");
  ASSERT_EQ(txt.size(), 1u) << Slurp(log_);
  EXPECT_NE(txt.begin()->second.find("The same request failed 300 times"), std::string::npos)
      << txt.begin()->second;
  EXPECT_LT(txt.begin()->second.size(), 64u * 1024);
  const auto json = PostMortemFiles(dir_ + "/out", ".json");
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(json.begin()->second)["repeats"]["count"], 300);
  // Announced once, not 300 times.
  std::string log = Slurp(log_);
  EXPECT_EQ(log.find(".oom-"), log.rfind(".oom-")) << log;
}

// An agent of another build (this build's with its version string changed, which is all that
// tells two builds apart) is served, and the daemon's log says so with the stream.
TEST_F(CollectorDaemon, AnAgentOfAnotherBuildIsNamedInTheLog) {
  std::string version;
  ASSERT_EQ(ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " --version", &version), 0) << version;
  version = fragscope::testing::VersionFromOutput(version);
  const std::string agent = dir_ + "/libfragscope.so";
  const std::string other =
      fragscope::testing::CopyAgentOfAnotherBuild(FRAGSCOPE_AGENT_LIB, version, agent);
  ASSERT_FALSE(other.empty());
  std::string out;
  ShellStatus("FRAGSCOPE_SOCKET=" + socket_ + " LD_PRELOAD=" + agent + " FAKECUDA_CAPACITY=4G " +
                  FRAGSCOPE_DEMO_BIN + " >/dev/null",
              &out);
  WaitForLog(" ended ", 1);
  const std::string log = Slurp(log_);
  EXPECT_NE(log.find("warning: its agent is version '" + other + "' and this collector '" +
                     version + "'"),
            std::string::npos)
      << log;
  // Served all the same: the stream's report is there.
  int reports = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/out")) {
    if (e.path().filename().string().ends_with(".report.json")) ++reports;
  }
  EXPECT_EQ(reports, 1);
}

// Connects to the daemon's socket as an agent would and sends `bytes[from, to)`; the caller
// keeps the connection (fd) to send more or close it.
int ConnectTo(const std::string& socket_path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path.c_str());
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes, size_t from, size_t to) {
  while (from < to) {
    ssize_t n = write(fd, bytes.data() + from, to - from);
    if (n <= 0) return false;
    from += static_cast<size_t>(n);
  }
  return true;
}

// Two processes with the same executable and pid (pid namespaces: both pid 1; or a pid reused
// later) each get their own trace, report and post-mortems, one after the other and at the same
// time: before, the second replaced the first, and two at once wrote into one file. The same
// recorded stream is sent four times, so every stream has the same Hello.
TEST_F(CollectorDaemon, ProcessesWithTheSameExeAndPidGetFilesOfTheirOwn) {
  const std::string recorded = dir_ + "/recorded.fst";
  std::string out;
  ShellStatus("FRAGSCOPE_OUTPUT=" + recorded + " FAKECUDA_CAPACITY=4G LD_PRELOAD=" +
                  FRAGSCOPE_AGENT_LIB + " " + FRAGSCOPE_DEMO_BIN + " >/dev/null",
              &out);
  const std::string bytes = Slurp(recorded);
  ASSERT_GT(bytes.size(), 1000u) << out;
  for (int i = 1; i <= 2; ++i) {  // one after the other
    int fd = ConnectTo(socket_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, bytes, 0, bytes.size()));
    close(fd);
    WaitForLog(" ended ", i);
  }
  int a = ConnectTo(socket_), b = ConnectTo(socket_);  // at the same time, interleaved
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  const size_t half = bytes.size() / 2;
  ASSERT_TRUE(SendAll(a, bytes, 0, half));
  ASSERT_TRUE(SendAll(b, bytes, 0, half));
  ASSERT_TRUE(SendAll(a, bytes, half, bytes.size()));
  ASSERT_TRUE(SendAll(b, bytes, half, bytes.size()));
  close(a);
  close(b);
  WaitForLog(" ended ", 4);
  std::string expected;
  ASSERT_EQ(ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + "-dump " + recorded, &expected), 0);
  expected = expected.substr(expected.find('\n'));  // past the line naming the file
  std::set<std::string> traces, reports;
  int postmortems = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/out")) {
    const std::string name = e.path().filename();
    if (name.ends_with(".fst")) traces.insert(name);
    if (name.ends_with(".report.json")) reports.insert(name);
    if (name.find(".oom-") != std::string::npos && name.ends_with(".json")) ++postmortems;
  }
  ASSERT_EQ(traces.size(), 4u) << Slurp(log_);
  EXPECT_EQ(reports.size(), 4u);
  EXPECT_EQ(postmortems, 8) << "two OOMs per stream";
  for (const std::string& name : traces) {
    std::string dump;
    EXPECT_EQ(ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + "-dump " + dir_ + "/out/" + name, &dump),
              0)
        << name << "\n"
        << dump;
    // The stream as recorded, then the symbols the daemon stored for it (once, at its end).
    const std::size_t symbols = dump.find("# symbol table ");
    ASSERT_NE(symbols, std::string::npos) << name;
    EXPECT_EQ(dump.find("# symbol table ", symbols + 1), std::string::npos) << name;
    dump.erase(symbols, dump.find('\n', symbols) + 1 - symbols);
    EXPECT_EQ(dump.substr(dump.find('\n')), expected) << name;
  }
  for (const std::string& name : reports) {
    auto j = nlohmann::json::parse(Slurp(dir_ + "/out/" + name));
    EXPECT_EQ(j["ooms"].size(), 2u) << name;
  }
}

// A daemon whose disk fills up says, per file, which path could not be written and why, and
// leaves no empty or cut report behind (a 0-byte report reads as a report later); the trace it
// could not finish is said to be incomplete.
class CollectorDaemonFullDisk : public CollectorDaemon {
 protected:
  rlim_t FileSizeLimit() const override { return 12 << 10; }
};

TEST_F(CollectorDaemonFullDisk, EveryFailedWriteIsNamedAndNoReportIsLeftCut) {
  std::string out;
  ShellStatus("FAKECUDA_CAPACITY=4G " + AgentEnv() + FRAGSCOPE_DEMO_BIN + " >/dev/null", &out);
  WaitForLog(" ended ", 1);
  const std::string log = Slurp(log_);
  EXPECT_NE(log.find(dir_ + "/out/"), std::string::npos) << log;
  EXPECT_NE(log.find("File too large (the partial file was removed)"), std::string::npos) << log;
  int reports = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/out")) {
    const std::string name = e.path().filename();
    if (name.starts_with(".")) continue;
    EXPECT_GT(fs::file_size(e.path()), 0u) << name;
    if (name.ends_with(".fst") && fs::file_size(e.path()) >= FileSizeLimit()) {
      EXPECT_NE(log.find("the trace is incomplete"), std::string::npos) << log;
    }
    if (name.ends_with(".json")) {
      ++reports;
      EXPECT_NO_THROW(nlohmann::json::parse(Slurp(e.path()))) << name << " is cut";
    }
  }
  EXPECT_LT(reports, 3) << "the limit is below the size of the JSON reports:\n" << log;
}

// An mp.spawn worker names its rank after its stream began (init_process_group): when the
// stream ends, its trace, report and post-mortem files carry the rank like a torchrun rank's.
TEST_F(CollectorDaemon, ARankSetAfterTheStartNamesTheFiles) {
  std::string out;
  // The rank comes once the daemon has the stream under its Hello's name (no rank).
  ASSERT_EQ(ShellStatus("(until ls " + dir_ + "/out/hold_memory_app-[0-9]*.fst >/dev/null 2>&1; " +
                            "do sleep 0.01; done; echo go) | " + AgentEnv() + FRAGSCOPE_HOLD_BIN +
                            " 1048576 5:8",
                        &out),
            0)
      << out;
  WaitForLog(" ended ", 1);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ + "/out")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  std::string listing;
  for (const std::string& n : names) listing += n + "\n";
  int ranked = 0;
  for (const std::string& n : names) {
    if (n.starts_with(".")) continue;
    EXPECT_TRUE(n.starts_with("hold_memory_app-rank5-")) << listing;
    ranked += n.ends_with(".fst") || n.ends_with(".report.json");
  }
  EXPECT_EQ(ranked, 2) << listing;
  EXPECT_NE(Slurp(log_).find("until the program set its rank"), std::string::npos) << Slurp(log_);
  std::string report;
  EXPECT_EQ(ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " report " + dir_ + "/out/*.fst", &report),
            0)
      << report;
  EXPECT_NE(report.find(", rank 5 of 8\n"), std::string::npos) << report;
}

// `fragscope run --daemon` sets up what a job under the daemon needs (agent, adapter, socket)
// and becomes the program: same pid, same exit status, and its files in the daemon's folder.
TEST_F(CollectorDaemon, RunDaemonBecomesTheProgramAndSendsItsStreamHere) {
  std::string out;
  int status = ShellStatus(
      "FAKECUDA_CAPACITY=4G " + std::string(FRAGSCOPE_CLI_BIN) + " run --daemon --socket " +
          socket_ + " -- sh -c 'echo pid $$; exec " + FRAGSCOPE_DEMO_BIN + " >/dev/null'",
      &out);
  EXPECT_EQ(status, 1) << "the demo dies of its second OOM with status 1\n" << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("pid ([0-9]+)"))) << out;
  WaitForLog(" ended ", 1);
  const std::string report = dir_ + "/out/fragmenting_training-" + m[1].str() + ".report.json";
  ASSERT_TRUE(fs::exists(report)) << "run should exec the program in its own place\n"
                                  << Slurp(log_);
  auto j = nlohmann::json::parse(Slurp(report));
  ASSERT_EQ(j["ooms"].size(), 2u);
  EXPECT_EQ(j["ooms"][0]["class"], "fragmentation");
  std::string log = Slurp(log_);
  EXPECT_EQ(log.find("DISCONNECTED"), std::string::npos) << "no stray connection: " << log;
  EXPECT_EQ(out.find("warning"), std::string::npos) << "the socket was there: " << out;
}

TEST_F(CollectorDaemon, TopShowsALiveProcessAndACrashIsReportedNotFatal) {
  // A process that holds 96 MiB until its stdin closes.
  int holder_stdin = -1;
  pid_t app = StartHolder(socket_, 100663296, &holder_stdin);
  ASSERT_GT(app, 0);
  nlohmann::json doc;
  for (int i = 0; i < 200; ++i) {  // the agent ships asynchronously
    std::string out;
    ASSERT_EQ(
        ShellStatus(
            std::string(FRAGSCOPE_CLI_BIN) + " top --once --format json --socket " + socket_, &out),
        0)
        << out;
    doc = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << out;
    bool seen = false;
    for (const auto& s : doc["streams"]) {
      if (s["pid"] == app && !s["report"]["devices"].empty() &&
          s["report"]["devices"][0]["reserved_bytes"] == 100663296u) {
        seen = true;
        EXPECT_TRUE(s["connected"].get<bool>());
      }
    }
    if (seen) break;
    doc = nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(doc.is_null()) << "top never showed the live process's 96 MiB";
  std::string table;
  ASSERT_EQ(ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " top --once --socket " + socket_, &table),
            0);
  EXPECT_NE(table.find("96.00 MiB"), std::string::npos) << table;
  EXPECT_NE(table.find("hold_memory_app"), std::string::npos) << table;
  // The daemon names the site's function (its answer is symbolized; the row's site column was
  // blank when frames came as bare pcs).
  EXPECT_NE(table.find("  main\n"), std::string::npos) << table;
  // Kill it: the daemon reports the disconnect and keeps serving.
  kill(app, SIGKILL);
  waitpid(app, nullptr, 0);
  close(holder_stdin);
  WaitForLog("DISCONNECTED", 1);
  std::string again;
  EXPECT_EQ(
      ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " top --once --format json --socket " + socket_,
                  &again),
      0)
      << again;
  // The crashed process stays in view, marked ended, with its last figures: a rank that died at
  // night is still there in the morning (the daemon keeps the latest 16 ended streams).
  nlohmann::json after = nlohmann::json::parse(again, nullptr, false);
  ASSERT_FALSE(after.is_discarded()) << again;
  bool shown = false;
  for (const auto& st : after["streams"]) {
    if (st["pid"] != app) continue;
    shown = true;
    EXPECT_FALSE(st["connected"].get<bool>());
    ASSERT_FALSE(st["report"]["devices"].empty());
    EXPECT_EQ(st["report"]["devices"][0]["reserved_bytes"], 100663296u);
  }
  EXPECT_TRUE(shown) << again;
  std::string ended_table;
  ASSERT_EQ(
      ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " top --once --socket " + socket_, &ended_table),
      0);
  EXPECT_NE(ended_table.find("main (ended)"), std::string::npos) << ended_table;
}

// `script` (util-linux) gives the command a pseudo-terminal for stdout, as a user's shell has;
// its window size is 0x0 (script's own stdin is no terminal) unless the command sets one.
std::string OnATerminal(const std::string& command) {
  return "script -eqc '" + command + "' /dev/null </dev/null";
}

// Display columns of the widest line, escape sequences and carriage returns left out.
int WidestLine(const std::string& text) {
  const std::string plain =
      std::regex_replace(text, std::regex("\033\\[[0-9;?]*[A-Za-z]|\r"), std::string());
  int widest = 0;
  std::istringstream lines(plain);
  for (std::string line; std::getline(lines, line);) {
    int width = 0;
    for (unsigned char c : line) width += (c & 0xC0) != 0x80;  // UTF-8: count lead bytes
    widest = std::max(widest, width);
  }
  return widest;
}

TEST_F(CollectorDaemon, TopToAPipeIsPlainTextAndToATerminalFitsItsWidth) {
  const std::string top = std::string(FRAGSCOPE_CLI_BIN) + " top --socket " + socket_;
  // Refreshing into a pipe: frames one after another, no escape codes, lines whole.
  std::string piped;
  EXPECT_EQ(ShellStatus("timeout 2 " + top + " --interval 0.2 | cat", &piped), 0) << piped;
  EXPECT_EQ(piped.find('\033'), std::string::npos) << piped;
  const size_t header = piped.find("PID      PROCESS");
  ASSERT_NE(header, std::string::npos) << piped;
  EXPECT_NE(piped.find("PID      PROCESS", header + 1), std::string::npos)
      << "one frame: " << piped;
  EXPECT_GT(WidestLine(piped), 80) << "the header is not cut in a pipe: " << piped;
  // A terminal's own width (TIOCGWINSZ) wins over $COLUMNS.
  std::string sized;
  EXPECT_EQ(ShellStatus(OnATerminal("stty cols 70; COLUMNS=50 " + top + " --once"), &sized), 0)
      << sized;
  EXPECT_NE(sized.find("PID"), std::string::npos) << sized;
  EXPECT_EQ(WidestLine(sized), 70) << sized;
  // A terminal that reports no size: $COLUMNS.
  std::string columns;
  EXPECT_EQ(ShellStatus(OnATerminal("COLUMNS=60 " + top + " --once"), &columns), 0) << columns;
  EXPECT_EQ(WidestLine(columns), 60) << columns;
  // Refreshing on a terminal redraws the screen in place.
  std::string live;
  ShellStatus(OnATerminal("COLUMNS=60 timeout 2 " + top + " --interval 0.2"), &live);
  EXPECT_NE(live.find("\033[2J"), std::string::npos) << live;
  EXPECT_LE(WidestLine(live), 60) << live;
}

TEST_F(CollectorDaemon, OtherUsersCannotConnect) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user (setuid)";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof(addr.sun_path) - 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(0);  // refused
    const char q[16] = {'F', 'R', 'A', 'G', 'S', 'C', 'P', 'Q', 1};
    if (send(fd, q, sizeof(q), MSG_NOSIGNAL) != sizeof(q)) _exit(0);
    char c;
    _exit(recv(fd, &c, 1, 0) > 0 ? 1 : 0);  // any answer would be a leak
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a process of uid 65534 got an answer";
}

int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Becomes uid/gid 65534 (nobody) in a forked child; false if that failed.
bool BecomeNobody() {
  return setgroups(0, nullptr) == 0 && setgid(65534) == 0 && setuid(65534) == 0;
}

// A collector serves only its own user (SO_PEERCRED). It used to close another user's
// connection without a word: that user's agent saw its connect succeed, then a failed send, and
// on its retry printed "fragscope: reconnected to ...", which was not true, while the daemon's
// log said nothing. Now the agent checks the collector's uid right after connect and says once
// why nothing is sent and what to do; the daemon logs the refusal once per uid, naming the peer
// and the socket, and keeps serving its own user. The socket's modes are opened here so that
// only SO_PEERCRED stands between (a root agent gets that far whatever the modes).
TEST_F(CollectorDaemon, AnotherUsersAgentIsToldWhyAndTheRefusalIsLoggedOnce) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root to run a traced program as another user (setuid(65534))";
  }
  ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
  ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);
  const std::string out = dir_ + "/nobody.out", err = dir_ + "/nobody.err";
  int stdin_pipe[2];
  ASSERT_EQ(pipe(stdin_pipe), 0);
  const pid_t app = fork();
  ASSERT_GE(app, 0);
  if (app == 0) {
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(stdin_pipe[0], 0) < 0) {
      _exit(126);
    }
    close(stdin_pipe[1]);
    if (!BecomeNobody()) _exit(125);
    setenv("FRAGSCOPE_SOCKET", socket_.c_str(), 1);
    setenv("LD_PRELOAD", FRAGSCOPE_AGENT_LIB, 1);
    execl(FRAGSCOPE_HOLD_BIN, FRAGSCOPE_HOLD_BIN, "1048576", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(stdin_pipe[0]);
  close(stdin_pipe[1]);  // the program allocates, says "ready" and exits: the agent tries again
                         // at exit, the last chance to deliver, and is refused again
  int status = 0;
  ASSERT_EQ(waitpid(app, &status, 0), app);
  const std::string app_err = Slurp(err);
  ASSERT_TRUE(WIFEXITED(status)) << app_err;
  EXPECT_EQ(WEXITSTATUS(status), 0) << app_err;  // the program's own status
  EXPECT_EQ(Slurp(out), "ready\n");
  const std::string told = "fragscope: the collector at " + socket_ +
                           " runs as uid 0 and takes streams of its own user only; this program "
                           "runs as uid 65534, so nothing is sent there";
  EXPECT_EQ(Occurrences(app_err, told), 1) << app_err;
  EXPECT_NE(app_err.find("run fragscope-collector as uid 65534, or point FRAGSCOPE_SOCKET at a "
                         "collector of your own\n"),
            std::string::npos)
      << app_err;
  EXPECT_EQ(app_err.find("connected"), std::string::npos) << app_err;  // nor "reconnected"
  EXPECT_EQ(app_err.find("cannot send"), std::string::npos) << app_err;

  // More of the same user, as a retrying agent would come: refused, never answered.
  const pid_t raw = fork();
  ASSERT_GE(raw, 0);
  if (raw == 0) {
    if (!BecomeNobody()) _exit(10);
    for (int i = 0; i < 3; ++i) {
      const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, socket_.c_str(), sizeof(addr.sun_path) - 1);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(11);
      // The send fails when the daemon closed the connection first: refused either way.
      const char q[16] = {'F', 'R', 'A', 'G', 'S', 'C', 'P', 'Q', 1};
      char c;
      if (send(fd, q, sizeof(q), MSG_NOSIGNAL) == sizeof(q) && recv(fd, &c, 1, 0) > 0) {
        _exit(1);  // any answer would be a leak
      }
      close(fd);
    }
    _exit(0);
  }
  ASSERT_EQ(waitpid(raw, &status, 0), raw);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: a process of uid 65534 got an answer; 11: no connect";

  // The daemon still serves its own user. Connections are accepted in the order they came, so
  // once this stream's end is logged, every refused one before it has been seen.
  int holder_stdin = -1;
  const pid_t holder = StartHolder(socket_, 1 << 20, &holder_stdin);
  ASSERT_GT(holder, 0);
  close(holder_stdin);
  ASSERT_EQ(waitpid(holder, &status, 0), holder);
  WaitForLog(" ended (", 1);
  const std::string log = Slurp(log_);
  const std::string logged = "fragscope-collector: " + socket_ + ": refused a stream from pid " +
                             std::to_string(app) + " of uid 65534: this collector serves only " +
                             "its own user (uid 0)";
  EXPECT_EQ(Occurrences(log, logged), 1) << log;
  EXPECT_EQ(Occurrences(log, "refused a stream"), 1) << log;  // one line for all connections
}

// The files of `dir` whose names end with `suffix`.
std::vector<std::string> FilesEndingWith(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    if (name.ends_with(suffix)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A cleanup cron or a user's `rm -rf traces/` removes the daemon's folder while it runs: every
// later trace, post-mortem and report was lost, each with only "cannot create: No such file or
// directory". The daemon makes the folder again with the mode it had at start, says so once,
// naming it, and the next program's files are written there whole.
// A program that execs in place (after an exec that failed): each image's stream, and the
// stream resumed after the failed exec, get files of their own, named for what they are.
TEST_F(CollectorDaemon, EveryImageOfAProgramThatExecsInPlaceGetsItsOwnFile) {
  std::string out;
  ASSERT_EQ(ShellStatus(AgentEnv() + FRAGSCOPE_RUNTIME_APP_BIN + " exec_in_place", &out), 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("exec_in_place ([0-9]+)"))) << out;
  WaitForLog(" ended ", 3);
  const std::string stem = "agent_runtime_app-" + m[1].str();
  for (const std::string suffix : {"", ".resumed-1", ".exec-1"}) {
    EXPECT_TRUE(fs::exists(dir_ + "/out/" + stem + suffix + ".fst")) << suffix << "\n"
                                                                     << Slurp(log_);
  }
  EXPECT_EQ(FilesEndingWith(dir_ + "/out", ".fst").size(), 3u) << Slurp(log_);
}

TEST_F(CollectorDaemon, ARemovedFolderIsMadeAgainAndSaidOnce) {
  const std::string out_dir = dir_ + "/out";
  struct stat at_start;
  ASSERT_EQ(stat(out_dir.c_str(), &at_start), 0);
  std::string out;
  ShellStatus("FAKECUDA_CAPACITY=4G " + AgentEnv() + FRAGSCOPE_DEMO_BIN + " >/dev/null", &out);
  WaitForLog(" ended ", 1);
  ASSERT_EQ(ShellStatus("rm -rf " + out_dir, &out), 0) << out;
  ShellStatus("FAKECUDA_CAPACITY=4G " + AgentEnv() + FRAGSCOPE_DEMO_BIN + " >/dev/null", &out);
  WaitForLog(" ended ", 2);
  const std::string log = Slurp(log_);
  struct stat again;
  ASSERT_EQ(stat(out_dir.c_str(), &again), 0) << log;
  EXPECT_TRUE(S_ISDIR(again.st_mode));
  EXPECT_EQ(again.st_mode & 07777, at_start.st_mode & 07777);
  EXPECT_EQ(Occurrences(log, "the output folder " + out_dir +
                                 " was removed while the daemon ran (stat: No such file or "
                                 "directory); created it again"),
            1)
      << log;
  EXPECT_EQ(Occurrences(log, "was removed"), 1) << log;
  EXPECT_EQ(log.find("cannot create"), std::string::npos) << log;
  // The second program's files: its trace, its report and its two post-mortems.
  const std::vector<std::string> traces = FilesEndingWith(out_dir, ".fst");
  ASSERT_EQ(traces.size(), 1u) << log;
  const std::string name = traces[0].substr(0, traces[0].size() - 4);
  EXPECT_TRUE(fs::exists(out_dir + "/" + name + ".report.txt")) << log;
  auto report = nlohmann::json::parse(Slurp(out_dir + "/" + name + ".report.json"));
  EXPECT_EQ(report["ooms"].size(), 2u);
  EXPECT_EQ(FilesEndingWith(out_dir, ".txt").size(), 3u) << "a report and two post-mortems";
  std::string text;
  EXPECT_EQ(
      ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " report " + out_dir + "/" + traces[0], &text),
      0)
      << text;
  EXPECT_NE(text.find("stream ended"), std::string::npos) << text;
}

// A program whose stream began before its folder was removed keeps its whole trace: the
// daemon's open file still held every byte, and it is written again at the same path in the
// folder made again, then goes on there.
TEST_F(CollectorDaemon, AStreamSpanningTheRemovalKeepsItsWholeTrace) {
  const std::string out_dir = dir_ + "/out";
  int holder_stdin = -1;
  const pid_t app = StartHolder(socket_, 1 << 20, &holder_stdin);
  ASSERT_GT(app, 0);
  const std::string name = "hold_memory_app-" + std::to_string(app);
  const std::string trace = out_dir + "/" + name + ".fst";
  // Its Hello and its allocation are in the file before the folder goes.
  std::string dump;
  for (int i = 0; i < 500 && dump.find("size=1048576") == std::string::npos; ++i) {
    dump.clear();
    ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + "-dump " + trace, &dump);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(dump.find("size=1048576"), std::string::npos) << dump << Slurp(log_);
  // Renamed, then removed: the folder is gone at once, whatever the stream does meanwhile (a
  // file made again in it during a plain `rm -rf` would leave the folder there).
  std::string out;
  ASSERT_EQ(
      ShellStatus("mv " + out_dir + " " + dir_ + "/removed && rm -rf " + dir_ + "/removed", &out),
      0)
      << out;
  ShellStatus("FAKECUDA_CAPACITY=4G " + AgentEnv() + FRAGSCOPE_DEMO_BIN + " >/dev/null", &out);
  WaitForLog(" ended ", 1);
  close(holder_stdin);
  ASSERT_EQ(waitpid(app, nullptr, 0), app);
  WaitForLog(" ended ", 2);
  const std::string log = Slurp(log_);
  EXPECT_EQ(Occurrences(log, "the output folder " + out_dir + " was removed"), 1) << log;
  EXPECT_EQ(
      Occurrences(log, trace + " was removed while its stream ran; written there again whole"), 1)
      << log;
  EXPECT_EQ(log.find("the trace is incomplete"), std::string::npos) << log;
  // Whole: every frame the daemon applied, from the Hello on, as its final report counts them.
  auto live = nlohmann::json::parse(Slurp(out_dir + "/" + name + ".report.json"));
  std::string saved_json;
  ASSERT_EQ(
      ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " report --format json " + trace, &saved_json),
      0)
      << saved_json;
  auto saved = nlohmann::json::parse(saved_json);
  EXPECT_EQ(saved["frames"], live["frames"]);
  EXPECT_EQ(saved["events"], live["events"]);
  std::string text;
  ASSERT_EQ(ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " report " + trace, &text), 0) << text;
  EXPECT_NE(text.find("pid " + std::to_string(app)), std::string::npos) << text;
  EXPECT_NE(text.find("peak 1.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("stream ended"), std::string::npos) << text;
  // The program started after the removal has its files there too.
  EXPECT_EQ(FilesEndingWith(out_dir, ".fst").size(), 2u) << log;
  EXPECT_EQ(FilesEndingWith(out_dir, ".report.json").size(), 2u) << log;
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (send(fd, req.data(), req.size(), 0) < 0) return "";
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

class CollectorMetrics : public CollectorDaemon {
 protected:
  std::vector<std::string> ExtraArgs() const override { return {"--metrics", "127.0.0.1:0"}; }
};

TEST_F(CollectorMetrics, PrometheusExpositionParsesAndCarriesTheLiveFigures) {
  WaitForLog("metrics on http://127.0.0.1:", 1);
  std::smatch m;
  std::string log = Slurp(log_);
  ASSERT_TRUE(std::regex_search(log, m, std::regex("metrics on http://127\\.0\\.0\\.1:([0-9]+)/")));
  const int port = std::stoi(m[1]);
  int holder_stdin = -1;
  pid_t app = StartHolder(socket_, 100663296, &holder_stdin);
  ASSERT_GT(app, 0);
  // The agent ships asynchronously, and the collector applies frames as they come: the device
  // can be there (its DeviceInfo applied, reserved 0) a moment before the allocation is. Poll
  // until the allocation shows.
  const std::string want = "pid=\"" + std::to_string(app) + "\"";
  const std::regex reserved_line("(^|\n)fragscope_reserved_bytes\\{" + want +
                                 "[^\n]*\\} 100663296(\n|$)");
  std::string body;
  for (int i = 0; i < 300; ++i) {
    std::string resp = HttpGet(port, "/metrics");
    ASSERT_EQ(resp.rfind("HTTP/1.0 200", 0), 0u) << resp;
    body = resp.substr(resp.find("\r\n\r\n") + 4);
    if (std::regex_search(body, reserved_line)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Every line is a comment or a valid sample; every family is announced before its samples.
  const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\} -?[0-9.eE+-]+$)");
  std::set<std::string> typed;
  std::istringstream lines(body);
  std::string line;
  int samples = 0;
  bool saw_reserved = false;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    std::smatch s;
    ASSERT_TRUE(std::regex_match(line, s, sample)) << "bad exposition line: " << line;
    EXPECT_TRUE(typed.count(s[1])) << "sample before its # TYPE: " << line;
    ++samples;
    if (line.rfind("fragscope_reserved_bytes{" + want, 0) == 0) {
      saw_reserved = true;
      EXPECT_EQ(line.substr(line.rfind(' ') + 1), "100663296") << line;
    }
    // Nothing cached: fragmentation is unknown, so it must be absent, never 0.
    EXPECT_NE(line.rfind("fragscope_fragmentation_ratio{" + want, 0), 0u) << line;
  }
  EXPECT_TRUE(saw_reserved) << body;
  EXPECT_GT(samples, 5);
  EXPECT_EQ(HttpGet(port, "/other").rfind("HTTP/1.0 404", 0), 0u);
  close(holder_stdin);
  waitpid(app, nullptr, 0);
}

TEST(CollectorDaemonUsage, MetricsRefuseNonLoopbackUnlessAsked) {
  std::string out;
  EXPECT_EQ(ShellStatus(std::string(FRAGSCOPE_COLLECTOR_BIN) +
                            " --socket /tmp/fragscope-unused.sock --metrics 0.0.0.0:0",
                        &out),
            2)
      << out;
  EXPECT_NE(out.find("--metrics-allow-remote"), std::string::npos) << out;
}

TEST(CollectorDaemonUsage, BadArgumentsExit2) {
  std::string out;
  EXPECT_EQ(ShellStatus(std::string(FRAGSCOPE_COLLECTOR_BIN) + " --bogus", &out), 2) << out;
  for (const char* window : {"0", "-1", "0x10", "' 2'", "1e2", "abc", "4000"}) {
    out.clear();
    EXPECT_EQ(ShellStatus(std::string(FRAGSCOPE_COLLECTOR_BIN) + " --oom-window " + window, &out),
              2)
        << window;
    EXPECT_NE(out.find("--oom-window"), std::string::npos) << out;
  }
  EXPECT_EQ(ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " top --format json", &out), 2);
  EXPECT_EQ(
      ShellStatus(std::string(FRAGSCOPE_CLI_BIN) + " top --once --socket /nonexistent.sock", &out),
      3);
}

// The daemon writes every trace and post-mortem into --dir as it happens: a directory that
// exists but takes no files is refused at start (exit 3), not found out at the first OOM.
// (/proc/self exists and takes no new files, even for root.)
TEST(CollectorDaemonUsage, DirectoryThatTakesNoFilesIsRefusedAtStart) {
  std::string out;
  EXPECT_EQ(ShellStatus(std::string(FRAGSCOPE_COLLECTOR_BIN) +
                            " --socket /tmp/fragscope-unused.sock --dir /proc/self",
                        &out),
            3)
      << out;
  EXPECT_NE(out.find("--dir /proc/self: cannot write there"), std::string::npos) << out;
}

}  // namespace
