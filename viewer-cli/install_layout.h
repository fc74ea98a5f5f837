// Where the files the commands hand to a traced program live, relative to the running
// `fragscope`: <prefix>/bin/fragscope -> <prefix>/lib/libfragscope.so and
// <prefix>/share/fragscope/adapter (installed), or the build tree's build/lib and the source
// tree's scripts/adapter (running from a build directory).
#ifndef FRAGSCOPE_VIEWER_CLI_INSTALL_LAYOUT_H_
#define FRAGSCOPE_VIEWER_CLI_INSTALL_LAYOUT_H_

#include <string>
#include <vector>

namespace fragscope::cli {

// <prefix> of the running command ("." if /proc/self/exe cannot be read).
std::string InstallPrefix();
// Where an installed agent may lie: libfragscope.so under each of <prefix>'s lib directories.
std::vector<std::string> AgentLibraryCandidates();
// The agent library to preload: $FRAGSCOPE_AGENT, else the first readable of
// AgentLibraryCandidates() (<prefix>/lib/libfragscope.so when none is).
std::string AgentLibraryPath();
// Why AgentLibraryPath() (or `library`, a file beside it) is not there, for an error message:
// the file expected, every place looked in and what to do.
std::string MissingAgentMessage(const std::string& library);
// The PyTorch adapter directory: $FRAGSCOPE_ADAPTER_DIR, the installed copy or the source
// tree's; empty when none has a sitecustomize.py.
std::string AdapterDir();

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_INSTALL_LAYOUT_H_
