#include "fragscope/symbolize/dwarf_symbolizer.h"

#include <map>
#include <utility>

#include "absl/strings/escaping.h"

namespace fragscope {
namespace {

v1::ModuleMap ToModuleMap(const std::vector<ModuleInfo>& modules) {
  v1::ModuleMap map;
  for (const ModuleInfo& m : modules) {
    v1::Module* out = map.add_modules();
    out->set_path(m.path);
    out->set_load_address(m.load_address);
    out->set_size(m.size);
    out->set_build_id(absl::HexStringToBytes(m.build_id_hex));
  }
  return map;
}

}  // namespace

DwarfSymbolizer::DwarfSymbolizer(const std::vector<ModuleInfo>& modules) {
  symbolizer_.AddModules(ToModuleMap(modules));
}

DwarfSymbolizer::DwarfSymbolizer(const ModelSummary& summary, std::vector<std::string> debug_dirs)
    : symbolizer_(std::move(debug_dirs)), stored_(summary.stored_symbols) {
  symbolizer_.AddModules(ToModuleMap(summary.modules));
  // The modules the report's frames lie in, each judged by one of its pcs (the file is opened
  // once per module), and whether the trace stores symbols for any of them.
  std::map<std::string, SymbolSourceNote> by_module;
  for (const auto& [id, stack] : summary.stacks) {
    for (uint64_t pc : stack.pcs) {
      const SourceLocation& loc = symbolizer_.Symbolize(pc);
      if (loc.module_file != ModuleFile::kMissing &&
          loc.module_file != ModuleFile::kBuildIdDiffers) {
        continue;
      }
      SymbolSourceNote& note = by_module[loc.module];
      if (note.module.empty()) {
        note.module = loc.module;
        for (const ModuleInfo& m : summary.modules) {
          if (m.path == loc.module && pc - m.load_address == loc.offset) {
            note.build_id_hex = m.build_id_hex;
          }
        }
        note.build_id_differs = loc.module_file == ModuleFile::kBuildIdDiffers;
        note.found_build_id_hex = absl::BytesToHexString(loc.found_build_id);
      }
      if (stored_ != nullptr && stored_->count(pc)) note.from_stored_symbols = true;
    }
  }
  for (auto& [module, note] : by_module) notes_.push_back(std::move(note));
}

std::unique_ptr<Symbolizer> MakeDwarfSymbolizer(const std::vector<ModuleInfo>& modules) {
  return std::make_unique<DwarfSymbolizer>(modules);
}

std::vector<SymbolizedFrame> DwarfSymbolizer::Symbolize(uint64_t pc) {
  const SourceLocation& loc = symbolizer_.Symbolize(pc);
  std::vector<SymbolizedFrame> frames;
  auto add = [&](const std::string& function, const std::string& file, uint32_t line) {
    SymbolizedFrame& f = frames.emplace_back();
    f.function = function;
    f.file = file;
    f.line = line;
    f.module = loc.module;
    f.module_offset = loc.offset;
    f.pc = pc;
  };
  if (loc.module_file != ModuleFile::kMatches && stored_ != nullptr) {
    // The file here is gone or another build: the symbols read where the trace was taken.
    if (auto it = stored_->find(pc); it != stored_->end() && !it->second.empty()) {
      for (const SourceFrameInfo& f : it->second) add(f.function, f.file, f.line);
      return frames;
    }
  }
  add(loc.function, loc.file, loc.line);
  // Inlined code: the functions it was expanded into follow, innermost first, at one pc.
  for (const InlinedCaller& c : loc.inlined_callers) add(c.function, c.file, c.line);
  return frames;
}

}  // namespace fragscope
