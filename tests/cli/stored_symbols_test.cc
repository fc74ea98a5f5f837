// Symbols travel with the trace: a trace written by `fragscope run` (or completed by `fragscope
// symbolize`) names the demo's functions and file:line after its binary is deleted or rebuilt;
// a module on this machine with another build-id is said so and never read; bad input to
// `symbolize` and `--debug-dir` fails with a message and exit 2 or 3.
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "shell_command.h"

namespace {

using nlohmann::json;

using fragscope::testing::Result;
using fragscope::testing::Shell;
using fragscope::testing::Slurp;

std::string Fragscope() { return FRAGSCOPE_CLI_BIN; }
const std::string kDemoEnv = "FAKECUDA_CAPACITY=4G FAKECUDA_CTX_OVERHEAD=300M ";

class StoredSymbols : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fragscope-symbols-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    // The demo runs from a copy this test deletes or replaces afterwards.
    ASSERT_EQ(
        Shell("mkdir -p " + dir_ + "/app && cp " + FRAGSCOPE_DEMO_BIN + " " + App()).exit_code, 0);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string App() const { return dir_ + "/app/fragmenting_training"; }

  // Traced by `fragscope run -o`: the embedded collector stores the symbols.
  std::string TraceWithRun() {
    const std::string trace = dir_ + "/run.fst";
    Result r = Shell(kDemoEnv + Fragscope() + " run -o " + trace + " -- " + App());
    EXPECT_EQ(r.exit_code, 1) << r.output;  // the demo dies of its second OOM
    return trace;
  }
  // Traced by the agent alone (FRAGSCOPE_OUTPUT): no symbols in the file.
  std::string TraceWithAgentOnly() {
    const std::string trace = dir_ + "/raw.fst";
    Shell(kDemoEnv + "LD_PRELOAD=" + FRAGSCOPE_AGENT_LIB + " FRAGSCOPE_OUTPUT=" + trace + " " +
          App());
    return trace;
  }
  json ReportJson(const std::string& trace, const std::string& extra = "") {
    Result r = Shell(Fragscope() + " report " + trace + " --format json -o " + dir_ +
                     "/report.json " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json::parse(Slurp(dir_ + "/report.json"), nullptr, false);
  }

  // The build-id the report of `raw` names for its one missing module ("" if not so).
  std::string MissingModuleBuildId(const std::string& raw) {
    const json report = ReportJson(raw);
    if (report.is_discarded() || report["symbol_sources"].size() != 1) return "";
    return report["symbol_sources"][0]["build_id"].get<std::string>();
  }

  std::string dir_;
};

// The frames of the fragmentation OOM's stack that name a function in the demo's own source.
int DemoFramesWithFileAndLine(const json& report) {
  int n = 0;
  for (const json& f : report["ooms"][0]["stack"]) {
    const std::string file = f["file"].get<std::string>();
    if (file.find("fragmenting_training.cc") != std::string::npos && f["line"].get<int>() > 0 &&
        !f["function"].get<std::string>().empty()) {
      ++n;
    }
  }
  return n;
}

bool NamesLogits(const json& report) {
  return report["ooms"][0]["stack"].dump().find("Logits") != std::string::npos;
}

TEST_F(StoredSymbols, ARunTraceKeepsNamesAndLinesAfterTheBinaryIsDeleted) {
  const std::string trace = TraceWithRun();
  EXPECT_NE(Shell(std::string(FRAGSCOPE_DUMP_BIN) + " " + trace).output.find("# symbol table"),
            std::string::npos);
  ASSERT_EQ(std::remove(App().c_str()), 0);
  const json report = ReportJson(trace);
  ASSERT_FALSE(report.is_discarded());
  ASSERT_FALSE(report["ooms"].empty()) << report.dump(2);
  EXPECT_TRUE(NamesLogits(report)) << report["ooms"][0]["stack"].dump(2);
  EXPECT_GT(DemoFramesWithFileAndLine(report), 0) << report["ooms"][0]["stack"].dump(2);
  // The report says where the names came from.
  ASSERT_EQ(report["symbol_sources"].size(), 1u) << report["symbol_sources"].dump(2);
  const json& source = report["symbol_sources"][0];
  EXPECT_EQ(source["module"], App());
  EXPECT_EQ(source["problem"], "missing");
  EXPECT_EQ(source["frames_from"], "stored_symbols");
  Result text = Shell(Fragscope() + " report " + trace);
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("Note: symbols: " + App()), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("fragmenting_training.cc:"), std::string::npos) << text.output;
}

TEST_F(StoredSymbols, ARebuiltBinaryIsReportedAndNeverReadForNames) {
  const std::string run_trace = TraceWithRun();
  const std::string raw_trace = TraceWithAgentOnly();
  // Another build at the same path: any ELF with another build-id.
  ASSERT_EQ(Shell("cp /bin/true " + App()).exit_code, 0);
  const json stored = ReportJson(run_trace);
  ASSERT_FALSE(stored.is_discarded());
  ASSERT_EQ(stored["symbol_sources"].size(), 1u) << stored["symbol_sources"].dump(2);
  const json& source = stored["symbol_sources"][0];
  EXPECT_EQ(source["problem"], "build_id_differs");
  EXPECT_NE(source["found_build_id"], source["build_id"]);
  EXPECT_FALSE(source["found_build_id"].get<std::string>().empty());
  EXPECT_EQ(source["frames_from"], "stored_symbols");
  EXPECT_TRUE(NamesLogits(stored));
  EXPECT_GT(DemoFramesWithFileAndLine(stored), 0);

  // Without stored symbols: module+offset, and the report says why.
  const json bare = ReportJson(raw_trace);
  ASSERT_FALSE(bare.is_discarded());
  ASSERT_EQ(bare["symbol_sources"].size(), 1u) << bare["symbol_sources"].dump(2);
  EXPECT_EQ(bare["symbol_sources"][0]["problem"], "build_id_differs");
  EXPECT_EQ(bare["symbol_sources"][0]["frames_from"], "module_offset");
  EXPECT_FALSE(NamesLogits(bare)) << bare["ooms"][0]["stack"].dump(2);
  EXPECT_EQ(DemoFramesWithFileAndLine(bare), 0);
  EXPECT_NE(bare["ooms"][0]["stack"].dump().find("fragmenting_training+0x"), std::string::npos);
  Result text = Shell(Fragscope() + " report " + raw_trace);
  EXPECT_NE(text.output.find("not " + bare["symbol_sources"][0]["build_id"].get<std::string>() +
                             " that ran"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("module+offset"), std::string::npos) << text.output;
}

TEST_F(StoredSymbols, SymbolizeCompletesAnAgentOnlyTrace) {
  const std::string raw = TraceWithAgentOnly();
  const std::string completed = dir_ + "/completed.fst";
  Result r = Shell(Fragscope() + " symbolize " + raw + " -o " + completed);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // In place as well; a second run finds nothing left to add and leaves the file alone.
  const std::string in_place = dir_ + "/in-place.fst";
  ASSERT_EQ(Shell("cp " + raw + " " + in_place).exit_code, 0);
  EXPECT_EQ(Shell(Fragscope() + " symbolize " + in_place).exit_code, 0);
  EXPECT_EQ(Slurp(in_place), Slurp(completed));
  r = Shell(Fragscope() + " symbolize " + in_place);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("unchanged"), std::string::npos) << r.output;
  EXPECT_EQ(Slurp(in_place), Slurp(completed));
  // Every byte the agent wrote is still there, first.
  const std::string before = Slurp(raw), after = Slurp(completed);
  ASSERT_GT(after.size(), before.size());
  EXPECT_EQ(after.substr(16, before.size() - 16), before.substr(16));

  ASSERT_EQ(std::remove(App().c_str()), 0);
  const json report = ReportJson(completed);
  ASSERT_FALSE(report.is_discarded());
  EXPECT_TRUE(NamesLogits(report)) << report["ooms"][0]["stack"].dump(2);
  EXPECT_GT(DemoFramesWithFileAndLine(report), 0);
  EXPECT_FALSE(NamesLogits(ReportJson(raw)));
  // Once the binary is gone, its frames cannot be named any more, and symbolize says so.
  r = Shell(Fragscope() + " symbolize " + raw + " -o " + dir_ + "/late.fst");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("module+offset"), std::string::npos) << r.output;
  EXPECT_FALSE(NamesLogits(ReportJson(dir_ + "/late.fst")));
}

TEST_F(StoredSymbols, DebugDirFindsTheDebugFileByBuildId) {
  const std::string raw = TraceWithAgentOnly();
  ASSERT_EQ(std::remove(App().c_str()), 0);
  const std::string id = MissingModuleBuildId(raw);
  ASSERT_GT(id.size(), 2u);
  const std::string debug = dir_ + "/debug/.build-id/" + id.substr(0, 2);
  ASSERT_EQ(Shell("mkdir -p " + debug + " && objcopy --only-keep-debug " + FRAGSCOPE_DEMO_BIN +
                  " " + debug + "/" + id.substr(2) + ".debug")
                .exit_code,
            0);
  const json after = ReportJson(raw, "--debug-dir " + dir_ + "/debug");
  ASSERT_FALSE(after.is_discarded());
  EXPECT_TRUE(NamesLogits(after)) << after["ooms"][0]["stack"].dump(2);
  EXPECT_GT(DemoFramesWithFileAndLine(after), 0);
  EXPECT_TRUE(after["symbol_sources"].empty()) << after["symbol_sources"].dump(2);
}

// With DEBUGINFOD_URLS set, a module that is gone is fetched by build-id from a debuginfod
// server (here a local HTTP server holding /buildid/ID/debuginfo, the protocol's path).
TEST_F(StoredSymbols, DebuginfodServesTheDebugFileByBuildId) {
  if (Shell("test -e /usr/lib/x86_64-linux-gnu/libdebuginfod.so.1 -o "
            "-e /usr/lib/aarch64-linux-gnu/libdebuginfod.so.1 -o -e /usr/lib64/libdebuginfod.so.1")
          .exit_code != 0) {
    GTEST_SKIP() << "elfutils' libdebuginfod.so.1 is not installed (Debian: libdebuginfod1)";
  }
  const std::string raw = TraceWithAgentOnly();
  ASSERT_EQ(std::remove(App().c_str()), 0);
  const std::string id = MissingModuleBuildId(raw);
  ASSERT_GT(id.size(), 2u);
  const std::string served = dir_ + "/server/buildid/" + id;
  ASSERT_EQ(Shell("mkdir -p " + served + " && objcopy --only-keep-debug " + FRAGSCOPE_DEMO_BIN +
                  " " + served + "/debuginfo")
                .exit_code,
            0);
  // The server binds a free port and writes it to a file before serving.
  const std::string server_py = dir_ + "/server.py";
  std::ofstream(server_py) << "import functools, http.server, sys\n"
                              "h = functools.partial(http.server.SimpleHTTPRequestHandler,\n"
                              "                      directory=sys.argv[1])\n"
                              "s = http.server.HTTPServer(('127.0.0.1', 0), h)\n"
                              "open(sys.argv[2], 'w').write(str(s.server_port))\n"
                              "s.serve_forever()\n";
  const std::string port_file = dir_ + "/port";
  ASSERT_EQ(Shell("python3 " + server_py + " " + dir_ + "/server " + port_file +
                  " >/dev/null 2>&1 & echo $! > " + dir_ +
                  "/server.pid; "
                  "for i in $(seq 100); do test -s " +
                  port_file +
                  " && exit 0; sleep 0.1; done; "
                  "exit 1")
                .exit_code,
            0);
  const std::string env = "DEBUGINFOD_URLS=http://127.0.0.1:" + Slurp(port_file) +
                          " DEBUGINFOD_CACHE_PATH=" + dir_ + "/cache DEBUGINFOD_TIMEOUT=10 ";
  Result r =
      Shell(env + Fragscope() + " report " + raw + " --format json -o " + dir_ + "/fetched.json");
  Shell("kill $(cat " + dir_ + "/server.pid)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json after = json::parse(Slurp(dir_ + "/fetched.json"), nullptr, false);
  ASSERT_FALSE(after.is_discarded());
  EXPECT_TRUE(NamesLogits(after)) << after["ooms"][0]["stack"].dump(2);
  EXPECT_GT(DemoFramesWithFileAndLine(after), 0);
  EXPECT_TRUE(after["symbol_sources"].empty()) << after["symbol_sources"].dump(2);
}

TEST_F(StoredSymbols, BadInputAndWrongFlagsFailWithAReason) {
  const std::string raw = TraceWithAgentOnly();
  const std::string bytes = Slurp(raw);
  ASSERT_GT(bytes.size(), 100u);
  // Cut inside its last frame (the End frame is a few bytes): kept up to the frame before.
  const std::string cut = dir_ + "/cut.fst";
  std::ofstream(cut, std::ios::binary).write(bytes.data(), bytes.size() - 3);
  Result r = Shell(Fragscope() + " symbolize " + cut + " -o " + dir_ + "/cut-symbols.fst");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("warning"), std::string::npos) << r.output;
  const json report = ReportJson(dir_ + "/cut-symbols.fst");
  ASSERT_FALSE(report.is_discarded());
  EXPECT_FALSE(report["process"]["stream_ended"].get<bool>());

  // A newer major version than this reader knows.
  std::string newer = bytes;
  newer[8] = 99;
  std::ofstream(dir_ + "/newer.fst", std::ios::binary).write(newer.data(), newer.size());
  r = Shell(Fragscope() + " symbolize " + dir_ + "/newer.fst");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("newer.fst"), std::string::npos) << r.output;
  EXPECT_EQ(Slurp(dir_ + "/newer.fst"), newer) << "a trace it cannot read is left alone";

  EXPECT_EQ(Shell(Fragscope() + " symbolize").exit_code, 2);
  EXPECT_EQ(Shell(Fragscope() + " symbolize " + raw + " --bogus").exit_code, 2);
  EXPECT_EQ(Shell(Fragscope() + " symbolize " + raw + " -o " + raw).exit_code, 2);
  r = Shell(Fragscope() + " report " + raw + " --debug-dir " + dir_ + "/no-such-folder");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no-such-folder is not a folder"), std::string::npos) << r.output;
  EXPECT_EQ(Shell(Fragscope() + " symbolize " + dir_ + "/missing.fst").exit_code, 3);
}

}  // namespace
