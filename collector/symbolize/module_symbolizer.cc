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

const Dwfl_Callbacks kOfflineCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

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

  ~ModuleEntry() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
};

ModuleSymbolizer::ModuleSymbolizer() = default;
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

void ModuleSymbolizer::Resolve(ModuleEntry& m, SourceLocation& loc) {
  if (!m.tried) {
    m.tried = true;
    // The load address the agent records is the load bias (dlpi_addr), which is what libdwfl
    // wants as the base of an ET_DYN module; an ET_EXEC module is never relocated.
    m.dwfl = dwfl_begin(&kOfflineCallbacks);
    if (m.dwfl != nullptr) {
      dwfl_report_begin(m.dwfl);
      m.module = dwfl_report_elf(m.dwfl, m.info.path().c_str(), m.info.path().c_str(), -1,
                                 m.info.load_address(), false);
      dwfl_report_end(m.dwfl, nullptr, nullptr);
    }
    if (m.module != nullptr) {
      const unsigned char* bits = nullptr;
      GElf_Addr vaddr = 0;
      int len = dwfl_module_build_id(m.module, &bits, &vaddr);
      const std::string& want = m.info.build_id();
      m.usable = want.empty() || (len > 0 && static_cast<size_t>(len) == want.size() &&
                                  std::memcmp(bits, want.data(), want.size()) == 0);
    }
  }
  loc.module = m.info.path();
  loc.offset = loc.pc - m.info.load_address();
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
