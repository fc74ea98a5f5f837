// fragscope: the command people run. See README.md "Using fragscope" and `fragscope help`.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "exit_codes.h"

namespace {
constexpr char kUsage[] =
    "usage: fragscope COMMAND [ARGS...]\n"
    "commands:\n"
    "  run [opts] -- CMD ARGS...   run CMD with the agent preloaded; report when it exits\n"
    "                              (--daemon: to a fragscope-collector; --dormant: for attach)\n"
    "  attach PID [--duration S]  collect from a running process started with its agent dormant\n"
    "  top [PID] [--once]         live view of processes a fragscope-collector collects from\n"
    "  report TRACE...             summary, segment metrics and OOM post-mortems of a trace\n"
    "                              (--format text|json|html); several: a job, and its first OOM\n"
    "  gate TRACE... [limits]      fail (exit 1) when fragmentation/stranded/reserved exceed "
    "limits\n"
    "  import SNAPSHOT.pickle -o TRACE   convert a PyTorch memory snapshot\n"
    "  export TRACE --perfetto OUT.json | --torch-snapshot OUT.pickle   for Perfetto / PyTorch\n"
    "  symbolize TRACE [-o OUT]    store the trace's function names, read from this machine's\n"
    "                              binaries (a trace written without a collector)\n"
    "  torch-setup [--python PY]   build the PyTorch adapter's extension now, not at the first "
    "run\n"
    "  help                        this text; `fragscope COMMAND --help` for a command's options\n"
    "exit codes: 0 ok, 1 gate failed, 2 usage error, 3 bad or unreadable input; `run` passes\n"
    "the program's own exit status through.\n";
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return fragscope::cli::kExitUsage;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "run") return fragscope::cli::RunCommand(args);
  if (command == "attach") return fragscope::cli::AttachCommand(args);
  if (command == "report") return fragscope::cli::ReportCommand(args);
  if (command == "import") return fragscope::cli::ImportCommand(args);
  if (command == "gate") return fragscope::cli::GateCommand(args);
  if (command == "top") return fragscope::cli::TopCommand(args);
  if (command == "export") return fragscope::cli::ExportCommand(args);
  if (command == "symbolize") return fragscope::cli::SymbolizeCommand(args);
  if (command == "torch-setup") return fragscope::cli::TorchSetupCommand(args);
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return fragscope::cli::kExitOk;
  }
  if (command == "--version") {
    std::printf("fragscope %s\n", FRAGSCOPE_VERSION);
    return fragscope::cli::kExitOk;
  }
  // The one wrong word, and the command it most likely was.
  const char* nearest = nullptr;
  for (const char* known : {"run", "attach", "top", "report", "gate", "import", "export",
                            "symbolize", "torch-setup", "help"}) {
    const std::size_t n = std::strlen(known);
    if (command.size() + 1 >= n && command.size() <= n + 1 &&
        (command.compare(0, 2, known, 2) == 0 ||
         command.compare(command.size() - 2, 2, known + n - 2, 2) == 0)) {
      nearest = known;
      break;
    }
  }
  std::fprintf(stderr, "fragscope: unknown command '%s'%s%s%s (fragscope --help)\n",
               command.c_str(), nearest != nullptr ? "; did you mean " : "",
               nearest != nullptr ? nearest : "", nearest != nullptr ? "?" : "");
  return fragscope::cli::kExitUsage;
}
