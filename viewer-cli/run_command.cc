// fragscope run [options] -- CMD ARGS...
//
// Starts an embedded collector on a private socket, runs CMD with the agent preloaded and
// pointed at it, and prints the report (with any OOM post-mortem) when CMD exits. CMD's exit
// status is passed through (128+N when a signal N killed it), so `fragscope run` can replace
// the command in a job script unchanged.
//
// With --daemon (to a running fragscope-collector) or --dormant (for a later `fragscope
// attach`) there is no embedded collector: `run` sets up the same environment (agent, PyTorch
// adapter) and execs CMD in its place, so CMD keeps this process's pid, signals and status.
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "fragscope/server/session_server.h"
#include "fragscope/server/socket_listener.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"
#include "fragscope/symbolize/symbol_table_builder.h"
#include "fragscope/trace/output_file.h"
#include "install_layout.h"
#include "report_output.h"

namespace fragscope::cli {

namespace {

constexpr char kUsage[] =
    "usage: fragscope run [options] [--] CMD [ARGS...]\n"
    "  CMD and everything after it are the program's (its own options included); `--` is\n"
    "  needed only when CMD starts with '-'\n"
    "  -o, --output TRACE     keep the trace (other processes of the run: TRACE.<pid>)\n"
    "  --format text|json     report format (default text)\n"
    "  --report FILE          write the report to FILE instead of stderr ('-' = stdout)\n"
    "  --quiet                no report\n"
    "  --stack-depth N        frames per stack, 0..64 (default 32, 0 = off)\n"
    "  --no-free-stacks       stacks for allocations only, not for frees and unmaps (less\n"
    "                         overhead; FRAGSCOPE_FREE_STACKS=0)\n"
    "  --ring-mb N            agent ring buffer size in MiB\n"
    "  --agent PATH           libfragscope.so to preload (default: next to this command)\n"
    "  --backend preload|cupti|auto   capture backend (default auto = preload; CUPTI allows one\n"
    "                         subscriber, so it would break torch.profiler or Nsight)\n"
    "  --no-adapter           do not put the PyTorch adapter on PYTHONPATH\n"
    "  --linger-ms N          wait this long for processes that outlive CMD (default 2000)\n"
    "  --daemon               send to the running fragscope-collector instead (its reports and\n"
    "                         traces go to its --dir); CMD runs in place of this command\n"
    "  --socket PATH          that collector's socket (default: fragscope-collector's default)\n"
    "  --dormant              start the agent dormant for a later `fragscope attach PID`\n"
    "                         (nothing collected until then); CMD runs in place of this command\n"
    "  (-o, --format, --report, --quiet and --linger-ms are for the embedded collector only)\n";

volatile sig_atomic_t g_child_pid = 0;

void ForwardSignal(int sig) {
  if (g_child_pid > 0) kill(static_cast<pid_t>(g_child_pid), sig);
}

// A usage error: the reason, then the options.
int Usage(const std::string& message) {
  std::fprintf(stderr, "fragscope run: %s (fragscope run --help)\n", message.c_str());
  return kExitUsage;
}

bool ParseInt(const std::string& s, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// What the program's environment gets, in the embedded-collector child and in place alike.
struct AgentSetup {
  std::string agent;  // absolute path of the library
  bool use_cupti = false;
  bool adapter = true;
  std::string socket;  // FRAGSCOPE_SOCKET; empty: none
  bool dormant = false;
  std::string stack_depth, ring_mb;
  bool no_free_stacks = false;
};

void SetAgentEnvironment(const AgentSetup& setup) {
  if (setup.use_cupti) {
    // CUPTI's injection hook loads the library itself once the program initialises CUDA.
    setenv("CUDA_INJECTION64_PATH", setup.agent.c_str(), 1);
  } else {
    std::string preload = setup.agent;
    if (const char* old = getenv("LD_PRELOAD"); old != nullptr && old[0] != '\0') {
      preload += std::string(":") + old;
    }
    setenv("LD_PRELOAD", preload.c_str(), 1);
  }
  if (setup.adapter) {
    // The adapter is inert unless the program imports torch; it chains any sitecustomize
    // already on the path.
    if (std::string dir = AdapterDir(); !dir.empty()) {
      const char* old = getenv("PYTHONPATH");
      std::string path = dir + (old != nullptr && old[0] != '\0' ? ":" + std::string(old) : "");
      setenv("PYTHONPATH", path.c_str(), 1);
    }
  }
  if (!setup.socket.empty()) {
    setenv("FRAGSCOPE_SOCKET", setup.socket.c_str(), 1);
  } else {
    unsetenv("FRAGSCOPE_SOCKET");
  }
  unsetenv("FRAGSCOPE_OUTPUT");  // the socket (or a later attach) is this run's only output
  if (setup.dormant) {
    setenv("FRAGSCOPE_DORMANT", "1", 1);
  } else {
    unsetenv("FRAGSCOPE_DORMANT");
  }
  if (!setup.stack_depth.empty()) setenv("FRAGSCOPE_STACK_DEPTH", setup.stack_depth.c_str(), 1);
  if (!setup.ring_mb.empty()) setenv("FRAGSCOPE_RING_MB", setup.ring_mb.c_str(), 1);
  if (setup.no_free_stacks) setenv("FRAGSCOPE_FREE_STACKS", "0", 1);
}

// Why CMD could not be run, as a shell says it, and the status a shell gives (127: not found,
// 126: found but not executable).
int SayCannotRun(const std::string& cmd, int error) {
  std::fprintf(stderr, "fragscope run: cannot run '%s': %s%s\n", cmd.c_str(), std::strerror(error),
               error == ENOENT && cmd.find('/') == std::string::npos ? " (not found on PATH)" : "");
  return error == ENOENT ? 127 : 126;
}

// Replaces this process with CMD (the --daemon and --dormant modes); returns only on failure,
// with errno set.
int ExecInPlace(std::vector<std::string> cmd, bool say_failure = true) {
  std::vector<char*> argv;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int error = errno;
  const int status = say_failure ? SayCannotRun(cmd[0], error) : (error == ENOENT ? 127 : 126);
  errno = error;
  return status;
}

// Where execvp would find `cmd` (PATH search for a bare name); empty if nowhere.
std::string ResolveCommand(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return cmd;
  const char* path = getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + cmd;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// Why a program would ignore LD_PRELOAD (the dynamic loader applies it, and not to a static
// program or a setuid one); empty when it would load the agent.
std::string WhyPreloadIgnored(const std::string& cmd) {
  const std::string path = ResolveCommand(cmd);
  struct stat st {};
  if (path.empty() || stat(path.c_str(), &st) != 0) return "";
  if ((st.st_mode & (S_ISUID | S_ISGID)) != 0) return "it is setuid or setgid";
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof(eh)) ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) {
    return "";  // a script: its interpreter is what loads, and it is dynamic as a rule
  }
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    in.seekg(static_cast<std::streamoff>(eh.e_phoff + static_cast<uint64_t>(i) * eh.e_phentsize));
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof(ph))) return "";
    if (ph.p_type == PT_INTERP) return "";
  }
  return "it is statically linked";
}

// Whether a collector's socket is at `path` (a daemon started later is fine too: the agent
// retries, so this only decides a warning). Not a test connection: the daemon would take it
// for an agent that died before it said anything, and say so in its log.
bool SocketExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// What `fragscope run` was asked to do, parsed and checked before anything starts.
struct RunOptions {
  enum class Mode {
    kEmbeddedCollector,  // collect here, report when the program ends
    kDaemon,             // exec in place, streaming to a running fragscope-collector
    kDormant,            // exec in place, agent dormant until `fragscope attach`
  };
  Mode mode = Mode::kEmbeddedCollector;
  AgentSetup setup;         // what the program's environment gets (socket filled later)
  std::string backend;      // as given: auto, preload or cupti
  std::string socket_path;  // --socket; empty: the collector's default (kDaemon)
  std::string trace_path;   // -o; empty: no trace kept
  std::string report_path;  // --report; empty: stderr, "-": stdout
  ReportFormat format = ReportFormat::kText;
  bool quiet = false;
  long linger_ms = 2000;
  std::vector<std::string> command;  // CMD ARGS after `--`
};

// Fills `options` from the arguments. Returns the exit code to stop with (a usage error, a
// missing agent library, --help), or nullopt to go on.
std::optional<int> ParseRunOptions(const std::vector<std::string>& args, RunOptions* options) {
  // Empty: not given (the embedded collector's defaults apply: text, 2000 ms).
  std::string format_name, stack_depth, ring_mb, agent, linger, backend = "auto";
  bool no_adapter = false, no_free_stacks = false, daemon = false, dormant = false;
  RunOptions& o = *options;
  ArgReader reader("run", args);
  reader.CommandFollows();
  reader.Option("output", "o", &o.trace_path);
  reader.Option("format", "f", &format_name);
  reader.Option("report", "", &o.report_path);
  reader.Option("stack-depth", "", &stack_depth);
  reader.Option("ring-mb", "", &ring_mb);
  reader.Option("agent", "", &agent);
  reader.Option("linger-ms", "", &linger);
  reader.Option("backend", "", &backend);
  reader.Flag("no-adapter", &no_adapter);
  reader.Flag("no-free-stacks", &no_free_stacks);
  reader.Flag("quiet", &o.quiet);
  reader.Flag("daemon", &daemon);
  reader.Option("socket", "", &o.socket_path);
  reader.Flag("dormant", &dormant);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return exit;
  if (!o.socket_path.empty()) daemon = true;
  if (daemon && dormant) {
    return Usage(
        "--dormant and --daemon/--socket exclude each other (a dormant agent is woken by "
        "`fragscope attach`, which brings its own collector)");
  }
  if (daemon || dormant) {
    for (auto [given, flag] :
         {std::pair{!o.trace_path.empty(), "-o"}, std::pair{!format_name.empty(), "--format"},
          std::pair{!o.report_path.empty(), "--report"}, std::pair{o.quiet, "--quiet"},
          std::pair{!linger.empty(), "--linger-ms"}}) {
      if (!given) continue;
      return Usage(absl::StrFormat(
          "%s is for the embedded collector; with %s the %s writes the trace and reports", flag,
          dormant ? "--dormant" : "--daemon",
          dormant ? "`fragscope attach` that wakes the agent" : "fragscope-collector"));
    }
  }
  o.mode = daemon    ? RunOptions::Mode::kDaemon
           : dormant ? RunOptions::Mode::kDormant
                     : RunOptions::Mode::kEmbeddedCollector;
  if (format_name.empty()) format_name = "text";
  if (linger.empty()) linger = "2000";
  if (!ParseReportFormat(format_name, &o.format)) {
    return Usage("unknown --format '" + format_name + "' (text or json)");
  }
  if (reader.after_dashdash().empty()) {
    return Usage("expected a command to run: fragscope run [options] [--] CMD [ARGS...]");
  }
  o.command = reader.after_dashdash();
  long value = 0;
  // The agent keeps at most 64 frames (and ignores a larger FRAGSCOPE_STACK_DEPTH, falling back
  // to its default): refuse here rather than run with a depth nobody asked for.
  if (!stack_depth.empty() && !ParseInt(stack_depth, 0, 64, &value)) {
    std::fprintf(stderr, "fragscope run: --stack-depth '%s' must be 0..64\n", stack_depth.c_str());
    return kExitUsage;
  }
  if (!ring_mb.empty() && !ParseInt(ring_mb, 1, 4096, &value)) {
    std::fprintf(stderr, "fragscope run: --ring-mb '%s' must be 1..4096\n", ring_mb.c_str());
    return kExitUsage;
  }
  if (!ParseInt(linger, 0, 600000, &o.linger_ms)) {
    std::fprintf(stderr, "fragscope run: --linger-ms '%s' must be 0..600000\n", linger.c_str());
    return kExitUsage;
  }
  if (backend != "preload" && backend != "cupti" && backend != "auto") {
    return Usage("--backend '" + backend + "' must be preload, cupti or auto");
  }
  o.backend = backend;
  const bool use_cupti = backend == "cupti";
  if (dormant && use_cupti) {
    // The CUPTI library has no control socket to be woken through.
    return Usage(
        "--dormant needs the preload backend (the CUPTI backend cannot be woken; `fragscope "
        "attach` can still inject an agent later)");
  }
  const bool agent_given = !agent.empty();
  if (!agent_given) {
    agent = AgentLibraryPath();
    if (use_cupti) agent = agent.substr(0, agent.rfind('/')) + "/libfragscope_cupti.so";
  }
  if (access(agent.c_str(), R_OK) != 0) {
    if (agent_given) {
      std::fprintf(stderr, "fragscope run: agent library %s (--agent) not found\n", agent.c_str());
    } else {
      std::fprintf(stderr, "fragscope run: %s\n", MissingAgentMessage(agent).c_str());
    }
    return kExitBadInput;
  }
  if (agent[0] != '/') {
    char* abs = realpath(agent.c_str(), nullptr);
    if (abs != nullptr) {
      agent = abs;
      free(abs);
    }
  }
  o.setup.agent = agent;
  o.setup.use_cupti = use_cupti;
  o.setup.adapter = !no_adapter;
  o.setup.stack_depth = stack_depth;
  o.setup.ring_mb = ring_mb;
  o.setup.no_free_stacks = no_free_stacks;
  o.setup.dormant = dormant;
  return std::nullopt;
}

// --daemon and --dormant: sets up the program's environment and execs it in place of this
// command. Returns only on failure.
int ExecWithAgent(RunOptions& o) {
  if (o.mode == RunOptions::Mode::kDaemon) {
    // fragscope-collector's own default when no --socket is given.
    absl::StatusOr<std::string> runtime = PrivateRuntimeDir();
    const std::string default_socket = runtime.ok() ? *runtime + "/collector.sock" : "";
    if (o.socket_path.empty()) {
      if (!runtime.ok()) {
        std::fprintf(stderr, "fragscope run: %s\n",
                     std::string(runtime.status().message()).c_str());
        return kExitBadInput;
      }
      o.socket_path = default_socket;
    }
    if (!SocketExists(o.socket_path)) {
      const std::string start = o.socket_path == default_socket ? "" : " --socket " + o.socket_path;
      std::fprintf(stderr,
                   "fragscope run: warning: no fragscope-collector socket at %s yet; the agent "
                   "keeps trying, so start one (fragscope-collector --dir DIR%s) before the "
                   "program's memory matters\n",
                   o.socket_path.c_str(), start.c_str());
    }
    o.setup.socket = o.socket_path;
  } else {
    std::fprintf(stderr,
                 "fragscope run: the agent in pid %d is dormant; `fragscope attach %d` wakes "
                 "it\n",
                 static_cast<int>(getpid()), static_cast<int>(getpid()));
  }
  SetAgentEnvironment(o.setup);
  return ExecInPlace(o.command);
}

// The embedded collector, on a private socket. The program's own stream goes to TRACE, any other
// process's to TRACE.<pid>[.<stream>]; an image after an exec in place adds .exec-<k>, a resumed
// stream .resumed-<k>, so that no stream of a run writes over another. The program is our direct
// child: its Hello names us as parent (no race with fork returning; an exec keeps the parent).
absl::StatusOr<std::unique_ptr<SessionServer>> StartEmbeddedCollector(const RunOptions& o) {
  SessionServerOptions server_options;
  if (const char* conf = getenv("PYTORCH_CUDA_ALLOC_CONF")) {
    server_options.model.expandable_segments =
        std::strstr(conf, "expandable_segments:True") != nullptr;
  }
  server_options.make_symbolizer = MakeDwarfSymbolizer;  // `fragscope top --socket` on it
  server_options.trace_epilogue = SymbolTableFramesFor;  // the trace keeps its function names
  if (!o.trace_path.empty()) {
    server_options.trace_path = [trace_path = o.trace_path, self = getpid()](
                                    const StreamSession&, const v1::Frame& first, pid_t) {
      if (!first.has_hello()) return trace_path + ".unknown";
      const v1::Hello& h = first.hello();
      std::string path = trace_path;
      if (static_cast<pid_t>(h.ppid()) != self || h.stream_index() != 0) {
        path += absl::StrFormat(".%d", h.pid());
        if (h.stream_index() > 0) path += absl::StrFormat(".%d", h.stream_index());
      }
      if (h.exec_image() > 0) path += absl::StrFormat(".exec-%d", h.exec_image());
      if (h.resumed() > 0) path += absl::StrFormat(".resumed-%d", h.resumed());
      return path;
    };
  }
  absl::StatusOr<std::string> runtime_dir = PrivateRuntimeDir();
  if (!runtime_dir.ok()) return runtime_dir.status();
  return SessionServer::Start(absl::StrFormat("%s/run-%d.sock", *runtime_dir, getpid()),
                              std::move(server_options));
}

// Forks and execs the program with the agent pointed at `socket`; -1 if fork failed (said).
// *exec_error: the exec's errno when the program could not be run at all, else 0.
pid_t StartProgram(const RunOptions& o, const std::string& socket, int* exec_error) {
  *exec_error = 0;
  // Closed by a successful exec; an exec that fails writes its errno there first, so the run
  // can say the program could not be run rather than guess at the agent.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "fragscope run: pipe: %s\n", std::strerror(errno));
    return -1;
  }
  pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "fragscope run: fork: %s\n", std::strerror(errno));
    close(report[0]);
    close(report[1]);
    return -1;
  }
  if (child == 0) {
    close(report[0]);
    AgentSetup setup = o.setup;
    setup.socket = socket;
    SetAgentEnvironment(setup);
    const int status = ExecInPlace(o.command, /*say_failure=*/false);
    const int error = errno;
    ssize_t ignored = write(report[1], &error, sizeof(error));
    (void)ignored;
    _exit(status);
  }
  close(report[1]);
  int error = 0;
  ssize_t n;
  while ((n = read(report[0], &error, sizeof(error))) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(error))) *exec_error = error;
  return child;
}

// Waits for the program, staying alive through Ctrl-C (which reaches the whole process group)
// to print the report; TERM and HUP are passed on to the program, which decides. Returns its
// exit status as a shell gives it (128+N for signal N).
int WaitForProgram(pid_t child) {
  g_child_pid = child;
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  g_child_pid = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
}

// Says that nothing was measured, and why. The agent sends nothing until the program's first
// CUDA memory call, so a program the loader preloads it into but that never calls CUDA is the
// common case; a static or setuid program never loads it.
void SayNothingConnected(const RunOptions& o) {
  const std::string& cmd = o.command[0];
  if (o.setup.use_cupti) {
    // CUPTI loads only once the program initialises CUDA, and only with a real driver.
    std::fprintf(stderr,
                 "fragscope run: no agent connected, nothing was measured: the CUPTI backend "
                 "needs a real CUDA driver and a program that initialises CUDA\n");
    return;
  }
  if (std::string why = WhyPreloadIgnored(cmd); !why.empty()) {
    std::fprintf(stderr,
                 "fragscope run: nothing was measured: '%s' did not load %s, since %s and so "
                 "ignores LD_PRELOAD%s\n",
                 cmd.c_str(), o.setup.agent.c_str(), why.c_str(),
                 o.backend == "auto" ? "; on a real GPU try --backend cupti" : "");
    return;
  }
  std::fprintf(stderr,
               "fragscope run: '%s' made no CUDA call (nor did any program it started); nothing "
               "to report\n",
               cmd.c_str());
}

// The report of the run's streams (one process's report, or a job's for several), the warnings
// about streams that ended early, and where the traces went.
void ReportStreams(std::vector<CollectedStream> streams, const RunOptions& o, pid_t child) {
  // A connection that never said Hello (a process killed before its agent's first write) has
  // nothing to report: said once, and left out rather than shown as a process 0 with 0 events.
  std::erase_if(streams, [](const CollectedStream& s) {
    if (s.session->hello()) return false;
    std::fprintf(stderr,
                 "fragscope run: warning: pid %d connected but sent nothing before its end (killed "
                 "before the agent's first write?); it is not in the report\n",
                 static_cast<int>(s.peer_pid));
    return true;
  });
  if (streams.empty()) return;
  // The program's own stream first, then any other process, in connection order.
  std::stable_partition(streams.begin(), streams.end(), [&](const CollectedStream& s) {
    return s.session->hello() && static_cast<pid_t>(s.session->hello()->pid()) == child;
  });
  std::ostringstream report_file;  // written at the end by WriteOutputFile (0644 at most)
  std::ostream* out = &std::cerr;
  if (o.report_path == "-") {
    out = &std::cout;
  } else if (!o.report_path.empty()) {
    out = &report_file;
  }
  std::vector<JobReportInput> job;  // several processes: one report with the job summary
  for (const CollectedStream& s : streams) {
    if (!s.outcome.trace_error.empty()) {
      std::fprintf(stderr, "fragscope run: trace copy failed: %s\n", s.outcome.trace_error.c_str());
    }
    if (s.outcome.result != FrameReader::Result::kEnd || !s.outcome.saw_end_frame) {
      std::fprintf(stderr,
                   "fragscope run: warning: the stream of pid %d ended early (%s); the report "
                   "covers what arrived\n",
                   static_cast<int>(s.peer_pid),
                   s.outcome.error.empty() ? "process ended without closing its stream"
                                           : s.outcome.error.c_str());
    }
    if (o.quiet) continue;
    if (streams.size() == 1) {
      WriteReport(s.session->Summarize(), o.format, *out);
    } else {
      job.push_back({s.session->trace_path(), s.session->Summarize(), ""});
    }
  }
  if (!job.empty()) WriteJobReport(job, o.format, *out);
  if (out == &report_file) {
    if (absl::Status st = WriteOutputFile(o.report_path, report_file.str()); !st.ok()) {
      std::fprintf(stderr, "fragscope run: cannot write report: %s\n",
                   std::string(st.message()).c_str());
    }
  }
  // An agent of another build (a package's fragscope run with another build's libfragscope.so,
  // say) may send what this collector reads differently: said last, where it is read.
  for (const CollectedStream& s : streams) {
    const std::string theirs = s.session->hello()->agent_version();
    if (theirs == FRAGSCOPE_VERSION) continue;
    std::fprintf(stderr,
                 "fragscope run: warning: pid %d ran an agent of version '%s' (%s), but this "
                 "fragscope is version '%s': the report may misread its events. Use the agent "
                 "of the same build or package (--agent PATH, FRAGSCOPE_AGENT)\n",
                 static_cast<int>(s.peer_pid), theirs.c_str(), o.setup.agent.c_str(),
                 FRAGSCOPE_VERSION);
  }
  if (!o.trace_path.empty()) {
    for (const CollectedStream& s : streams) {
      if (!s.session->trace_path().empty()) {
        std::fprintf(stderr, "fragscope run: trace written to %s\n",
                     s.session->trace_path().c_str());
      }
    }
  }
}

// The embedded-collector mode: runs the program as a child, then reports. Returns the
// program's exit status (or kExitBadInput when it could not be started).
int RunUnderEmbeddedCollector(RunOptions& o) {
  // Before CMD runs: both files are written at its end, maybe hours later, and a bad path
  // found then would cost the report or the trace of the whole run.
  if (!OutputsWritable("run", {{"--report", &o.report_path}, {"-o", &o.trace_path}})) {
    return kExitBadInput;
  }
  auto collector = StartEmbeddedCollector(o);
  if (!collector.ok()) {
    std::fprintf(stderr, "fragscope run: %s\n", std::string(collector.status().message()).c_str());
    return kExitBadInput;
  }
  int exec_error = 0;
  const pid_t child = StartProgram(o, (*collector)->socket_path(), &exec_error);
  if (child < 0) return kExitBadInput;
  const int exit_code = WaitForProgram(child);
  if (exec_error != 0) {
    // Nothing ran, so there is nothing to say about the agent.
    (*collector)->Finish(0);
    return SayCannotRun(o.command[0], exec_error);
  }
  std::vector<CollectedStream> streams = (*collector)->Finish(static_cast<int>(o.linger_ms));
  if (streams.empty()) {
    SayNothingConnected(o);
  } else {
    ReportStreams(std::move(streams), o, child);
  }
  return exit_code;
}

}  // namespace

int RunCommand(const std::vector<std::string>& args) {
  RunOptions options;
  if (std::optional<int> exit = ParseRunOptions(args, &options)) return *exit;
  if (options.mode == RunOptions::Mode::kEmbeddedCollector) {
    return RunUnderEmbeddedCollector(options);
  }
  return ExecWithAgent(options);
}

}  // namespace fragscope::cli
