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
#include "fragscope/trace/output_file.h"
#include "install_layout.h"
#include "report_output.h"

namespace fragscope::cli {

namespace {

constexpr char kUsage[] =
    "usage: fragscope run [options] -- CMD [ARGS...]\n"
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
  std::fprintf(stderr, "fragscope run: %s\n%s", message.c_str(), kUsage);
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

// Replaces this process with CMD (the --daemon and --dormant modes); returns only on failure.
int ExecInPlace(std::vector<std::string> cmd) {
  std::vector<char*> argv;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "fragscope run: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  return 127;
}

// Whether a collector's socket is at `path` (a daemon started later is fine too: the agent
// retries, so this only decides a warning). Not a test connection: the daemon would take it
// for an agent that died before it said anything, and say so in its log.
bool SocketExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

int RunCommand(const std::vector<std::string>& args) {
  // Empty: not given (the embedded collector's defaults apply: text, 2000 ms).
  std::string trace_path, format_name, report_path, stack_depth, ring_mb, agent, linger,
      backend = "auto", socket_path;
  bool quiet = false, no_adapter = false, no_free_stacks = false, daemon = false, dormant = false;
  ArgReader reader("run", args);
  reader.Option("output", "o", &trace_path);
  reader.Option("format", "f", &format_name);
  reader.Option("report", "", &report_path);
  reader.Option("stack-depth", "", &stack_depth);
  reader.Option("ring-mb", "", &ring_mb);
  reader.Option("agent", "", &agent);
  reader.Option("linger-ms", "", &linger);
  reader.Option("backend", "", &backend);
  reader.Flag("no-adapter", &no_adapter);
  reader.Flag("no-free-stacks", &no_free_stacks);
  reader.Flag("quiet", &quiet);
  reader.Flag("daemon", &daemon);
  reader.Option("socket", "", &socket_path);
  reader.Flag("dormant", &dormant);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return *exit;
  if (!socket_path.empty()) daemon = true;
  const bool in_place = daemon || dormant;
  if (daemon && dormant) {
    return Usage(
        "--dormant and --daemon/--socket exclude each other (a dormant agent is woken by "
        "`fragscope attach`, which brings its own collector)");
  }
  if (in_place) {
    for (auto [given, flag] :
         {std::pair{!trace_path.empty(), "-o"}, std::pair{!format_name.empty(), "--format"},
          std::pair{!report_path.empty(), "--report"}, std::pair{quiet, "--quiet"},
          std::pair{!linger.empty(), "--linger-ms"}}) {
      if (!given) continue;
      return Usage(absl::StrFormat(
          "%s is for the embedded collector; with %s the %s writes the trace and reports", flag,
          dormant ? "--dormant" : "--daemon",
          dormant ? "`fragscope attach` that wakes the agent" : "fragscope-collector"));
    }
  }
  if (format_name.empty()) format_name = "text";
  if (linger.empty()) linger = "2000";
  ReportFormat format;
  if (!ParseReportFormat(format_name, &format)) {
    return Usage("unknown --format '" + format_name + "' (text or json)");
  }
  if (!reader.positionals().empty() || reader.after_dashdash().empty()) {
    return Usage("put the command after '--'");
  }
  long value = 0, linger_ms = 2000;
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
  if (!ParseInt(linger, 0, 600000, &linger_ms)) {
    std::fprintf(stderr, "fragscope run: --linger-ms '%s' must be 0..600000\n", linger.c_str());
    return kExitUsage;
  }
  if (backend != "preload" && backend != "cupti" && backend != "auto") {
    return Usage("--backend '" + backend + "' must be preload, cupti or auto");
  }
  const bool use_cupti = backend == "cupti";
  if (dormant && use_cupti) {
    // The CUPTI library has no control socket to be woken through.
    return Usage(
        "--dormant needs the preload backend (the CUPTI backend cannot be woken; `fragscope "
        "attach` can still inject an agent later)");
  }
  if (agent.empty()) {
    agent = AgentLibraryPath();
    if (use_cupti) agent = agent.substr(0, agent.rfind('/')) + "/libfragscope_cupti.so";
  }
  if (access(agent.c_str(), R_OK) != 0) {
    std::fprintf(stderr,
                 "fragscope run: agent library %s not found; build it (scripts/setup) or pass "
                 "--agent PATH / FRAGSCOPE_AGENT\n",
                 agent.c_str());
    return kExitBadInput;
  }
  if (agent[0] != '/') {
    char* abs = realpath(agent.c_str(), nullptr);
    if (abs != nullptr) {
      agent = abs;
      free(abs);
    }
  }

  AgentSetup setup;
  setup.agent = agent;
  setup.use_cupti = use_cupti;
  setup.adapter = !no_adapter;
  setup.stack_depth = stack_depth;
  setup.ring_mb = ring_mb;
  setup.no_free_stacks = no_free_stacks;
  if (in_place) {
    if (daemon) {
      // fragscope-collector's own default when no --socket is given.
      absl::StatusOr<std::string> runtime = PrivateRuntimeDir();
      const std::string default_socket = runtime.ok() ? *runtime + "/collector.sock" : "";
      if (socket_path.empty()) {
        if (!runtime.ok()) {
          std::fprintf(stderr, "fragscope run: %s\n",
                       std::string(runtime.status().message()).c_str());
          return kExitBadInput;
        }
        socket_path = default_socket;
      }
      if (!SocketExists(socket_path)) {
        const std::string start = socket_path == default_socket ? "" : " --socket " + socket_path;
        std::fprintf(stderr,
                     "fragscope run: warning: no fragscope-collector socket at %s yet; the agent "
                     "keeps trying, so start one (fragscope-collector --dir DIR%s) before the "
                     "program's memory matters\n",
                     socket_path.c_str(), start.c_str());
      }
      setup.socket = socket_path;
    } else {
      setup.dormant = true;
      std::fprintf(stderr,
                   "fragscope run: the agent in pid %d is dormant; `fragscope attach %d` wakes "
                   "it\n",
                   static_cast<int>(getpid()), static_cast<int>(getpid()));
    }
    SetAgentEnvironment(setup);
    return ExecInPlace(reader.after_dashdash());
  }

  // Before CMD runs: both files are written at its end, maybe hours later, and a bad path
  // found then would cost the report or the trace of the whole run.
  if (!OutputsWritable("run", {{"--report", &report_path}, {"-o", &trace_path}})) {
    return kExitBadInput;
  }

  ModelOptions options;
  if (const char* conf = getenv("PYTORCH_CUDA_ALLOC_CONF")) {
    options.expandable_segments = std::strstr(conf, "expandable_segments:True") != nullptr;
  }
  // The program's own stream goes to TRACE, any other process's to TRACE.<pid>[.<stream>]; an
  // image after an exec in place adds .exec-<k>, a resumed stream .resumed-<k>, so that no stream
  // of a run writes over another. The program is our direct child: its Hello names us as parent
  // (no race with fork returning; an exec keeps the parent).
  SessionServerOptions server_options;
  server_options.model = options;
  server_options.make_symbolizer = MakeDwarfSymbolizer;  // `fragscope top --socket` on it
  if (!trace_path.empty()) {
    server_options.trace_path = [&trace_path, self = getpid()](const StreamSession&,
                                                               const v1::Frame& first, pid_t) {
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
  auto runtime_dir = PrivateRuntimeDir();
  if (!runtime_dir.ok()) {
    std::fprintf(stderr, "fragscope run: %s\n",
                 std::string(runtime_dir.status().message()).c_str());
    return kExitBadInput;
  }
  auto collector = SessionServer::Start(absl::StrFormat("%s/run-%d.sock", *runtime_dir, getpid()),
                                        std::move(server_options));
  if (!collector.ok()) {
    std::fprintf(stderr, "fragscope run: %s\n", std::string(collector.status().message()).c_str());
    return kExitBadInput;
  }

  std::vector<std::string> cmd = reader.after_dashdash();
  pid_t child = fork();
  if (child < 0) {
    std::perror("fragscope run: fork");
    return kExitBadInput;
  }
  if (child == 0) {
    setup.socket = (*collector)->socket_path();
    SetAgentEnvironment(setup);
    _exit(ExecInPlace(cmd));
  }
  g_child_pid = child;
  // Ctrl-C reaches the whole process group; we stay to print the report. TERM/HUP are passed
  // on to the program, which decides.
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
  int exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);

  std::vector<CollectedStream> streams = (*collector)->Finish(static_cast<int>(linger_ms));
  if (streams.empty()) {
    if (use_cupti) {
      std::fprintf(stderr,
                   "fragscope run: no agent connected, nothing was measured: the CUPTI backend "
                   "needs a real CUDA driver and a program that initialises CUDA\n");
    } else {
      std::fprintf(stderr,
                   "fragscope run: no agent connected, nothing was measured: '%s' did not load "
                   "%s (a statically linked or setuid program ignores LD_PRELOAD%s)\n",
                   cmd[0].c_str(), agent.c_str(),
                   backend == "auto" ? "; on a real GPU try --backend cupti" : "");
    }
    return exit_code;
  }
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
  if (streams.empty()) return exit_code;
  // The program's own stream first, then any other process, in connection order.
  std::stable_partition(streams.begin(), streams.end(), [&](const CollectedStream& s) {
    return s.session->hello() && static_cast<pid_t>(s.session->hello()->pid()) == child;
  });
  std::ostringstream report_file;  // written at the end by WriteOutputFile (0644 at most)
  std::ostream* out = &std::cerr;
  if (report_path == "-") {
    out = &std::cout;
  } else if (!report_path.empty()) {
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
    if (quiet) continue;
    if (streams.size() == 1) {
      WriteReport(s.session->Summarize(), format, *out);
    } else {
      job.push_back({s.session->trace_path(), s.session->Summarize(), ""});
    }
  }
  if (!job.empty()) WriteJobReport(job, format, *out);
  if (out == &report_file) {
    if (absl::Status st = WriteOutputFile(report_path, report_file.str()); !st.ok()) {
      std::fprintf(stderr, "fragscope run: cannot write report: %s\n",
                   std::string(st.message()).c_str());
    }
  }
  if (!trace_path.empty()) {
    for (const CollectedStream& s : streams) {
      if (!s.session->trace_path().empty()) {
        std::fprintf(stderr, "fragscope run: trace written to %s\n",
                     s.session->trace_path().c_str());
      }
    }
  }
  return exit_code;
}

}  // namespace fragscope::cli
