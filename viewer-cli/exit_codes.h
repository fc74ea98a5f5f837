// The `fragscope` command's exit codes (viewer-cli/README.md). `run` passes the traced
// program's own status through instead.
#ifndef FRAGSCOPE_VIEWER_CLI_EXIT_CODES_H_
#define FRAGSCOPE_VIEWER_CLI_EXIT_CODES_H_

namespace fragscope::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitGateFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitBadInput = 3;

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_EXIT_CODES_H_
