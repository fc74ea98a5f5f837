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

std::unique_ptr<Symbolizer> MakeDwarfSymbolizer(const std::vector<ModuleInfo>& modules) {
  return std::make_unique<DwarfSymbolizer>(modules);
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
  std::vector<SymbolizedFrame> frames = {frame};
  // Inlined code: the functions it was expanded into follow, innermost first, at one pc.
  for (const InlinedCaller& c : loc.inlined_callers) {
    SymbolizedFrame outer = frame;
    outer.function = c.function;
    outer.file = c.file;
    outer.line = c.line;
    frames.push_back(std::move(outer));
  }
  return frames;
}

}  // namespace fragscope
