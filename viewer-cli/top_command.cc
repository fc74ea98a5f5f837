// fragscope top [--socket PATH] [--pid PID] [--once] [--format text|json] [--interval S]
//
// Live per-process, per-device view of a running fragscope-collector: reserved, allocated,
// largest free range, fragmentation, allocation rate and the top site. `--once --format json`
// prints the collector's answer for scripts.
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "fragscope/server/session_server.h"
#include "fragscope/server/socket_listener.h"
#include "top_table.h"

namespace fragscope::cli {

namespace {

constexpr char kUsage[] =
    "usage: fragscope top [--socket PATH] [--pid PID] [--once] [--format text|json]\n"
    "                     [--interval SECONDS]\n"
    "  Live view of the processes a fragscope-collector is collecting from. On a terminal the\n"
    "  screen is redrawn at each refresh, lines cut to its width ($COLUMNS when it reports\n"
    "  none); into a pipe or file, plain text frames one after another.\n";

// Asks the collector for its state; empty string and `error` set on failure.
std::string Query(const std::string& socket_path, std::string* error) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *error = absl::StrFormat(
        "%s: cannot connect: %s; is fragscope-collector running (and as this user)?", socket_path,
        std::strerror(errno));
    if (fd >= 0) close(fd);
    return "";
  }
  char header[kQueryHeaderBytes] = {};
  std::memcpy(header, kQueryMagic, sizeof(kQueryMagic));
  header[8] = 1;  // query protocol version
  if (send(fd, header, sizeof(header), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(header))) {
    *error = socket_path + ": the collector closed the connection";
    close(fd);
    return "";
  }
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  if (out.empty()) *error = socket_path + ": the collector sent nothing (refused this user?)";
  return out;
}

// The width to fit the table to: the terminal's, else $COLUMNS (a terminal that reports no size,
// as under `script` or some serial consoles), else 100.
int TerminalColumns() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* env = std::getenv("COLUMNS"); env != nullptr) {
    char* end = nullptr;
    const long columns = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && columns > 0 && columns < 100000) {
      return static_cast<int>(columns);
    }
  }
  return 100;
}

}  // namespace

int TopCommand(const std::vector<std::string>& args) {
  std::string socket_path, format = "text", interval = "1", pid;
  bool once = false;
  ArgReader reader("top", args);
  reader.Option("socket", "", &socket_path);
  reader.Option("format", "f", &format);
  reader.Option("interval", "", &interval);
  reader.Option("pid", "p", &pid);
  reader.Flag("once", &once);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return *exit;
  if (format != "text" && format != "json") {
    std::fprintf(stderr, "fragscope top: --format must be text or json (fragscope top --help)\n");
    return kExitUsage;
  }
  if (format == "json" && !once) {
    std::fprintf(stderr, "fragscope top: --format json needs --once (fragscope top --help)\n");
    return kExitUsage;
  }
  char* end = nullptr;
  double seconds = std::strtod(interval.c_str(), &end);
  if (*end != '\0' || !(seconds >= 0.1 && seconds <= 3600)) {
    std::fprintf(stderr, "fragscope top: --interval '%s' must be 0.1..3600 seconds\n",
                 interval.c_str());
    return kExitUsage;
  }
  long pid_filter = 0;
  if (!pid.empty()) {
    pid_filter = std::strtol(pid.c_str(), &end, 10);
    if (*end != '\0' || pid_filter <= 0) {
      std::fprintf(stderr, "fragscope top: --pid '%s' is not a process id\n", pid.c_str());
      return kExitUsage;
    }
  }
  if (!reader.positionals().empty()) {
    pid_filter = std::strtol(reader.positionals()[0].c_str(), &end, 10);
    if (*end != '\0' || pid_filter <= 0) {
      std::fprintf(stderr, "fragscope top: '%s' is not a process id (fragscope top --help)\n",
                   reader.positionals()[0].c_str());
      return kExitUsage;
    }
  }
  if (socket_path.empty()) {
    auto dir = PrivateRuntimeDir();
    if (!dir.ok()) {
      std::fprintf(stderr, "fragscope top: %s\n", std::string(dir.status().message()).c_str());
      return kExitBadInput;
    }
    socket_path = *dir + "/collector.sock";
  }
  // A terminal gets a screen redrawn in place, fitted to its width; a pipe or file gets plain
  // frames one after another, whole, for logs and scripts (no escape codes to strip).
  const bool terminal = isatty(STDOUT_FILENO) == 1;
  TopRates rates;
  bool first_frame = true;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::string error;
    std::string answer = Query(socket_path, &error);
    if (answer.empty()) {
      std::fprintf(stderr, "fragscope top: %s\n", error.c_str());
      return kExitBadInput;
    }
    if (once && format == "json") {
      std::fputs(answer.c_str(), stdout);
      return kExitOk;
    }
    nlohmann::json doc = nlohmann::json::parse(answer, nullptr, false);
    if (doc.is_discarded()) {
      std::fprintf(stderr, "fragscope top: %s: the collector's answer is not JSON\n",
                   socket_path.c_str());
      return kExitBadInput;
    }
    double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (terminal && !once) {
      std::printf("\033[H\033[2J");  // clear the screen for the next frame
    } else if (!first_frame) {
      std::putchar('\n');  // frames apart
    }
    first_frame = false;
    const int columns = terminal ? TerminalColumns() : 0;  // each frame: the window may resize
    std::fputs(FitToWidth(TopTable(doc, pid_filter, &rates, now), columns).c_str(), stdout);
    std::fflush(stdout);
    if (once) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
}

}  // namespace fragscope::cli
