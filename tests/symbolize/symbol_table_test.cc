// A SymbolTable made from a loaded module (symbol_table_builder.h) travels through the model into
// a report's symbolizer: it names the frames once the module file is gone, only for the module
// with the build-id it was read from, and the report's notes say where names came from.
#include <dlfcn.h>

#include <cstring>
#include <string>

#include "fragscope/model/process_model.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"
#include "fragscope/symbolize/symbol_table_builder.h"
#include "gtest/gtest.h"
#include "loaded_module.h"

namespace fragscope {
namespace {

class SymbolTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    handle_ = dlopen(SAMPLE_MODULE_PATH, RTLD_NOW);
    ASSERT_NE(handle_, nullptr) << dlerror();
    pc_ = reinterpret_cast<uint64_t>(dlsym(handle_, "fragscope_sample_function")) + 1;
    module_ = FindLoaded("libfragscope_sample_module");
    ASSERT_FALSE(module_.path.empty());
    build_id_ = module_.build_id;
    ASSERT_FALSE(build_id_.empty()) << "the test module is linked with a build-id";
  }
  void TearDown() override {
    if (handle_) dlclose(handle_);
  }
  // The stream as the agent writes it, with `path` and `build_id` for the module.
  std::vector<v1::Frame> Stream(const std::string& path, const std::string& build_id) const {
    std::vector<v1::Frame> frames(2);
    v1::Module* m = frames[0].mutable_module_map()->add_modules();
    m->set_path(path);
    m->set_build_id(build_id);
    m->set_load_address(module_.bias);
    m->set_size(module_.size);
    v1::Stack* s = frames[1].mutable_stacks()->add_stacks();
    s->set_id(1);
    s->add_pcs(pc_);
    return frames;
  }
  // A summary that lists stack 1 (a failed allocation there).
  static ModelSummary Summarize(const std::vector<v1::Frame>& frames) {
    ProcessModel model{ModelOptions{}};
    for (const v1::Frame& f : frames) model.Apply(f);
    v1::Frame failed;
    failed.mutable_failed()->set_seq(1);
    failed.mutable_failed()->set_stack_id(1);
    failed.mutable_failed()->set_size(1 << 20);
    failed.mutable_failed()->set_result(2);
    model.Apply(failed);
    return model.Summarize();
  }

  void* handle_ = nullptr;
  uint64_t pc_ = 0;
  LoadedModule module_;
  std::string build_id_;
};

TEST_F(SymbolTableTest, StoredSymbolsNameFramesOfAModuleThatIsGone) {
  std::vector<v1::Frame> frames = Stream(module_.path, build_id_);
  ProcessModel model{ModelOptions{}};
  for (const v1::Frame& f : frames) model.Apply(f);
  std::vector<v1::Frame> table = SymbolTableFramesFor(model);
  ASSERT_EQ(table.size(), 1u);
  ASSERT_EQ(table[0].symbol_table().modules_size(), 1);
  EXPECT_EQ(table[0].symbol_table().modules(0).pcs(0).pc(), pc_);
  // Elsewhere: the module is not at its path any more.
  std::vector<v1::Frame> moved = Stream("/nonexistent/libfragscope_sample_module.so", build_id_);
  moved.push_back(table[0]);
  moved.back().mutable_symbol_table()->mutable_modules(0)->set_path(
      "/nonexistent/libfragscope_sample_module.so");
  const ModelSummary summary = Summarize(moved);
  ASSERT_NE(summary.stored_symbols, nullptr);
  DwarfSymbolizer symbolizer(summary);
  const std::vector<SymbolizedFrame> named = symbolizer.Symbolize(pc_);
  ASSERT_FALSE(named.empty());
  EXPECT_EQ(named[0].function, "fragscope_sample_function");
  EXPECT_NE(named[0].file.find("sample_module.cc"), std::string::npos);
  EXPECT_GT(named[0].line, 0u);
  EXPECT_EQ(named[0].module_offset, pc_ - module_.bias);
  const std::vector<SymbolSourceNote> notes = symbolizer.SymbolSourceNotes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_FALSE(notes[0].build_id_differs);
  EXPECT_TRUE(notes[0].from_stored_symbols);
  EXPECT_NE(DescribeSymbolSource(notes[0]).find("is not on this machine"), std::string::npos);
}

TEST_F(SymbolTableTest, SymbolsOfAnotherBuildAreIgnored) {
  ProcessModel model{ModelOptions{}};
  for (const v1::Frame& f : Stream(module_.path, build_id_)) model.Apply(f);
  std::vector<v1::Frame> table = SymbolTableFramesFor(model);
  ASSERT_EQ(table.size(), 1u);
  // The trace says another build ran: the table (read from this build) names nothing.
  std::vector<v1::Frame> other = Stream("/nonexistent/lib.so", std::string(20, '\x42'));
  other.push_back(table[0]);
  const ModelSummary summary = Summarize(other);
  DwarfSymbolizer symbolizer(summary);
  EXPECT_TRUE(symbolizer.Symbolize(pc_)[0].function.empty());
  ASSERT_EQ(symbolizer.SymbolSourceNotes().size(), 1u);
  EXPECT_FALSE(symbolizer.SymbolSourceNotes()[0].from_stored_symbols);
  EXPECT_NE(DescribeSymbolSource(symbolizer.SymbolSourceNotes()[0]).find("module+offset"),
            std::string::npos);
  // Nor does a module whose file here has another build-id get names from that file.
  std::vector<v1::Frame> rebuilt = Stream(module_.path, std::string(20, '\x42'));
  EXPECT_TRUE(BuildSymbolTableFrames(
                  {{module_.path, std::string(40, '4'), module_.bias, module_.size}}, {pc_})
                  .empty());
  DwarfSymbolizer differs(Summarize(rebuilt));
  ASSERT_EQ(differs.SymbolSourceNotes().size(), 1u);
  EXPECT_TRUE(differs.SymbolSourceNotes()[0].build_id_differs);
  EXPECT_TRUE(differs.Symbolize(pc_)[0].function.empty());
}

}  // namespace
}  // namespace fragscope
