// fragscope-dump as a user runs it: its text, and its exit codes on bad input.
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "fragscope.pb.h"
#include "fragscope/trace/frame_writer.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

struct DumpRun {
  int exit_code;
  std::string out;
};

DumpRun RunDump(const std::string& args) {
  std::string cmd = std::string(FRAGSCOPE_DUMP_BIN) + " " + args + " 2>&1";
  DumpRun run{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) run.out.append(buf, n);
  int status = pclose(p);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string TempPath(const std::string& name) {
  return std::string("/tmp/fragscope-dump-test-") + std::to_string(getpid()) + "-" + name;
}

TEST(DumpTool, PrintsOneLinePerEventAndTotals) {
  std::string path = TempPath("ok.fst");
  {
    auto w = FrameWriter::CreateFile(path, TraceCompression::kNone);  // cut by byte below
    ASSERT_TRUE(w.ok());
    v1::Frame f;
    f.mutable_hello()->set_pid(77);
    ASSERT_TRUE(w->Write(f).ok());
    f.Clear();
    auto* a = f.mutable_alloc();
    a->set_api(v1::API_cudaMalloc);
    a->set_address(0x7f0000200000);
    a->set_size(4096);
    a->set_seq(1);
    ASSERT_TRUE(w->Write(f).ok());
    f.Clear();
    auto* m = f.mutable_map();
    m->set_api(v1::API_cuMemMap);
    m->set_op(v1::MapEvent::OP_MAP);
    m->set_address(0x7f0000400000);
    m->set_size(2 << 20);
    m->set_handle(0x10);
    ASSERT_TRUE(w->Write(f).ok());
    f.Clear();
    auto* stack = f.mutable_symbolized_stack();  // a converted stream's stack, by name
    stack->set_id(5);
    auto* frame = stack->add_frames();
    frame->set_function("forward");
    frame->set_file("model.py");
    frame->set_line(42);
    ASSERT_TRUE(w->Write(f).ok());
    f.Clear();
    f.mutable_mark()->set_label("PyTorch blocks synced (OOM)");
    f.mutable_mark()->set_seq(2);
    f.mutable_mark()->set_blocks_synced(true);
    ASSERT_TRUE(w->Write(f).ok());
    f.Clear();
    f.mutable_drops()->set_total_dropped(3);
    ASSERT_TRUE(w->Write(f).ok());
    ASSERT_TRUE(w->Close().ok());
  }
  DumpRun run = RunDump(path);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("cudaMalloc ptr=0x7f0000200000 size=4096 dev=0 stream=0x0 result=0"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("cuMemMap op=map "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("handle=0x10"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("# symbolized stack id=5 frames=1 first=\"forward (model.py:42)\"\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("seq=2 tid=0 blocks_synced=1\n"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("unknown frame"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\nevents=3 drops=3\n"), std::string::npos) << run.out;
  std::remove(path.c_str());
}

TEST(DumpTool, UsageAndBadInputExitCodes) {
  EXPECT_EQ(RunDump("").exit_code, 2);
  DumpRun missing = RunDump("/nonexistent/trace.fst");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_NE(missing.out.find("/nonexistent/trace.fst"), std::string::npos) << missing.out;

  std::string path = TempPath("trunc.fst");
  {
    auto w = FrameWriter::CreateFile(path, TraceCompression::kNone);  // cut by byte below
    ASSERT_TRUE(w.ok());
    v1::Frame f;
    f.mutable_alloc()->set_api(v1::API_cuMemAlloc_v2);
    f.mutable_alloc()->set_size(123);
    ASSERT_TRUE(w->Write(f).ok());
    ASSERT_TRUE(w->Write(f).ok());
    ASSERT_TRUE(w->Close().ok());
  }
  // Chop the last byte: the first event must still print, then a warning and exit 3.
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 1));
  DumpRun truncated = RunDump(path);
  EXPECT_EQ(truncated.exit_code, 3);
  EXPECT_NE(truncated.out.find("cuMemAlloc_v2 "), std::string::npos) << truncated.out;
  EXPECT_NE(truncated.out.find("events=1 drops=0"), std::string::npos) << truncated.out;
  EXPECT_NE(truncated.out.find("truncated"), std::string::npos) << truncated.out;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace fragscope
