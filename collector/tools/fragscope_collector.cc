// fragscope-collector: a daemon that collects from many processes at once (every rank of a
// multi-GPU job), keeps one model per process, writes each stream to a trace file, writes each
// OOM post-mortem as it happens (text and JSON next to the trace, announced on stderr, so a job
// that dies at 3 a.m. leaves its explanation behind), and answers `fragscope top`. A folder
// removed while it runs is made again and said once (output_dir.h), and the traces of running
// streams are written there again whole.
//
//   fragscope-collector [--socket PATH] [--dir DIR] [--no-traces]
//   agents: FRAGSCOPE_SOCKET=PATH LD_PRELOAD=.../libfragscope.so CMD
//
// Runs until SIGINT/SIGTERM. Memory stays O(live blocks + distinct stacks) of the processes
// still connected: an ended stream's model is released once its final report is written.
// Exit: 0 after a signal, 2 usage, 3 cannot listen or write.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "fragscope/report/report_json.h"
#include "fragscope/report/report_text.h"
#include "fragscope/server/metrics_http_server.h"
#include "fragscope/server/prometheus_exposition.h"
#include "fragscope/server/session_server.h"
#include "fragscope/server/socket_listener.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"
#include "fragscope/symbolize/symbol_table_builder.h"
#include "fragscope/trace/output_file.h"
#include "oom_file_writer.h"
#include "output_dir.h"
#include "stream_file_names.h"

namespace {

constexpr char kUsage[] =
    "usage: fragscope-collector [--socket PATH] [--dir DIR] [--no-traces] [--version]\n"
    "                           [--metrics HOST:PORT [--metrics-allow-remote]]\n"
    "                           [--oom-window SECONDS]\n"
    "  --socket PATH  where agents connect (default $XDG_RUNTIME_DIR/fragscope/collector.sock\n"
    "                 or /tmp/fragscope-$UID/collector.sock)\n"
    "  --dir DIR      traces, OOM post-mortems and final reports (default ./fragscope-traces)\n"
    "  --no-traces    keep models and post-mortems only, no trace files\n"
    "  --metrics HOST:PORT  Prometheus exposition at http://HOST:PORT/metrics; HOST is localhost,\n"
    "                 an IPv4 address or an IPv6 one in brackets ([::1]:9464); loopback only\n"
    "                 unless --metrics-allow-remote; port 0 picks a free port\n"
    "  --oom-window SECONDS  a failed cudaMalloc/cuMemAlloc gets its post-mortem file once the\n"
    "                 program has not allocated that size for this long (default 2; a\n"
    "                 sub-allocator's OOM, e.g. PyTorch's, is written at once)\n"
    "Point agents at it: FRAGSCOPE_SOCKET=PATH LD_PRELOAD=.../libfragscope.so CMD\n";

std::mutex g_log_mu;  // one line at a time on stderr from many stream threads

// The output folder's mode, at start and when it is made again after a removal.
constexpr mode_t kDirMode = 0755;

void Say(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(stderr, "fragscope-collector: %s\n", line.c_str());
}

// `rank`: the rank the model knows now, which the program may have set after its Hello
// (fragscope_set_rank, e.g. an mp.spawn worker's init_process_group); nullopt: the Hello's.
std::string StreamName(const fragscope::v1::Hello& h, pid_t peer,
                       std::optional<uint32_t> rank = std::nullopt) {
  std::string exe = h.exe();
  exe = exe.substr(exe.rfind('/') + 1);
  for (char& c : exe) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
  }
  if (exe.empty()) exe = "process";
  // A distributed job's rank in the name: `ls traces/` then reads as the job's ranks.
  if (!rank && h.has_rank()) rank = h.rank();
  const std::string rank_part = rank ? absl::StrFormat("-rank%d", *rank) : "";
  std::string name =
      absl::StrFormat("%s%s-%d", exe, rank_part, h.pid() ? static_cast<int>(h.pid()) : peer);
  if (h.stream_index() > 0) name += absl::StrFormat(".%d", h.stream_index());
  // An image after an exec in place (same pid): named apart from the image before it.
  if (h.exec_image() > 0) name += absl::StrFormat(".exec-%d", h.exec_image());
  // A stream resumed after a collector restart: a file of its own, never over the trace the
  // previous collector wrote for the same process into the same directory.
  if (h.resumed() > 0) name += absl::StrFormat(".resumed-%d", h.resumed());
  return name;
}

// 0644 at most whatever the umask (fragscope::WriteOutputFile): reports may hold paths and
// stacks of a user's job, and must never be writable by others. A failure is said on stderr
// with the path and the reason (a file that could not be written whole is not left behind).
// `path` is in `dir`, which is made again first if it was removed.
uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

bool WriteFile(fragscope::OutputDir& dir, const std::string& path, const std::string& text) {
  dir.Ensure();
  absl::Status written = fragscope::WriteOutputFile(path, text);
  // Removed between the check and the write: made again, so the write is worth another try.
  if (!written.ok() && dir.Ensure()) written = fragscope::WriteOutputFile(path, text);
  if (!written.ok()) Say(std::string(written.message()));
  return written.ok();
}

std::string Render(const fragscope::ModelSummary& s, bool json) {
  fragscope::DwarfSymbolizer symbolizer(s);
  std::ostringstream out;
  if (json) {
    fragscope::RenderJson(s, symbolizer, out);
  } else {
    fragscope::RenderText(s, symbolizer, out);
  }
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path, dir = "fragscope-traces", metrics;
  bool traces = true, allow_remote = false;
  uint64_t oom_window_ms = 2000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--oom-window") {
      const char* text = i + 1 < argc ? argv[++i] : "";
      char* end = nullptr;
      const double seconds = std::strtod(text, &end);
      // Plain decimal seconds only (no sign, space, hex or exponent), at most an hour.
      const bool plain = *text != '\0' && std::strspn(text, "0123456789.") == std::strlen(text);
      if (!plain || end == text || *end != '\0' || !(seconds > 0) || seconds > 3600) {
        std::fprintf(stderr,
                     "fragscope-collector: --oom-window '%s' is not a number of seconds in (0, "
                     "3600], e.g. 2 or 0.5 (fragscope-collector --help)\n",
                     text);
        return 2;
      }
      oom_window_ms = static_cast<uint64_t>(seconds * 1000 + 0.5);
      continue;
    }
    if ((a == "--socket" || a == "--dir" || a == "--metrics") && i + 1 < argc) {
      (a == "--socket" ? socket_path : a == "--dir" ? dir : metrics) = argv[++i];
    } else if (a == "--metrics-allow-remote") {
      allow_remote = true;
    } else if (a == "--no-traces") {
      traces = false;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--version") {
      std::printf("fragscope-collector %s\n", FRAGSCOPE_VERSION);
      return 0;
    } else if (a == "--socket" || a == "--dir" || a == "--metrics") {
      std::fprintf(stderr,
                   "fragscope-collector: option %s needs a value (fragscope-collector --help)\n",
                   a.c_str());
      return 2;
    } else {
      std::fprintf(stderr,
                   "fragscope-collector: unknown argument '%s' (fragscope-collector --help)\n",
                   a.c_str());
      return 2;
    }
  }
  if (socket_path.empty()) {
    auto runtime = fragscope::PrivateRuntimeDir();
    if (!runtime.ok()) {
      std::fprintf(stderr, "fragscope-collector: %s\n",
                   std::string(runtime.status().message()).c_str());
      return 3;
    }
    socket_path = *runtime + "/collector.sock";
  }
  if (mkdir(dir.c_str(), kDirMode) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "fragscope-collector: %s: cannot create output directory: %s\n",
                 dir.c_str(), std::strerror(errno));
    return 3;
  }
  // Every trace, post-mortem and report goes there, each written as it happens: a directory
  // that exists but takes no files (read-only mount, another user's) would lose them all.
  if (absl::Status st = fragscope::CheckOutputFileWritable(dir + "/.fragscope-write-check");
      !st.ok()) {
    std::fprintf(stderr, "fragscope-collector: --dir %s: cannot write there (%s)\n", dir.c_str(),
                 std::string(st.message()).c_str());
    return 3;
  }

  // A folder removed later (a cleanup cron, `rm -rf`) is made again at the next file, and each
  // running stream's trace, still whole in its open file, is written there again.
  fragscope::OutputDir out_dir(
      dir, kDirMode,
      traces ? "new streams' traces, post-mortems and reports go there from now on, and each "
               "running stream's trace is written there again whole at its next pause (a line "
               "each); the files it held before are gone"
             : "post-mortems and reports go there from now on; the files it held before are gone",
      Say);

  // Each OOM's post-mortem, in a file of its own, as soon as it is clear the program did not
  // recover (oom_file_writer.h).
  fragscope::OomFileWriter oom_files(
      {dir, oom_window_ms},
      [&out_dir](const std::string& path, const std::string& text) {
        return WriteFile(out_dir, path, text);
      },
      [](const std::string& line) {
        std::lock_guard<std::mutex> lock(g_log_mu);
        std::fprintf(stderr, "fragscope-collector: %s\n", line.c_str());
      });
  // Each stream's file names, never another stream's: processes with the same executable and
  // pid (pid namespaces, pid reuse) get names of their own.
  fragscope::StreamFileNames names(dir);
  auto name_of = [&](const fragscope::StreamSession& session, pid_t peer) {
    const fragscope::v1::Hello hello = session.hello().value_or(fragscope::v1::Hello());
    return names.NameFor(&session, StreamName(hello, peer),
                         hello.realtime_at_start_ns() / 1'000'000'000, /*reserve_trace=*/false);
  };

  fragscope::SessionServerOptions options;
  options.keep_ended_streams = false;
  options.ended_streams_shown = 16;  // `fragscope top` still shows the ranks that ended
  options.make_symbolizer = fragscope::MakeDwarfSymbolizer;  // `fragscope top` names functions
  options.trace_epilogue = fragscope::SymbolTableFramesFor;  // the traces keep function names
  if (traces) {
    options.trace_path = [&names, &out_dir, dir](const fragscope::StreamSession& session,
                                                 const fragscope::v1::Frame& first, pid_t peer) {
      out_dir.Ensure();  // a stream starting after the folder was removed: its trace goes there
      fragscope::v1::Hello h = first.has_hello() ? first.hello() : fragscope::v1::Hello();
      return dir + "/" +
             names.NameFor(&session, StreamName(h, peer), h.realtime_at_start_ns() / 1'000'000'000,
                           /*reserve_trace=*/true) +
             ".fst";
    };
    options.trace_removal.restore = [&out_dir](const std::string&) { out_dir.Ensure(); };
    options.trace_removal.rewritten = [](const std::string& path,
                                         const absl::StatusOr<uint64_t>& rewritten) {
      if (!rewritten.ok()) {
        Say(std::string(rewritten.status().message()));
        return;
      }
      Say(absl::StrFormat(
          "%s was removed while its stream ran; written there again whole from the open file "
          "(%d bytes), and the trace goes on there",
          path, *rewritten));
    };
  }
  // The refused agent says so on its program's stderr too (it checks the collector's uid), but
  // whoever runs the daemon should learn that someone's job is pointed at the wrong collector.
  options.on_refused_peer = [](const fragscope::RefusedPeer& peer) {
    std::lock_guard<std::mutex> lock(g_log_mu);
    std::fprintf(stderr,
                 "fragscope-collector: %s: refused a stream from pid %d of uid %u: this collector "
                 "serves only its own user (uid %u), so that process is not traced; its user "
                 "should run a fragscope-collector of their own and point FRAGSCOPE_SOCKET at it "
                 "(said once per uid: later streams of uid %u are refused without a line)\n",
                 peer.socket_path.c_str(), static_cast<int>(peer.pid),
                 static_cast<unsigned>(peer.uid), static_cast<unsigned>(peer.own_uid),
                 static_cast<unsigned>(peer.uid));
  };
  options.on_failure = [&](const fragscope::StreamSession& session, pid_t peer,
                           const fragscope::ModelSummary& summary) {
    oom_files.OnFailure(&session, name_of(session, peer), summary, NowMs());
  };
  options.on_stream_end = [&](const fragscope::CollectedStream& s,
                              const fragscope::ModelSummary& summary) {
    const fragscope::StreamSession* stream = s.session.get();
    const fragscope::v1::Hello hello = s.session->hello().value_or(fragscope::v1::Hello());
    const std::string key = name_of(*s.session, s.peer_pid);
    // The program named its rank after the stream began: its files join the others under that
    // name (`ls` reads as the job), keeping what makes the name the stream's own.
    const std::string plain = StreamName(hello, s.peer_pid);
    const std::string ranked = StreamName(hello, s.peer_pid, summary.rank) +
                               key.substr(std::min(plain.size(), key.size()));
    std::string renamed;
    if (ranked != key) {
      if (!traces) {
        names.Rename(stream, ranked);
      } else {
        // link + unlink: never over an existing file.
        const std::string from = dir + "/" + key + ".fst", to = dir + "/" + ranked + ".fst";
        if (link(from.c_str(), to.c_str()) == 0) {
          if (names.Rename(stream, ranked)) {
            unlink(from.c_str());
            renamed = absl::StrFormat("; its trace was %s.fst until the program set its rank", key);
          } else {
            unlink(to.c_str());
          }
        }
      }
    }
    const std::string name = names.Find(stream);
    oom_files.OnStreamEnd(stream, name, summary);
    bool ok = WriteFile(out_dir, dir + "/" + name + ".report.txt", Render(summary, false)) &&
              WriteFile(out_dir, dir + "/" + name + ".report.json", Render(summary, true));
    names.Forget(stream);
    std::lock_guard<std::mutex> lock(g_log_mu);
    const bool clean =
        s.outcome.saw_end_frame && s.outcome.result == fragscope::FrameReader::Result::kEnd;
    const uint32_t resumed = s.session->hello().has_value() ? s.session->hello()->resumed() : 0;
    const std::string resumed_note =
        resumed == 0 ? ""
                     : absl::StrFormat(
                           "; resumed after the agent's reconnect %d: exact from its snapshot, "
                           "%d events dropped in all",
                           resumed, summary.drops);
    std::fprintf(stderr, "fragscope-collector: %s %s (%llu frames%s%s)%s%s\n", name.c_str(),
                 clean ? "ended" : "DISCONNECTED without a clean end (crashed or killed?)",
                 static_cast<unsigned long long>(s.outcome.frames), resumed_note.c_str(),
                 renamed.c_str(), s.outcome.error.empty() ? "" : ": ", s.outcome.error.c_str());
    if (!s.outcome.trace_error.empty()) {
      std::fprintf(stderr, "fragscope-collector: %s: the trace is incomplete: %s\n", name.c_str(),
                   s.outcome.trace_error.c_str());
    }
    // An agent of another build (another package's, an older install's) may send what this
    // collector reads otherwise: said with its stream, as `fragscope run` says it.
    if (s.session->hello().has_value() && hello.agent_version() != FRAGSCOPE_VERSION) {
      std::fprintf(stderr,
                   "fragscope-collector: %s: warning: its agent is version '%s' and this collector "
                   "'%s': the report may misread its events; run the program with the agent of "
                   "this collector's build or package\n",
                   name.c_str(), hello.agent_version().c_str(), FRAGSCOPE_VERSION);
    }
    if (!ok) {
      std::fprintf(stderr, "fragscope-collector: %s: final report not written (see above)\n",
                   name.c_str());
    }
  };

  // Signals are taken by sigwait below, not by handlers, so stream threads are never
  // interrupted mid-write.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = fragscope::SessionServer::Start(socket_path, std::move(options));
  if (!server.ok()) {
    std::fprintf(stderr, "fragscope-collector: %s\n",
                 std::string(server.status().message()).c_str());
    return 3;
  }
  std::unique_ptr<fragscope::MetricsHttpServer> metrics_server;
  if (!metrics.empty()) {
    fragscope::SessionServer* raw = server->get();
    auto m = fragscope::MetricsHttpServer::Start(
        metrics, allow_remote, [raw] { return fragscope::RenderPrometheus(raw->Streams()); });
    if (!m.ok()) {
      std::fprintf(stderr, "fragscope-collector: %s\n", std::string(m.status().message()).c_str());
      return 2;
    }
    metrics_server = std::move(*m);
    std::fprintf(stderr, "fragscope-collector: metrics on http://%s:%d/metrics\n",
                 metrics.substr(0, metrics.rfind(':')).c_str(), metrics_server->port());
  }
  std::fprintf(stderr,
               "fragscope-collector: listening on %s; writing to %s/\n"
               "  run jobs with: FRAGSCOPE_SOCKET=%s LD_PRELOAD=<prefix>/lib/libfragscope.so CMD\n",
               socket_path.c_str(), dir.c_str(), socket_path.c_str());
  // Driver OOMs are judged once their recovery window has passed, even when the program makes
  // no further call (a hang after its OOM).
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      oom_files.Tick(NowMs());
    }
  });
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "fragscope-collector: %s, finishing open streams\n", strsignal(sig));
  if (metrics_server) metrics_server->Stop();
  (*server)->Finish(1000);
  stop = true;
  ticker.join();
  return 0;
}
