// fragscope attach PID [--duration S] [-o TRACE] [--format text|json]
//
// Collects from a running process: starts an embedded collector, asks the process's agent
// through its control socket to stream to it ('wake'), and when --duration has passed, Ctrl-C
// is pressed or the process ends, detaches ('sleep') and prints the report.
//
// - Started with the agent dormant (LD_PRELOAD=libfragscope.so FRAGSCOPE_DORMANT=1): the stream
//   starts with the agent's live table, kept since the program started, so the report is exact
//   from the first line.
// - Started without the agent: the agent is injected (fragscope/injector/ptrace_injector.h:
//   dlopen in the process, then libcuda's tracked functions patched in place), the stream covers
//   the attach window only, and memory from before it is reported as unknown (`untracked`). At
//   detach the original bytes of libcuda are put back; the agent stays loaded and dormant
//   (dlclose is not safe), and a later attach patches again. In a CPython process with torch and
//   CUDA initialized, the agent first imports PyTorch's caching-allocator state
//   (interpose/src/python/python_state.h), so PyTorch's segments and blocks are exact from the
//   first snapshot; memory from before the attach outside it stays `untracked`.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "fragscope/attach_contract.h"
#include "fragscope/injector/ptrace_injector.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/server/session_server.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"
#include "fragscope/symbolize/symbol_table_builder.h"
#include "fragscope/trace/output_file.h"
#include "install_layout.h"
#include "report_output.h"

namespace fragscope::cli {
namespace {

using injector::ImportTorchState;
using injector::InjectAgent;
using injector::InjectedAgent;
using injector::PtraceRestriction;
using injector::RemovePatches;

constexpr char kUsage[] =
    "usage: fragscope attach PID [options]\n"
    "  --duration S           collect for S seconds (default: until Ctrl-C or the process ends)\n"
    "  -o, --output TRACE     keep the trace\n"
    "  --format text|json     report format (default text)\n"
    "  --report FILE          write the report to FILE instead of stdout (checked before\n"
    "                         the attach starts)\n"
    "  --torch-wait S         Python with PyTorch: wait at most S seconds (default 5) for the\n"
    "                         interpreter's lock to import PyTorch's allocator state (injection)\n"
    "                         or to run its snapshot diff (at the start and the detach)\n"
    "A process started with the agent dormant is woken through its control socket:\n"
    "  LD_PRELOAD=/path/to/libfragscope.so FRAGSCOPE_DORMANT=1 CMD ARGS...\n"
    "(with the PyTorch adapter's fallback, its snapshot diff runs at the start and the detach).\n"
    "Into any other CUDA process the agent is injected (ptrace; x86-64), and memory allocated\n"
    "before the attach is reported as unknown, except PyTorch's caching allocator state, which\n"
    "is imported when the process runs torch with CUDA initialized (expandable segments too);\n"
    "its blocks are then brought up to date at each OOM and at the detach.\n";

volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

bool ParsePositive(const std::string& s, long max, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v <= 0 || v > max) return false;
  *out = v;
  return true;
}

bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// A variable of the target's environment (readable for our own processes and root).
std::string TargetEnv(pid_t pid, const std::string& name) {
  std::ifstream in(absl::StrFormat("/proc/%d/environ", pid), std::ios::binary);
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    if (entry.compare(0, name.size() + 1, name + "=") == 0) return entry.substr(name.size() + 1);
  }
  return "";
}

bool Mapped(pid_t pid, const char* file) {
  std::ifstream in(absl::StrFormat("/proc/%d/maps", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(file) != std::string::npos) return true;
  }
  return false;
}

bool AgentMapped(pid_t pid) { return Mapped(pid, "/libfragscope.so"); }

// Preloaded (dormant or streaming) rather than injected by an earlier attach.
bool AgentPreloaded(pid_t pid) {
  return TargetEnv(pid, "LD_PRELOAD").find("libfragscope") != std::string::npos;
}

std::string FindControlSocket(pid_t pid, uid_t uid);

// Injects the agent and waits for its control socket. Returns the socket, "" on failure (said).
std::string Inject(pid_t pid, InjectedAgent* agent) {
  if (!Mapped(pid, "/libcuda.so")) {
    std::fprintf(stderr,
                 "fragscope attach: pid %d is not a CUDA process (libcuda.so is not mapped in "
                 "it; a program that has not initialized CUDA yet has nothing to attach to)\n",
                 pid);
    return "";
  }
  if (std::string restriction = PtraceRestriction(pid); !restriction.empty()) {
    std::fprintf(stderr, "fragscope attach: %s\n", restriction.c_str());
    return "";
  }
  const std::string library = AgentLibraryPath();
  char resolved[PATH_MAX];
  const std::string path = realpath(library.c_str(), resolved) != nullptr ? resolved : library;
  if (absl::Status s = InjectAgent(pid, path, agent); !s.ok()) {
    std::fprintf(stderr, "fragscope attach: cannot inject the agent into pid %d: %s\n", pid,
                 std::string(s.message()).c_str());
    return "";
  }
  agent->library = path;
  std::fprintf(stderr, "fragscope attach: injected %s into pid %d; %zu driver functions hooked\n",
               path.c_str(), pid, agent->patches.size());
  if (agent->refused > 0) {
    std::fprintf(stderr,
                 "fragscope attach: warning: %u tracked driver functions could not be hooked "
                 "and their calls are not seen: %s\n",
                 agent->refused, agent->refused_why.c_str());
  }
  for (int i = 0; i < 500; ++i) {  // the agent's thread opens the socket as it starts
    std::string control = FindControlSocket(pid, geteuid());
    if (!control.empty()) return control;
    if (!ProcessExists(pid)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr,
               "fragscope attach: the agent injected into pid %d opened no control socket (its "
               "reason is on the program's stderr)\n",
               pid);
  RemovePatches(pid, *agent).IgnoreError();
  return "";
}

// The agent's control socket: under the target's $XDG_RUNTIME_DIR, ours, or /tmp/fragscope-UID
// (the agent uses the first that its own environment names).
std::string FindControlSocket(pid_t pid, uid_t uid) {
  std::vector<std::string> dirs;
  if (std::string xdg = TargetEnv(pid, "XDG_RUNTIME_DIR"); !xdg.empty()) {
    dirs.push_back(absl::StrCat(xdg, "/", control_socket::kDirUnderRuntimeDir));
  }
  if (const char* xdg = getenv("XDG_RUNTIME_DIR"); xdg != nullptr && xdg[0] != '\0') {
    dirs.push_back(absl::StrCat(xdg, "/", control_socket::kDirUnderRuntimeDir));
  }
  dirs.push_back(absl::StrCat(control_socket::kFallbackDirPrefix, uid));
  for (const std::string& dir : dirs) {
    std::string path =
        absl::StrCat(dir, "/", control_socket::kSocketPrefix, pid, control_socket::kSocketSuffix);
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return path;
  }
  return "";
}

// Sends one command line to the agent and returns its one-line answer ("" if none came).
std::string AskAgent(const std::string& socket_path, const std::string& command,
                     long timeout_s = 10) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path.c_str());
  // The agent answers from its background thread within ~100 ms, a sync within its GIL wait.
  timeval timeout{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::string line = command + "\n";
    if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size())) {
      char buffer[1024];
      // Ctrl-C right after the wake must not lose its answer (the handler only sets a flag).
      for (;;) {
        ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        answer.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  while (!answer.empty() && answer.back() == '\n') answer.pop_back();
  return answer;
}

// Brings PyTorch's blocks up to date in the stream through the control socket's `sync-torch`
// (its snapshot diff: an injected import's, or the adapter fallback's in a process started
// with the agent dormant) and says so in one line, or why not; says nothing when the process
// has no such diff (the adapter's C++ extension follows every block, or it is not PyTorch).
// `why` ("attach", "detach") labels the sync; `injected` says whose diff it is, for the line.
// Never fatal.
void SyncTorchBlocks(const std::string& control, uint32_t wait_ms, const char* why, bool injected) {
  const std::string answer =
      AskAgent(control, absl::StrCat(control_socket::kSyncTorch, " ", wait_ms, " ", why),
               wait_ms / 1000 + 10);
  if (answer.rfind(control_socket::kSynced, 0) == 0) {
    std::fprintf(
        stderr,
        "fragscope attach: PyTorch's blocks brought up to date at the %s (%s block events%s)\n",
        why, answer.substr(sizeof(control_socket::kSynced) - 1).c_str(),
        injected ? "" : ", the adapter's snapshot diff");
  } else if (answer.rfind(control_socket::kSyncNone, 0) != 0) {
    std::fprintf(stderr,
                 "fragscope attach: PyTorch's blocks not brought up to date at the %s (%s); %s\n",
                 why, answer.empty() ? "no answer" : answer.c_str(),
                 injected ? "the last block figures are those of the attach or of its last OOM"
                          : "its figures are those of the adapter's last snapshot diff");
  }
}

// Asks the injected agent to import PyTorch's caching-allocator state before the stream starts,
// and says in one line what was imported, or why nothing was (then memory from before the
// attach is all `untracked`). Never fatal: the attach goes on either way. Returns whether it left
// PyTorch's OOM observer and its snapshot diff in the process.
bool ImportTorch(pid_t pid, const InjectedAgent& agent, uint32_t wait_ms) {
  auto answer = std::make_unique<FragscopeTorchImport>();
  if (absl::Status s = ImportTorchState(pid, agent.library, wait_ms, AdapterDir(), answer.get());
      !s.ok()) {
    std::fprintf(stderr,
                 "fragscope attach: PyTorch's state not imported (%s); memory allocated before "
                 "the attach is reported as untracked\n",
                 std::string(s.message()).c_str());
    return false;
  }
  const FragscopeTorchImport& a = *answer;
  std::string notes(a.message, strnlen(a.message, sizeof(a.message)));
  while (!notes.empty() && (notes.back() == ' ' || notes.back() == ';')) notes.pop_back();
  if (a.status != kFragscopeTorchImported) {
    std::fprintf(stderr,
                 "fragscope attach: PyTorch's state not imported (%s); memory allocated before "
                 "the attach is reported as untracked\n",
                 notes.empty() ? "no reason given" : notes.c_str());
    return false;
  }
  if (a.device_count == 0) {
    std::fprintf(stderr,
                 "fragscope attach: imported PyTorch's caching allocator state: 0 segments, 0 "
                 "blocks (it holds no device memory); memory allocated before the attach outside "
                 "it is reported as untracked\n");
  }
  for (uint32_t i = 0; i < a.device_count; ++i) {
    const FragscopeTorchDevice& d = a.devices[i];
    std::string expandable;
    if (d.expandable_runs > 0) {
      expandable = absl::StrFormat("; %u expandable segment runs of %u pages, read from the driver",
                                   d.expandable_runs, d.pages);
    }
    if (d.skipped_segments > 0) {
      absl::StrAppendFormat(
          &expandable,
          "; %s of mapped memory in %u expandable segment runs not imported (the driver did not "
          "list their pages: untracked)",
          FormatBytes(d.skipped_bytes), d.skipped_segments);
    }
    std::fprintf(stderr,
                 "fragscope attach: imported PyTorch's caching allocator state: %u segments, %u "
                 "blocks (device %d)%s\n",
                 d.segments, d.blocks, d.device, expandable.c_str());
  }
  if (a.device_count > 0) {
    std::fprintf(stderr,
                 "fragscope attach: memory allocated before the attach outside PyTorch's caching "
                 "allocator is reported as untracked%s%s\n",
                 notes.empty() ? "" : "; ", notes.c_str());
  }
  if (a.oom_observer != 0) {
    std::fprintf(stderr,
                 "fragscope attach: PyTorch's blocks are brought up to date at each OOM (its "
                 "OOM observer, before the failure is judged) and at the detach; in between "
                 "they are those of the attach\n");
  }
  return a.oom_observer != 0;
}

// What `fragscope attach` was asked to do, parsed and checked.
struct AttachOptions {
  pid_t pid = 0;
  long duration_s = 0;  // 0: until Ctrl-C or the process ends
  std::string trace_path, report_path;
  ReportFormat format = ReportFormat::kText;
  uint32_t torch_wait_ms = 5000;
};

// Fills `options`. Returns the exit code to stop with (usage error, --help), or nullopt.
std::optional<int> ParseAttachOptions(const std::vector<std::string>& args,
                                      AttachOptions* options) {
  std::string duration_text, format_name = "text", torch_wait_text;
  AttachOptions& o = *options;
  ArgReader reader("attach", args);
  reader.Option("duration", "", &duration_text);
  reader.Option("output", "o", &o.trace_path);
  reader.Option("format", "f", &format_name);
  reader.Option("report", "", &o.report_path);
  reader.Option("torch-wait", "", &torch_wait_text);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return exit;
  if (!ParseReportFormat(format_name, &o.format)) {
    std::fprintf(
        stderr,
        "fragscope attach: unknown --format '%s' (text or json) (fragscope attach --help)\n",
        format_name.c_str());
    return kExitUsage;
  }
  long pid_value = 0;
  if (reader.positionals().size() != 1 ||
      !ParsePositive(reader.positionals()[0], 1L << 22, &pid_value)) {
    std::fprintf(stderr,
                 "fragscope attach: give exactly one process id (fragscope attach --help)\n");
    return kExitUsage;
  }
  o.pid = static_cast<pid_t>(pid_value);
  if (!duration_text.empty() && !ParsePositive(duration_text, 365L * 24 * 3600, &o.duration_s)) {
    std::fprintf(stderr,
                 "fragscope attach: --duration '%s' must be a whole number of seconds > 0\n",
                 duration_text.c_str());
    return kExitUsage;
  }
  long torch_wait_s = 5;
  if (!torch_wait_text.empty() && !ParsePositive(torch_wait_text, 600, &torch_wait_s)) {
    std::fprintf(
        stderr, "fragscope attach: --torch-wait '%s' must be a whole number of seconds, 1 to 600\n",
        torch_wait_text.c_str());
    return kExitUsage;
  }
  o.torch_wait_ms = static_cast<uint32_t>(torch_wait_s * 1000);
  return std::nullopt;
}

// Refuses a process that does not exist or is another user's. Returns the exit code to stop
// with, or nullopt.
std::optional<int> CheckTarget(pid_t pid) {
  struct stat proc;
  if (!ProcessExists(pid) || stat(absl::StrFormat("/proc/%d", pid).c_str(), &proc) != 0) {
    std::fprintf(stderr, "fragscope attach: no process with pid %d\n", pid);
    return kExitBadInput;
  }
  if (proc.st_uid != geteuid()) {
    // The agent serves only its own user (SO_PEERCRED), and its collector socket must be one
    // the process may connect to, so even root has to run attach as that user.
    std::fprintf(stderr,
                 "fragscope attach: pid %d belongs to uid %u, not to you (uid %u); run attach as "
                 "that user (e.g. sudo -u '#%u' fragscope attach %d)\n",
                 pid, proc.st_uid, geteuid(), proc.st_uid, pid);
    return kExitBadInput;
  }
  return std::nullopt;
}

// The agent in the target, reached through its control socket: a dormant preloaded one, or one
// injected now (whose patches the detach removes).
struct ReachedAgent {
  pid_t pid = 0;
  std::string control;                    // its control socket
  std::optional<InjectedAgent> injected;  // set while our patches are in the process
  bool torch_synced = false;              // the import left a snapshot diff for the detach

  // Undoes the injection's patches (detach, or an error after the injection). Returns what to
  // say about it, "" when there was nothing to undo.
  std::string Unpatch() {
    if (!injected || !ProcessExists(pid)) return "";
    absl::Status s = RemovePatches(pid, *injected);
    injected.reset();
    if (!s.ok()) {
      return absl::StrFormat("warning: restoring libcuda's bytes in pid %d failed: %s", pid,
                             s.message());
    }
    return "libcuda's original bytes are restored; the agent stays loaded, dormant";
  }
};

// Finds the preloaded agent's control socket, or injects the agent (and imports PyTorch's
// state). Returns the exit code to stop with (said), or nullopt.
std::optional<int> ReachAgent(const AttachOptions& o, ReachedAgent* agent) {
  agent->pid = o.pid;
  agent->control = FindControlSocket(o.pid, geteuid());
  if (!AgentMapped(o.pid) || !AgentPreloaded(o.pid)) {
    // No agent, or one an earlier attach injected (dormant, its patches removed).
    agent->injected.emplace();
    agent->control = Inject(o.pid, &*agent->injected);
    if (agent->control.empty()) return kExitBadInput;
    // After the patches (PyTorch's segments taken or given back from now on are seen by the
    // hooks) and before the wake (whose snapshot then holds what PyTorch had).
    agent->torch_synced = ImportTorch(o.pid, *agent->injected, o.torch_wait_ms);
  } else if (agent->control.empty()) {
    std::fprintf(stderr,
                 "fragscope attach: pid %d has the agent loaded but no control socket: it was "
                 "not started with FRAGSCOPE_DORMANT=1 (an agent that streams from the start "
                 "already has an output), or it has not used CUDA memory yet\n",
                 o.pid);
    return kExitBadInput;
  }
  return std::nullopt;
}

// The embedded collector the agent streams to; sets *stream_ended when its stream ends.
absl::StatusOr<std::unique_ptr<SessionServer>> StartAttachCollector(
    const AttachOptions& o, std::atomic<bool>* stream_ended) {
  SessionServerOptions server_options;
  server_options.make_symbolizer = MakeDwarfSymbolizer;  // `fragscope top --socket` on it
  server_options.trace_epilogue = SymbolTableFramesFor;  // the trace keeps its function names
  if (!o.trace_path.empty()) {
    server_options.trace_path = [trace_path = o.trace_path](const StreamSession&, const v1::Frame&,
                                                            pid_t) { return trace_path; };
  }
  server_options.on_stream_end = [stream_ended](const CollectedStream&, const ModelSummary&) {
    *stream_ended = true;
  };
  absl::StatusOr<std::string> runtime_dir = PrivateRuntimeDir();
  if (!runtime_dir.ok()) return runtime_dir.status();
  return SessionServer::Start(absl::StrFormat("%s/attach-%d.sock", *runtime_dir, getpid()),
                              std::move(server_options));
}

// How the collection ended.
struct Detach {
  bool detached = false;  // the agent went back to dormant (false: the process or stream ended)
  std::string unpatched;  // what Unpatch said
};

// Wakes the agent towards `collector_socket`, collects until --duration, Ctrl-C or the end of
// the process or its stream, then detaches. Returns the exit code to stop with when the agent
// did not start streaming (said), or nullopt with *detach filled.
std::optional<int> Collect(const AttachOptions& o, const std::string& collector_socket,
                           const std::atomic<bool>& stream_ended, ReachedAgent* agent,
                           Detach* detach) {
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);

  const std::string answer =
      AskAgent(agent->control, absl::StrCat(control_socket::kWake, " ", collector_socket));
  if (answer.rfind(control_socket::kOk, 0) != 0) {
    std::fprintf(
        stderr, "fragscope attach: the agent of pid %d did not start streaming: %s\n", o.pid,
        (answer.empty() ? "no answer on its control socket " + agent->control : answer).c_str());
    agent->Unpatch();
    return kExitBadInput;
  }
  std::fprintf(
      stderr, "fragscope attach: collecting from pid %d (%s); %s\n", o.pid, answer.c_str(),
      o.duration_s > 0 ? absl::StrFormat("for %d s", o.duration_s).c_str() : "Ctrl-C to detach");
  // A dormant agent's table holds the blocks of the adapter's last diff, maybe long ago; an
  // injected one's are the import's, just taken.
  if (!agent->injected) {
    SyncTorchBlocks(agent->control, o.torch_wait_ms, "attach", /*injected=*/false);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.duration_s);
  while (!g_interrupted && !stream_ended && ProcessExists(o.pid) &&
         (o.duration_s == 0 || std::chrono::steady_clock::now() < deadline)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!stream_ended && ProcessExists(o.pid)) {
    // PyTorch's blocks as they are now, while the stream still runs.
    if (!agent->injected || agent->torch_synced) {
      SyncTorchBlocks(agent->control, o.torch_wait_ms, "detach", agent->injected.has_value());
    }
    // Detach: the agent writes End, closes the stream and goes back to dormant.
    detach->detached =
        AskAgent(agent->control, control_socket::kSleep).rfind(control_socket::kOk, 0) == 0;
    detach->unpatched = agent->Unpatch();
  }
  return std::nullopt;
}

// The report of the collected stream, and where the trace went. Returns the exit code.
int ReportAttach(const AttachOptions& o, std::vector<CollectedStream> streams,
                 const Detach& detach) {
  if (streams.empty()) {
    std::fprintf(stderr, "fragscope attach: pid %d never connected to the collector\n", o.pid);
    return kExitBadInput;
  }
  const CollectedStream& s = streams.front();
  if (s.outcome.result != FrameReader::Result::kEnd || !s.outcome.saw_end_frame) {
    std::fprintf(stderr,
                 "fragscope attach: warning: the stream of pid %d ended early (%s); the report "
                 "covers what arrived\n",
                 o.pid,
                 s.outcome.error.empty() ? "process ended without closing its stream"
                                         : s.outcome.error.c_str());
  }
  // A dormant agent started with another build's library (another package's, an older
  // install's) may send what this collector reads differently: said, as `run` says it.
  if (const std::optional<v1::Hello> hello = s.session->hello();
      hello && hello->agent_version() != FRAGSCOPE_VERSION) {
    std::fprintf(stderr,
                 "fragscope attach: warning: pid %d runs an agent of version '%s', but this "
                 "fragscope is version '%s': the report may misread its events. Start the "
                 "program with the agent of the same build or package as this fragscope\n",
                 o.pid, hello->agent_version().c_str(), FRAGSCOPE_VERSION);
  }
  const ModelSummary summary = s.session->Summarize();
  bool report_failed = false;
  if (absl::Status st =
          WriteReportFile(summary, o.format, o.report_path.empty() ? "-" : o.report_path);
      !st.ok()) {
    // The attach's findings are not lost for a file that went bad since the start: stdout.
    std::fprintf(stderr, "fragscope attach: cannot write report: %s; writing it to stdout\n",
                 std::string(st.message()).c_str());
    WriteReport(summary, o.format, std::cout);
    report_failed = true;
  }
  if (!s.outcome.trace_error.empty()) {
    std::fprintf(stderr, "fragscope attach: trace copy failed: %s\n",
                 s.outcome.trace_error.c_str());
  } else if (!o.trace_path.empty()) {
    std::fprintf(stderr, "fragscope attach: trace written to %s\n", o.trace_path.c_str());
  }
  if (!detach.unpatched.empty()) {
    std::fprintf(stderr, "fragscope attach: %s\n", detach.unpatched.c_str());
  }
  std::fprintf(stderr, "fragscope attach: %s\n",
               detach.detached ? "detached; the agent is dormant again" : "the process ended");
  return report_failed ? kExitBadInput : kExitOk;
}

}  // namespace

int AttachCommand(const std::vector<std::string>& args) {
  AttachOptions options;
  if (std::optional<int> exit = ParseAttachOptions(args, &options)) return *exit;
  if (std::optional<int> exit = CheckTarget(options.pid)) return *exit;
  // Before the process is touched: an attach can run for hours, and a path found unwritable
  // only at its end would cost the report or the trace.
  if (!OutputsWritable("attach",
                       {{"--report", &options.report_path}, {"-o", &options.trace_path}})) {
    return kExitBadInput;
  }
  ReachedAgent agent;
  if (std::optional<int> exit = ReachAgent(options, &agent)) return *exit;
  std::atomic<bool> stream_ended{false};
  auto collector = StartAttachCollector(options, &stream_ended);
  if (!collector.ok()) {
    std::fprintf(stderr, "fragscope attach: %s\n",
                 std::string(collector.status().message()).c_str());
    agent.Unpatch();
    return kExitBadInput;
  }
  Detach detach;
  if (std::optional<int> exit =
          Collect(options, (*collector)->socket_path(), stream_ended, &agent, &detach)) {
    return *exit;
  }
  return ReportAttach(options, (*collector)->Finish(2000), detach);
}

}  // namespace fragscope::cli
