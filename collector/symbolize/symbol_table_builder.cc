#include "fragscope/symbolize/symbol_table_builder.h"

#include <map>
#include <utility>

#include "absl/strings/escaping.h"
#include "fragscope/model/process_model.h"
#include "fragscope/symbolize/module_symbolizer.h"

namespace fragscope {
namespace {

// Bytes of symbols per frame: demangled C++ names run to kilobytes, and a reader parses a frame
// whole, so a big table goes in several frames.
constexpr std::size_t kMaxFrameSymbolBytes = 4u << 20;

}  // namespace

std::vector<v1::Frame> BuildSymbolTableFrames(const std::vector<ModuleInfo>& modules,
                                              const std::vector<uint64_t>& pcs,
                                              const std::vector<std::string>& debug_dirs,
                                              const StoredSymbols* skip, SymbolTableStats* stats) {
  ModuleSymbolizer symbolizer(debug_dirs);
  v1::ModuleMap map;
  std::map<uint64_t, const ModuleInfo*> by_load_address;
  for (const ModuleInfo& m : modules) {
    v1::Module* out = map.add_modules();
    out->set_path(m.path);
    out->set_build_id(absl::HexStringToBytes(m.build_id_hex));
    out->set_load_address(m.load_address);
    out->set_size(m.size);
    by_load_address[m.load_address] = &m;
  }
  symbolizer.AddModules(map);
  SymbolTableStats counted;
  std::vector<v1::Frame> frames;
  v1::Frame frame;
  std::size_t frame_bytes = 0;
  v1::ModuleSymbols* module = nullptr;  // the current frame's entry for the current module
  uint64_t module_load_address = 0;
  for (uint64_t pc : pcs) {
    if (skip != nullptr && skip->count(pc)) continue;
    const SourceLocation& loc = symbolizer.Symbolize(pc);
    if (loc.module_file == ModuleFile::kNoModule) continue;
    if (loc.module_file != ModuleFile::kMatches) {
      ++counted.pcs_without_file;
      continue;
    }
    auto at = by_load_address.upper_bound(pc);
    if (at == by_load_address.begin()) continue;
    const ModuleInfo& info = *std::prev(at)->second;
    if (frame_bytes >= kMaxFrameSymbolBytes) {
      frames.push_back(std::move(frame));
      frame = v1::Frame();
      frame_bytes = 0;
      module = nullptr;
    }
    if (module == nullptr || module_load_address != info.load_address) {
      module = frame.mutable_symbol_table()->add_modules();
      module->set_path(info.path);
      module->set_build_id(absl::HexStringToBytes(info.build_id_hex));
      module->set_load_address(info.load_address);
      module_load_address = info.load_address;
    }
    v1::PcSymbols* entry = module->add_pcs();
    entry->set_pc(pc);
    auto add = [&](const std::string& function, const std::string& file, uint32_t line) {
      v1::SourceFrame* f = entry->add_frames();
      f->set_function(function);
      f->set_file(file);
      f->set_line(line);
      frame_bytes += function.size() + file.size() + 8;
    };
    if (!loc.function.empty() || !loc.file.empty()) add(loc.function, loc.file, loc.line);
    for (const InlinedCaller& c : loc.inlined_callers) add(c.function, c.file, c.line);
    frame_bytes += 16;
    ++counted.pcs_symbolized;
  }
  if (frame.has_symbol_table()) frames.push_back(std::move(frame));
  if (stats != nullptr) *stats = counted;
  return frames;
}

std::vector<v1::Frame> SymbolTableFramesFor(const ProcessModel& model) {
  return BuildSymbolTableFrames(model.Modules(), model.StackPcs());
}

}  // namespace fragscope
