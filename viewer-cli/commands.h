// The subcommands of `fragscope`. Each takes its arguments (after the subcommand name) and
// returns the process exit code (exit_codes.h).
#ifndef FRAGSCOPE_VIEWER_CLI_COMMANDS_H_
#define FRAGSCOPE_VIEWER_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace fragscope::cli {

int RunCommand(const std::vector<std::string>& args);
int AttachCommand(const std::vector<std::string>& args);
int ReportCommand(const std::vector<std::string>& args);
int ImportCommand(const std::vector<std::string>& args);
int GateCommand(const std::vector<std::string>& args);
int TopCommand(const std::vector<std::string>& args);
int ExportCommand(const std::vector<std::string>& args);
int SymbolizeCommand(const std::vector<std::string>& args);
int TorchSetupCommand(const std::vector<std::string>& args);

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_COMMANDS_H_
