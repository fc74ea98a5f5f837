// Turns return addresses captured in a traced process into function, file and line, using the
// module map the agent shipped (path, build-id, load address). Runs in the collector, never in
// the traced process.
#ifndef FRAGSCOPE_SYMBOLIZE_MODULE_SYMBOLIZER_H_
#define FRAGSCOPE_SYMBOLIZE_MODULE_SYMBOLIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/symbolize/debuginfod_fetcher.h"

namespace fragscope {

// A function that an inlined call was expanded into, and where in it the call was written.
struct InlinedCaller {
  std::string function;
  std::string file;
  uint32_t line = 0;
};

// Where the symbols of a pc's module came from, or why there were none.
enum class ModuleFile {
  kNoModule,        // the pc lies in no module of the map
  kMatches,         // a file with the recorded build-id (or none was recorded) was read
  kMissing,         // no file with that path (nor in the debug folders) could be opened
  kBuildIdDiffers,  // the file at the path has another build-id, and no debug folder has one
};

// One resolved address. Fields the debug information does not give stay empty (line 0).
struct SourceLocation {
  uint64_t pc = 0;
  std::string module;    // path of the module containing pc; empty if none
  uint64_t offset = 0;   // pc - module load bias
  std::string function;  // demangled; empty when unknown
  std::string file;
  uint32_t line = 0;
  // When pc lies in inlined code: `function`/`file`/`line` name the inlined function and the
  // line in it; these are the functions it was inlined into, innermost first, each with the line
  // of the inlined call. Empty otherwise.
  std::vector<InlinedCaller> inlined_callers;
  ModuleFile module_file = ModuleFile::kNoModule;
  // With kBuildIdDiffers: the build-id (raw bytes) of the file found at the module's path.
  std::string found_build_id;

  // "function (file:line)", "function (module+0x1a2b)" or "module+0x1a2b" or "0x7f...".
  std::string ToString() const;
};

// Not thread-safe. Caches results per pc, so memory is O(distinct pcs). Opens each module file
// at most once; a module whose build-id differs from the one recorded (rebuilt since the trace
// was taken) is resolved only to module+offset, never to possibly wrong names.
class ModuleSymbolizer {
 public:
  // `debug_dirs`: folders searched, after the module's own path, for a file with the module's
  // build-id: in each, DIR/.build-id/xx/yyyy.debug (the layout of /usr/lib/debug and of
  // debuginfod's cache), then DIR/NAME.debug and DIR/NAME for the module's file NAME. A file is
  // used only when its build-id is the recorded one (so never for a module recorded without
  // one); a stripped module also finds its debug information there (elfutils' search of
  // .build-id and .gnu_debuglink names).
  explicit ModuleSymbolizer(std::vector<std::string> debug_dirs = {});
  ~ModuleSymbolizer();
  ModuleSymbolizer(const ModuleSymbolizer&) = delete;
  ModuleSymbolizer& operator=(const ModuleSymbolizer&) = delete;

  // Adds modules (later ModuleMap frames append, as dlopen adds modules).
  void AddModules(const v1::ModuleMap& map);
  // Resolves one return address; the reference stays valid until the next AddModules().
  const SourceLocation& Symbolize(uint64_t pc);

 private:
  struct ModuleEntry;
  ModuleEntry* FindModule(uint64_t pc);
  void Resolve(ModuleEntry& module, SourceLocation& loc);

  // Opens the module's file, or a file with its build-id in the debug folders, or one a
  // debuginfod server has for the build-id; sets its state.
  void OpenMatchingFile(ModuleEntry& module);
  // Opens `file` for the module if its build-id is the recorded one; `is_module_path`: the
  // module's own path (a mismatch there is the module's state).
  bool TryFile(ModuleEntry& module, const std::string& file, bool is_module_path);

  struct Search;  // libdwfl's callbacks and search path, which every Dwfl points to
  std::vector<std::string> debug_dirs_;
  DebuginfodFetcher debuginfod_;
  std::unique_ptr<Search> search_;
  std::map<uint64_t, std::unique_ptr<ModuleEntry>> modules_;  // by load start address
  std::map<uint64_t, SourceLocation> cache_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_SYMBOLIZE_MODULE_SYMBOLIZER_H_
