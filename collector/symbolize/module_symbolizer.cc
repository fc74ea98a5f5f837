#include "fragscope/symbolize/module_symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace fragscope {

namespace {

std::string Demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string result(out);
  std::free(out);
  return result;
}

// The name reports should print for a function DIE: the demangled linkage name when there is
// one (it carries the class and parameters, like the symbol table's), else the plain name.
std::string DieFunctionName(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (int at : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name}) {
    if (dwarf_attr_integrate(die, at, &attr) != nullptr) {
      if (const char* s = dwarf_formstring(&attr)) return Demangle(s);
    }
  }
  if (dwarf_attr_integrate(die, DW_AT_name, &attr) != nullptr) {
    if (const char* s = dwarf_formstring(&attr)) return s;
  }
  return "";
}

// Fills the inline chain of `addr` (module-relative through `m`): the innermost inlined
// function's name replaces the symbol-table name (which names the outer function), and each
// enclosing function is listed with the line of the inlined call.
void AddInlineChain(Dwfl_Module* m, Dwarf_Addr addr, SourceLocation& loc) {
  // The out-of-line function holding the code, from the symbol table; the outermost caller
  // when the scopes do not lead back to it.
  const std::string outer = loc.function;
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = dwfl_module_addrdie(m, addr, &bias);
  if (cu == nullptr) return;
  Dwarf_Die* scopes = nullptr;
  int n = dwarf_getscopes(cu, addr - bias, &scopes);
  if (n <= 0) return;
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  dwarf_getsrcfiles(cu, &files, &nfiles);
  bool innermost = true;
  for (int i = 0; i < n; ++i) {
    if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
    if (innermost) {
      std::string name = DieFunctionName(&scopes[i]);
      if (!name.empty()) loc.function = name;
      innermost = false;
    }
    // The caller: the next enclosing function scope.
    InlinedCaller caller;
    for (int j = i + 1; j < n; ++j) {
      int tag = dwarf_tag(&scopes[j]);
      if (tag == DW_TAG_inlined_subroutine || tag == DW_TAG_subprogram) {
        caller.function = DieFunctionName(&scopes[j]);
        break;
      }
    }
    if (caller.function.empty()) caller.function = outer;
    Dwarf_Attribute attr;
    Dwarf_Word value = 0;
    if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attr), &value) == 0 &&
        files != nullptr && value < nfiles) {
      if (const char* f = dwarf_filesrc(files, value, nullptr, nullptr)) caller.file = f;
    }
    if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attr), &value) == 0) {
      caller.line = static_cast<uint32_t>(value);
    }
    loc.inlined_callers.push_back(std::move(caller));
  }
  free(scopes);
}

std::string BaseName(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The build-id of `m` as raw bytes; empty when it has none.
std::string BuildIdOf(Dwfl_Module* m) {
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  int len = dwfl_module_build_id(m, &bits, &vaddr);
  return len > 0 ? std::string(reinterpret_cast<const char*>(bits), len) : std::string();
}

}  // namespace

std::string SourceLocation::ToString() const {
  std::string where;
  if (!file.empty()) {
    where = line ? absl::StrFormat("%s:%d", file, line) : file;
  } else if (!module.empty()) {
    where = absl::StrFormat("%s+0x%x", module, offset);
  }
  if (!function.empty()) return where.empty() ? function : function + " (" + where + ")";
  if (!where.empty()) return where;
  return absl::StrFormat("0x%x", pc);
}

struct ModuleSymbolizer::ModuleEntry {
  v1::Module info;
  uint64_t start = 0;  // first mapped byte
  uint64_t end = 0;    // one past the last
  bool tried = false;
  bool usable = false;  // ELF opened, build-id matches (or none recorded)
  Dwfl* dwfl = nullptr;
  Dwfl_Module* module = nullptr;
  ModuleFile file = ModuleFile::kMissing;
  std::string found_build_id;  // of the file at the path, when it differs

  ~ModuleEntry() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
};

struct ModuleSymbolizer::Search {
  std::string path;
  char* path_chars = nullptr;  // libdwfl takes a char** to the path
  Dwfl_Callbacks callbacks{};
};

ModuleSymbolizer::ModuleSymbolizer(std::vector<std::string> debug_dirs)
    : debug_dirs_(std::move(debug_dirs)), search_(std::make_unique<Search>()) {
  // elfutils' default search path (":.debug:/usr/lib/debug"), then the given folders.
  search_->path = ":.debug:/usr/lib/debug";
  for (const std::string& dir : debug_dirs_) search_->path += ":" + dir;
  search_->path_chars = search_->path.data();
  search_->callbacks = {
      .find_elf = dwfl_build_id_find_elf,
      .find_debuginfo = dwfl_standard_find_debuginfo,
      .section_address = dwfl_offline_section_address,
      .debuginfo_path = &search_->path_chars,
  };
}
ModuleSymbolizer::~ModuleSymbolizer() = default;

void ModuleSymbolizer::AddModules(const v1::ModuleMap& map) {
  for (const v1::Module& m : map.modules()) {
    auto entry = std::make_unique<ModuleEntry>();
    entry->info = m;
    entry->start = m.load_address();
    entry->end = m.load_address() + (m.size() ? m.size() : 1);
    modules_[entry->start] = std::move(entry);
  }
  cache_.clear();  // a new module may claim pcs that were unresolved before
}

ModuleSymbolizer::ModuleEntry* ModuleSymbolizer::FindModule(uint64_t pc) {
  auto it = modules_.upper_bound(pc);
  if (it == modules_.begin()) return nullptr;
  --it;
  ModuleEntry* m = it->second.get();
  return pc < m->end ? m : nullptr;
}

void ModuleSymbolizer::OpenMatchingFile(ModuleEntry& m) {
  const std::string& want = m.info.build_id();
  std::vector<std::string> candidates = {m.info.path()};
  // A debug folder's file is trusted only by its build-id: without a recorded one, none is.
  if (!want.empty()) {
    const std::string hex = absl::BytesToHexString(want);
    const std::string name = BaseName(m.info.path());
    for (const std::string& dir : debug_dirs_) {
      candidates.push_back(
          absl::StrFormat("%s/.build-id/%s/%s.debug", dir, hex.substr(0, 2), hex.substr(2)));
      candidates.push_back(absl::StrFormat("%s/%s.debug", dir, name));
      candidates.push_back(absl::StrFormat("%s/%s", dir, name));
    }
  }
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (i > 0 && ::access(candidates[i].c_str(), R_OK) != 0) continue;
    if (TryFile(m, candidates[i], i == 0)) return;
  }
  // Last, a debuginfod server (DEBUGINFOD_URLS), by the recorded build-id only.
  if (std::optional<std::string> fetched = debuginfod_.FindDebugInfo(want))
    TryFile(m, *fetched, false);
}

bool ModuleSymbolizer::TryFile(ModuleEntry& m, const std::string& file, bool is_module_path) {
  const std::string& want = m.info.build_id();
  Dwfl* dwfl = dwfl_begin(&search_->callbacks);
  if (dwfl == nullptr) return false;
  dwfl_report_begin(dwfl);
  // The load address the agent records is the load bias (dlpi_addr), which is what libdwfl
  // wants as the base of an ET_DYN module; an ET_EXEC module is never relocated. A separate
  // debug file has the same addresses as its module.
  Dwfl_Module* module =
      dwfl_report_elf(dwfl, m.info.path().c_str(), file.c_str(), -1, m.info.load_address(), false);
  dwfl_report_end(dwfl, nullptr, nullptr);
  if (module == nullptr) {
    dwfl_end(dwfl);
    return false;
  }
  const std::string have = BuildIdOf(module);
  if (!want.empty() && have != want) {
    // Another build of the module (or an unrelated file of that name): never read.
    if (is_module_path) {
      m.file = ModuleFile::kBuildIdDiffers;
      m.found_build_id = have;
    }
    dwfl_end(dwfl);
    return false;
  }
  m.dwfl = dwfl;
  m.module = module;
  m.usable = true;
  m.file = ModuleFile::kMatches;
  m.found_build_id.clear();
  return true;
}

void ModuleSymbolizer::Resolve(ModuleEntry& m, SourceLocation& loc) {
  if (!m.tried) {
    m.tried = true;
    OpenMatchingFile(m);
  }
  loc.module = m.info.path();
  loc.offset = loc.pc - m.info.load_address();
  loc.module_file = m.file;
  loc.found_build_id = m.found_build_id;
  if (!m.usable) return;
  // Return addresses point after the call; pc - 1 lands inside the calling instruction.
  Dwarf_Addr addr = loc.pc - 1;
  if (const char* name = dwfl_module_addrname(m.module, addr)) loc.function = Demangle(name);
  if (Dwfl_Line* line = dwfl_module_getsrc(m.module, addr)) {
    int lineno = 0;
    if (const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr)) {
      loc.file = file;
      loc.line = static_cast<uint32_t>(lineno);
    }
  }
  AddInlineChain(m.module, addr, loc);
}

const SourceLocation& ModuleSymbolizer::Symbolize(uint64_t pc) {
  auto [it, inserted] = cache_.try_emplace(pc);
  SourceLocation& loc = it->second;
  if (!inserted) return loc;
  loc.pc = pc;
  if (ModuleEntry* m = FindModule(pc)) Resolve(*m, loc);
  return loc;
}

}  // namespace fragscope
