// An agent library of "another build" for the tests of the version check (run, attach, the
// collector daemon): this build's agent with its version string changed, which is all that tells
// two builds apart.
#ifndef FRAGSCOPE_TESTS_CLI_AGENT_OF_ANOTHER_BUILD_H_
#define FRAGSCOPE_TESTS_CLI_AGENT_OF_ANOTHER_BUILD_H_

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace fragscope::testing {

// The version in what `fragscope --version` prints ("fragscope VERSION").
inline std::string VersionFromOutput(std::string output) {
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  return output.substr(output.rfind(' ') + 1);
}

// Writes to `copy` (which may be `agent` itself) the agent library `agent` with its version
// `version` changed in its last character, and returns the changed version. The version must sit
// in the agent once, as a C string of its own; otherwise the test fails and "" is returned.
inline std::string CopyAgentOfAnotherBuild(const std::string& agent, const std::string& version,
                                           const std::string& copy) {
  std::string bytes = Slurp(agent);
  const std::string needle = version + '\0';
  const size_t at = bytes.find(needle);
  if (version.empty() || at == std::string::npos ||
      bytes.find(needle, at + 1) != std::string::npos) {
    ADD_FAILURE() << "version '" << version << "' is not in " << agent << " exactly once";
    return "";
  }
  std::string other = version;
  other.back() = other.back() == 'x' ? 'y' : 'x';
  bytes.replace(at, other.size(), other);
  std::ofstream(copy, std::ios::binary | std::ios::trunc) << bytes;
  return other;
}

}  // namespace fragscope::testing

#endif  // FRAGSCOPE_TESTS_CLI_AGENT_OF_ANOTHER_BUILD_H_
