// A small reader of subcommand arguments: `--name value`, `--name=value`, `-o value`, flags,
// positionals and `--` (everything after it is passed through untouched). Errors name the
// argument and the command's usage, and map to exit code 2.
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
  // Returns false and fills error() on an unknown option, a missing value or a stray `--`.
  bool Parse();
  // What every command does first: declares --help, parses, and handles the two early exits
  // (a bad argument: message and `usage` on stderr, exit 2; --help: `usage` on stdout, exit 0).
  // Returns the exit code to stop with, or nullopt to go on.
  std::optional<int> ParseOrExit(const char* usage);

  const std::vector<std::string>& positionals() const { return positionals_; }
  const std::vector<std::string>& after_dashdash() const { return after_dashdash_; }
  bool saw_dashdash() const { return saw_dashdash_; }
  const std::string& error() const { return error_; }

  // Parses a byte count with an optional K/M/G/T suffix (powers of 1024). Returns nullopt on
  // anything else.
  static std::optional<uint64_t> ParseBytes(const std::string& text);

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
  std::string error_;
};

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_ARG_READER_H_
