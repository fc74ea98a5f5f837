// The symbolizer resolves addresses in a real loaded module to function and file:line, and
// refuses to guess names when the module on disk is not the one recorded.
#include "fragscope/symbolize/module_symbolizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>

#include <cstring>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "loaded_module.h"

namespace fragscope {
namespace {

class ModuleSymbolizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    handle_ = dlopen(SAMPLE_MODULE_PATH, RTLD_NOW);
    ASSERT_NE(handle_, nullptr) << dlerror();
    fn_ = reinterpret_cast<uint64_t>(dlsym(handle_, "fragscope_sample_function"));
    ASSERT_NE(fn_, 0u);
    found_ = FindLoaded("libfragscope_sample_module");
    ASSERT_FALSE(found_.path.empty());
  }
  void TearDown() override {
    if (handle_) dlclose(handle_);
  }
  v1::ModuleMap Map(const std::string& build_id) const {
    v1::ModuleMap map;
    auto* m = map.add_modules();
    m->set_path(found_.path);
    m->set_load_address(found_.bias);
    m->set_size(found_.size);
    m->set_build_id(build_id);
    return map;
  }
  void* handle_ = nullptr;
  uint64_t fn_ = 0;
  LoadedModule found_;
};

TEST_F(ModuleSymbolizerTest, ResolvesFunctionFileAndLine) {
  ASSERT_FALSE(found_.build_id.empty()) << "the test module is linked with a build-id";
  ModuleSymbolizer symbolizer;
  symbolizer.AddModules(Map(found_.build_id));
  // A return address just past the first instruction of the function.
  const SourceLocation& loc = symbolizer.Symbolize(fn_ + 1);
  EXPECT_EQ(loc.function, "fragscope_sample_function");
  EXPECT_NE(loc.file.find("sample_module.cc"), std::string::npos) << loc.file;
  EXPECT_GT(loc.line, 0u);
  EXPECT_EQ(loc.module, found_.path);
  EXPECT_EQ(loc.offset, fn_ + 1 - found_.bias);
  EXPECT_NE(loc.ToString().find("fragscope_sample_function (/"), std::string::npos)
      << loc.ToString();
}

// Line numbers of the marked calls in sample_module.cc, read from the source so the test does
// not hard-code them.
uint32_t LineOf(const std::string& marker) {
  std::ifstream in(SAMPLE_MODULE_SOURCE);
  std::string text;
  for (uint32_t n = 1; std::getline(in, text); ++n) {
    if (text.find(marker) != std::string::npos) return n;
  }
  return 0;
}

TEST_F(ModuleSymbolizerTest, InlinedCallsListTheFunctionsTheyWereExpandedInto) {
  using Outer = void (*)();
  auto outer = reinterpret_cast<Outer>(dlsym(handle_, "fragscope_sample_outer"));
  ASSERT_NE(outer, nullptr);
  outer();
  void* ret = *static_cast<void**>(dlsym(handle_, "fragscope_sample_leaf_return"));
  ASSERT_NE(ret, nullptr);
  ModuleSymbolizer symbolizer;
  symbolizer.AddModules(Map(found_.build_id));
  const SourceLocation& loc = symbolizer.Symbolize(reinterpret_cast<uint64_t>(ret));
  EXPECT_NE(loc.function.find("SampleInner"), std::string::npos) << loc.ToString();
  EXPECT_EQ(loc.line, LineOf("FRAGSCOPE_INLINE_CALL_LINE"));
  ASSERT_EQ(loc.inlined_callers.size(), 1u);
  EXPECT_EQ(loc.inlined_callers[0].function, "fragscope_sample_outer");
  EXPECT_EQ(loc.inlined_callers[0].line, LineOf("FRAGSCOPE_OUTER_CALL_LINE"));
  EXPECT_NE(loc.inlined_callers[0].file.find("sample_module.cc"), std::string::npos);
}

TEST_F(ModuleSymbolizerTest, WrongBuildIdGivesOnlyModuleAndOffset) {
  ModuleSymbolizer symbolizer;
  symbolizer.AddModules(Map(std::string(20, '\x42')));
  const SourceLocation& loc = symbolizer.Symbolize(fn_ + 1);
  EXPECT_TRUE(loc.function.empty()) << loc.function;
  EXPECT_TRUE(loc.file.empty());
  EXPECT_EQ(loc.module, found_.path);
  EXPECT_NE(loc.ToString().find("+0x"), std::string::npos) << loc.ToString();
  EXPECT_EQ(loc.module_file, ModuleFile::kBuildIdDiffers);
  EXPECT_EQ(loc.found_build_id, found_.build_id);
}

TEST_F(ModuleSymbolizerTest, TheRecordedBuildIdMatchesTheFile) {
  ModuleSymbolizer symbolizer;
  symbolizer.AddModules(Map(found_.build_id));
  EXPECT_EQ(symbolizer.Symbolize(fn_ + 1).module_file, ModuleFile::kMatches);
}

// The module's path holds another build (or nothing); a debug folder holds the one that ran,
// under its own file name: that one is read. A debug folder with another build is not.
TEST_F(ModuleSymbolizerTest, DebugDirSuppliesTheFileWithTheRecordedBuildId) {
  char tmpl[] = "/tmp/fragscope-debug-dir-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string name = found_.path.substr(found_.path.rfind('/') + 1);
  std::ifstream in(found_.path, std::ios::binary);
  std::ofstream(dir + "/" + name + ".debug", std::ios::binary) << in.rdbuf();
  v1::ModuleMap map = Map(found_.build_id);
  map.mutable_modules(0)->set_path("/nonexistent/" + name);
  ModuleSymbolizer with_dir({dir});
  with_dir.AddModules(map);
  const SourceLocation& loc = with_dir.Symbolize(fn_ + 1);
  EXPECT_EQ(loc.module_file, ModuleFile::kMatches);
  EXPECT_EQ(loc.function, "fragscope_sample_function");
  EXPECT_EQ(loc.module, "/nonexistent/" + name);
  ModuleSymbolizer without_dir;
  without_dir.AddModules(map);
  EXPECT_EQ(without_dir.Symbolize(fn_ + 1).module_file, ModuleFile::kMissing);
  map.mutable_modules(0)->set_build_id(std::string(20, '\x42'));
  ModuleSymbolizer other_build({dir});
  other_build.AddModules(map);
  EXPECT_TRUE(other_build.Symbolize(fn_ + 1).function.empty());
  std::remove((dir + "/" + name + ".debug").c_str());
  rmdir(dir.c_str());
}

TEST_F(ModuleSymbolizerTest, AddressOutsideEveryModuleIsPrintedRaw) {
  ModuleSymbolizer symbolizer;
  symbolizer.AddModules(Map(found_.build_id));
  const SourceLocation& loc = symbolizer.Symbolize(0x10);
  EXPECT_TRUE(loc.module.empty());
  EXPECT_EQ(loc.ToString(), "0x10");
}

TEST(ModuleSymbolizer, MissingFileDoesNotCrash) {
  ModuleSymbolizer symbolizer;
  v1::ModuleMap map;
  auto* m = map.add_modules();
  m->set_path("/nonexistent/libgone.so");
  m->set_load_address(0x7f0000000000);
  m->set_size(0x10000);
  symbolizer.AddModules(map);
  const SourceLocation& loc = symbolizer.Symbolize(0x7f0000001234);
  EXPECT_EQ(loc.ToString(), "/nonexistent/libgone.so+0x1234");
}

}  // namespace
}  // namespace fragscope
