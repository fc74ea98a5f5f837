#include "fragscope/symbolize/dwarf_symbolizer.h"

#include "absl/strings/escaping.h"

namespace fragscope {

DwarfSymbolizer::DwarfSymbolizer(const std::vector<ModuleInfo>& modules) {
  v1::ModuleMap map;
  for (const ModuleInfo& m : modules) {
    v1::Module* out = map.add_modules();
    out->set_path(m.path);
    out->set_load_address(m.load_address);
    out->set_size(m.size);
    out->set_build_id(absl::HexStringToBytes(m.build_id_hex));
  }
  symbolizer_.AddModules(map);
}

std::vector<SymbolizedFrame> DwarfSymbolizer::Symbolize(uint64_t pc) {
  const SourceLocation& loc = symbolizer_.Symbolize(pc);
  SymbolizedFrame frame;
  frame.function = loc.function;
  frame.file = loc.file;
  frame.line = loc.line;
  frame.module = loc.module;
  frame.module_offset = loc.offset;
  frame.pc = pc;
  return {frame};
}

}  // namespace fragscope
