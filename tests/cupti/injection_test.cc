// libfragscope_cupti.so loads anywhere (libcupti and libcuda are dlopen()ed, never linked), and
// InitializeInjection stays out of the way where it cannot work. Each case runs in a forked
// child, since InitializeInjection acts once per process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace {

// Runs InitializeInjection in a child with FRAGSCOPE_OUTPUT = `output` (unset if empty);
// returns its return value, or -1 if the library or symbol is missing.
int InjectInChild(const std::string& output) {
  pid_t pid = fork();
  if (pid == 0) {
    unsetenv("FRAGSCOPE_SOCKET");
    if (output.empty()) {
      unsetenv("FRAGSCOPE_OUTPUT");
    } else {
      setenv("FRAGSCOPE_OUTPUT", output.c_str(), 1);
    }
    void* lib = dlopen(FRAGSCOPE_CUPTI_LIB, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) _exit(255);
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "InitializeInjection"));
    if (init == nullptr) _exit(255);
    _exit(init());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return -2;
  return WEXITSTATUS(status) == 255 ? -1 : WEXITSTATUS(status);
}

TEST(CuptiInjection, ExportsInitializeInjectionAndLinksNoCuda) {
  void* lib = dlopen(FRAGSCOPE_CUPTI_LIB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  EXPECT_NE(dlsym(lib, "InitializeInjection"), nullptr);
  // Nothing else leaks out (hidden visibility): the traced program's symbols stay its own.
  EXPECT_EQ(dlsym(lib,
                  "_ZN9fragscope5cupti17TranslateCallbackE20CUpti_CallbackDomainjRK18"
                  "CUpti_CallbackDataRNS0_15CallbackNestingE"),
            nullptr);
}

TEST(CuptiInjection, WithoutAnOutputItDoesNothing) { EXPECT_EQ(InjectInChild(""), 1); }

// No GPU driver here: whether libcupti is missing or cuptiSubscribe fails for want of a driver,
// the backend says so on stderr, returns, and creates no trace file.
TEST(CuptiInjection, WithoutADriverItStaysOffAndWritesNothing) {
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr) {
    GTEST_SKIP() << "a CUDA driver is installed here (scripts/gpu-check covers the backend)";
  }
  std::string path = ::testing::TempDir() + "cupti_trace_" + std::to_string(getpid()) + ".fst";
  unlink(path.c_str());
  EXPECT_EQ(InjectInChild(path), 1);
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0) << "a trace file was created without a driver";
  unlink(path.c_str());
}

}  // namespace
