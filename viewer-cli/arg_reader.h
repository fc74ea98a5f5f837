// A small reader of subcommand arguments: `--name value`, `--name=value`, `-o value`, flags,
// positionals and `--` (everything after it is passed through untouched). Errors name the one
// wrong argument, suggest the option meant and point at `fragscope COMMAND --help`; exit code 2.
#ifndef FRAGSCOPE_VIEWER_CLI_ARG_READER_H_
#define FRAGSCOPE_VIEWER_CLI_ARG_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fragscope::cli {

class ArgReader {
 public:
  ArgReader(std::string command, std::vector<std::string> args)
      : command_(std::move(command)), args_(std::move(args)) {}

  // Declare what the command accepts, then Parse().
  void Option(const std::string& long_name, const std::string& short_name, std::string* value);
  void Flag(const std::string& long_name, bool* value);
  // For commands that run another one (`run CMD ARGS...`): the first positional starts it, and
  // it and everything after belong to it (after_dashdash()), options included.
  void CommandFollows() { command_follows_ = true; }
  // Returns false and fills error() on an unknown option, a missing value or a stray `--`.
  bool Parse();
  // What every command does first: declares --help, parses, and handles the two early exits
  // (a bad argument: the message and a pointer to --help on stderr, exit 2; --help: `usage` on
  // stdout, exit 0).
  // Returns the exit code to stop with, or nullopt to go on.
  std::optional<int> ParseOrExit(const char* usage);

  const std::vector<std::string>& positionals() const { return positionals_; }
  const std::vector<std::string>& after_dashdash() const { return after_dashdash_; }
  bool saw_dashdash() const { return saw_dashdash_; }
  const std::string& error() const { return error_; }

  // Parses a byte count: digits with an optional decimal part and an optional K/M/G/T suffix
  // (powers of 1024; `1.5G`, `512MiB`, `64M`), rounded down to a whole byte. Returns nullopt on
  // anything else, leading or trailing spaces and hex included.
  static std::optional<uint64_t> ParseBytes(const std::string& text);
  // Parses a fraction: a decimal number (`0.3`) or a percentage (`30%` = 0.30), between `lo` and
  // `hi`. Hex floats, exponents, spaces, inf and nan are refused (nullopt).
  static std::optional<double> ParseFraction(const std::string& text, double lo = 0.0,
                                             double hi = 1.0);
  // The message of a usage error: "fragscope COMMAND: MESSAGE (fragscope COMMAND --help)".
  static std::string UsageError(const std::string& command, const std::string& message);

 private:
  struct Spec {
    std::string long_name, short_name;
    std::string* value = nullptr;
    bool* flag = nullptr;
  };
  const Spec* Find(const std::string& name) const;

  std::string command_;
  std::vector<std::string> args_;
  std::vector<Spec> specs_;
  std::vector<std::string> positionals_;
  std::vector<std::string> after_dashdash_;
  bool saw_dashdash_ = false;
  bool command_follows_ = false;
  std::string error_;
};

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_ARG_READER_H_
