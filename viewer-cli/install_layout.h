// Where the files the commands hand to a traced program live, relative to the running
// `fragscope`: <prefix>/bin/fragscope -> <prefix>/lib/libfragscope.so and
// <prefix>/share/fragscope/adapter (installed), or the build tree's build/lib and the source
// tree's scripts/adapter (running from a build directory).
#ifndef FRAGSCOPE_VIEWER_CLI_INSTALL_LAYOUT_H_
#define FRAGSCOPE_VIEWER_CLI_INSTALL_LAYOUT_H_

#include <string>

namespace fragscope::cli {

// <prefix> of the running command ("." if /proc/self/exe cannot be read).
std::string InstallPrefix();
// The agent library to preload: $FRAGSCOPE_AGENT, else libfragscope.so under <prefix>'s lib
// directories (the first readable one; <prefix>/lib/libfragscope.so when none is).
std::string AgentLibraryPath();
// The PyTorch adapter directory: $FRAGSCOPE_ADAPTER_DIR, the installed copy or the source
// tree's; empty when none has a sitecustomize.py.
std::string AdapterDir();

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_INSTALL_LAYOUT_H_
