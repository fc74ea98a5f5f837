// fragscope torch-setup [--python PY]
//
// Builds the PyTorch adapter's C++ extension ahead of time, into the cache the adapter loads it
// from at run time (scripts/adapter/sitecustomize.py, _extension_place), so the first `fragscope
// run` of a PyTorch program does not stop for a minute to compile it. The build is the adapter's
// own code, run by the given python: the extension must match that python's torch.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "install_layout.h"

extern char** environ;

namespace fragscope::cli {

namespace {

constexpr char kUsage[] =
    "usage: fragscope torch-setup [--python PY]\n"
    "  Builds the PyTorch adapter's C++ extension for PY's torch (default python3) into the\n"
    "  cache `fragscope run` loads it from (FRAGSCOPE_CACHE_DIR, default ~/.cache/fragscope),\n"
    "  so the first run does not stop to compile it (about a minute). Exit 0 when it is built,\n"
    "  3 when it cannot be (no torch in PY, no compiler or CUDA headers), with the reason.\n";

}  // namespace

int TorchSetupCommand(const std::vector<std::string>& args) {
  std::string python = "python3";
  ArgReader reader("torch-setup", args);
  reader.Option("python", "", &python);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return *exit;
  if (!reader.positionals().empty() || reader.saw_dashdash()) {
    std::fprintf(stderr,
                 "fragscope torch-setup: unexpected argument '%s'; the python goes after "
                 "--python (fragscope torch-setup --help)\n",
                 reader.positionals().empty() ? "--" : reader.positionals()[0].c_str());
    return kExitUsage;
  }
  const std::string adapter = AdapterDir();
  if (adapter.empty()) {
    std::fprintf(stderr,
                 "fragscope torch-setup: the PyTorch adapter (sitecustomize.py) is not in %s/"
                 "share/fragscope/adapter; reinstall fragscope or set FRAGSCOPE_ADAPTER_DIR to "
                 "its folder\n",
                 InstallPrefix().c_str());
    return kExitBadInput;
  }
  // The adapter file run as a script builds and exits (its `__main__` branch).
  const std::string script = adapter + "/sitecustomize.py";
  std::vector<std::string> argv_strings = {python, script};
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = -1;
  if (int err = posix_spawnp(&child, python.c_str(), nullptr, nullptr, argv.data(), environ);
      err != 0) {
    std::fprintf(stderr,
                 "fragscope torch-setup: cannot run '%s': %s; give the python that runs your "
                 "training with --python PATH\n",
                 python.c_str(), std::strerror(err));
    return kExitBadInput;
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == kExitBadInput)) {
    return WEXITSTATUS(status);  // the adapter said what it did, or why not
  }
  std::fprintf(stderr, "fragscope torch-setup: %s %s %s; the extension was not built\n",
               python.c_str(), script.c_str(),
               WIFSIGNALED(status)
                   ? ("was killed by signal " + std::to_string(WTERMSIG(status))).c_str()
                   : ("exited with status " + std::to_string(WEXITSTATUS(status))).c_str());
  return kExitBadInput;
}

}  // namespace fragscope::cli
