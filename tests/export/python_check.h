// Runs python3 on a pickle with an Unpickler whose find_class refuses every global, so a test
// can show Python reads an export without executing anything from it.
#ifndef FRAGSCOPE_TESTS_EXPORT_PYTHON_CHECK_H_
#define FRAGSCOPE_TESTS_EXPORT_PYTHON_CHECK_H_

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace fragscope::exporter {

inline bool PythonAvailable() { return std::system("python3 -c '' >/dev/null 2>&1") == 0; }

struct PythonResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// `body` runs after `load()` is defined (it returns the unpickled file). Pickle path and script
// go through files, not the shell, so any path is safe.
inline PythonResult RunRestrictedPython(const std::string& pickle_path, const std::string& body) {
  const std::filesystem::path script =
      std::filesystem::path(::testing::TempDir()) /
      ("fragscope_restricted_load." + std::to_string(getpid()) + ".py");
  std::ofstream(script)
      << "import pickle, sys\n"
         "class NoGlobals(pickle.Unpickler):\n"
         "    def find_class(self, module, name):\n"
         "        raise pickle.UnpicklingError(f'global {module}.{name} refused')\n"
         "def load():\n"
         "    with open(sys.argv[1], 'rb') as f:\n"
         "        return NoGlobals(f).load()\n"
      << body;
  PythonResult r;
  const std::string command = "python3 '" + script.string() + "' \"$FRAGSCOPE_PICKLE\" 2>&1";
  setenv("FRAGSCOPE_PICKLE", pickle_path.c_str(), 1);
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_TESTS_EXPORT_PYTHON_CHECK_H_
