// The command line as a user meets it: every installed binary's --version and --help, `run`
// without `--`, one-line usage errors, what `run` says when nothing was measured, traces read
// from a pipe, and the gate's output for CI (JUnit, GitHub Actions annotations and summary).
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace {

using fragscope::testing::Count;
using fragscope::testing::Result;
using fragscope::testing::Shell;
using fragscope::testing::Slurp;

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

class CommandLine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/fragscope-command-line-XXXXXX";
    dir_ = mkdtemp(tmpl);
    // The demo on a 4 GiB fake GPU, without `--`.
    demo_ = Shell("FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M " + Cli() + " run -o " +
                  Trace() + " --quiet " + FRAGSCOPE_DEMO_BIN);
  }
  static void TearDownTestSuite() { std::system(("rm -rf " + dir_).c_str()); }
  static std::string Cli() { return FRAGSCOPE_CLI_BIN; }
  static std::string Trace() { return dir_ + "/demo.fst"; }
  static std::string dir_;
  static Result demo_;
};
std::string CommandLine::dir_;
Result CommandLine::demo_;

TEST_F(CommandLine, EveryBinaryAnswersVersionAndHelpOnStdout) {
  const std::string quiet_stderr = " 2>/dev/null";
  for (const std::string bin : {FRAGSCOPE_CLI_BIN, FRAGSCOPE_COLLECTOR_BIN, FRAGSCOPE_DUMP_BIN}) {
    Result version = Shell(bin + " --version" + quiet_stderr);
    EXPECT_EQ(version.exit_code, 0) << bin << ": " << version.output;
    EXPECT_NE(version.output.find(FRAGSCOPE_VERSION), std::string::npos) << bin << version.output;
    Result help = Shell(bin + " --help" + quiet_stderr);
    EXPECT_EQ(help.exit_code, 0) << bin << ": " << help.output;
    EXPECT_NE(help.output.find("usage:"), std::string::npos) << bin << ": " << help.output;
  }
  for (const char* sub :
       {"run", "attach", "top", "report", "gate", "import", "export", "symbolize", "torch-setup"}) {
    Result help = Shell(Cli() + " " + sub + " --help" + quiet_stderr);
    EXPECT_EQ(help.exit_code, 0) << sub << ": " << help.output;
    EXPECT_NE(help.output.find(std::string("usage: fragscope ") + sub), std::string::npos)
        << sub << ": " << help.output;
  }
}

TEST_F(CommandLine, RunTakesTheCommandWithoutDashDash) {
  EXPECT_EQ(demo_.exit_code, 1) << "the demo's own status: " << demo_.output;
  EXPECT_NE(demo_.output.find("trace written to " + Trace()), std::string::npos) << demo_.output;
  // Options after CMD are CMD's: `sh -c 'exit 7' --quiet` passes --quiet to sh.
  Result theirs = Shell(Cli() + " run sh -c 'exit 7' --quiet");
  EXPECT_EQ(theirs.exit_code, 7) << theirs.output;
}

TEST_F(CommandLine, AUsageErrorIsOneLineWithAHint) {
  Result r = Shell(Cli() + " report " + Trace() + " --fromat json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "fragscope report: unknown option --fromat; did you mean --format? (fragscope report "
            "--help)\n");
  Result gate = Shell(Cli() + " gate " + Trace() + " --max-fragmentation 0x1p-2");
  EXPECT_EQ(gate.exit_code, 2) << gate.output;
  EXPECT_EQ(Count(gate.output, "\n"), 1) << gate.output;
  EXPECT_NE(gate.output.find("'0x1p-2'"), std::string::npos) << gate.output;
  Result command = Shell(Cli() + " reprot " + Trace());
  EXPECT_EQ(command.exit_code, 2) << command.output;
  EXPECT_EQ(command.output,
            "fragscope: unknown command 'reprot'; did you mean report? (fragscope --help)\n");
}

TEST_F(CommandLine, SizesAndFractionsTakeUnitsAndPercentages) {
  // 30% is 0.30: the demo's 96 % fragmentation at its OOM fails it, as 0.30 does.
  Result percent = Shell(Cli() + " gate " + Trace() + " --max-fragmentation 30% --min-cached 0.5G");
  EXPECT_EQ(percent.exit_code, 1) << percent.output;
  EXPECT_NE(percent.output.find("> limit 0.300"), std::string::npos) << percent.output;
  Result spaces = Shell(Cli() + " gate " + Trace() + " --max-fragmentation 0.3 --min-cached ' 1G'");
  EXPECT_EQ(spaces.exit_code, 2) << spaces.output;
  EXPECT_NE(spaces.output.find("' 1G' is not a byte count"), std::string::npos) << spaces.output;
}

TEST_F(CommandLine, RunSaysWhenTheProgramMadeNoCudaCallOrCouldNotRun) {
  Result none = Shell(Cli() + " run true");
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("'true' made no CUDA call"), std::string::npos) << none.output;
  EXPECT_NE(none.output.find("nothing to report"), std::string::npos) << none.output;
  EXPECT_EQ(none.output.find("did not load"), std::string::npos) << none.output;

  Result missing = Shell(Cli() + " run -- no-such-program-fragscope-test");
  EXPECT_EQ(missing.exit_code, 127) << missing.output;
  EXPECT_EQ(missing.output,
            "fragscope run: cannot run 'no-such-program-fragscope-test': No such file or "
            "directory (not found on PATH)\n");
}

TEST_F(CommandLine, ReportAndDumpReadATraceFromAPipe) {
  Result file = Shell(Cli() + " report " + Trace() + " --format json 2>/dev/null");
  ASSERT_EQ(file.exit_code, 0) << file.output;
  Result piped = Shell("cat " + Trace() + " | " + Cli() + " report - --format json 2>/dev/null");
  EXPECT_EQ(piped.exit_code, 0) << piped.output.substr(0, 2000);
  EXPECT_EQ(piped.output, file.output);
  // A named pipe, as `report <(zcat trace.fst.gz)` gives one.
  const std::string fifo_path = dir_ + "/trace.fifo";
  ASSERT_EQ(mkfifo(fifo_path.c_str(), 0600), 0);
  Result fifo = Shell("(cat " + Trace() + " > " + fifo_path + " &); " + Cli() + " report " +
                      fifo_path + " --format json 2>/dev/null");
  EXPECT_EQ(fifo.exit_code, 0) << fifo.output.substr(0, 2000);
  EXPECT_EQ(fifo.output, file.output);
  Result dump = Shell(std::string(FRAGSCOPE_DUMP_BIN) + " " + Trace());
  Result dump_piped = Shell("cat " + Trace() + " | " + FRAGSCOPE_DUMP_BIN + " -");
  EXPECT_EQ(dump_piped.exit_code, 0) << dump_piped.output.substr(0, 2000);
  // The first line names the input; the events are the same.
  EXPECT_EQ(dump_piped.output.substr(dump_piped.output.find('\n')),
            dump.output.substr(dump.output.find('\n')));
  Result empty = Shell("printf '' | " + Cli() + " report -");
  EXPECT_EQ(empty.exit_code, 3) << empty.output;
  EXPECT_NE(empty.output.find("stdin"), std::string::npos) << empty.output;
}

// `script` (util-linux) runs a command on a pseudo-terminal: stdout is then a terminal, as when a
// user types the command. -e passes the command's exit status through.
std::string OnATerminal(const std::string& command) {
  std::string quoted;
  for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return "script -eqc '" + quoted + "' /dev/null </dev/null";
}

TEST_F(CommandLine, HtmlIsNotWrittenToATerminalButIsToAPipe) {
  Result terminal = Shell(OnATerminal(Cli() + " report " + Trace() + " --format html"));
  EXPECT_EQ(terminal.exit_code, 2) << terminal.output.substr(0, 2000);
  EXPECT_NE(terminal.output.find("HTML to a terminal is unreadable: add -o report.html"),
            std::string::npos)
      << terminal.output.substr(0, 2000);
  EXPECT_EQ(terminal.output.find("<!DOCTYPE html>"), std::string::npos);
  // Text is still for the terminal.
  Result text = Shell(OnATerminal(Cli() + " report " + Trace()));
  EXPECT_EQ(text.exit_code, 0) << text.output.substr(0, 2000);
  // To a pipe or a redirect the page is written as asked.
  Result piped = Shell(Cli() + " report " + Trace() + " --format html 2>/dev/null | head -c 4096");
  EXPECT_NE(piped.output.find("<!DOCTYPE html>"), std::string::npos) << piped.output.substr(0, 500);
  const std::string page = dir_ + "/redirected.html";
  Result redirected = Shell(Cli() + " report " + Trace() + " --format html > " + page);
  EXPECT_EQ(redirected.exit_code, 0) << redirected.output;
  EXPECT_NE(Slurp(page).find("</html>"), std::string::npos);
}

TEST_F(CommandLine, GateGivesCiOneCaseAndOneAnnotationPerCheckAndDevice) {
  const std::string junit = dir_ + "/gate.xml", summary = dir_ + "/summary.md";
  std::ofstream(summary) << "earlier step\n";
  Result r =
      Shell("GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY=" + summary + " " + Cli() + " gate " +
            Trace() + " --max-fragmentation 0.30 --min-cached 256M --at all --junit " + junit);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string xml = Slurp(junit);
  // Fragmentation on device 0 is the one check: one test case, however many samples broke it.
  EXPECT_EQ(Count(xml, "<testcase"), 1) << xml;
  EXPECT_NE(xml.find("name=\"device 0 fragmentation\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("fragmentation 0.960 &gt; limit 0.300"), std::string::npos) << xml;
  // The first line is the worst violation (the OOM's 96 %), not the first sample over the limit.
  EXPECT_NE(FirstLine(r.output).find("fragscope gate: FAILED: device 0 fragmentation 0.960"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(Count(r.output, "::error title=fragscope gate%3A device 0 fragmentation::"), 1)
      << r.output;
  const std::string md = Slurp(summary);
  EXPECT_EQ(md.rfind("earlier step\n", 0), 0u) << "appended, not overwritten: " << md;
  EXPECT_NE(md.find("| check | device | limit | worst value | at | result |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| fragmentation | 0 | 0.300 | 0.960 |"), std::string::npos) << md;
  EXPECT_NE(md.find("**FAIL**"), std::string::npos) << md;

  // Outside GitHub Actions: no workflow commands.
  Result plain = Shell(Cli() + " gate " + Trace() + " --max-fragmentation 0.30 --at all");
  EXPECT_EQ(plain.output.find("::error"), std::string::npos) << plain.output;
}

}  // namespace
