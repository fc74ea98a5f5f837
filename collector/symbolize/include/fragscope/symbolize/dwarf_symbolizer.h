// The reports' Symbolizer backed by debug information (libdwfl through ModuleSymbolizer):
// function and file:line where the module on disk still matches the trace's build-id,
// module+offset otherwise.
#ifndef FRAGSCOPE_SYMBOLIZE_DWARF_SYMBOLIZER_H_
#define FRAGSCOPE_SYMBOLIZE_DWARF_SYMBOLIZER_H_

#include <memory>
#include <vector>

#include "fragscope/model/model_summary.h"
#include "fragscope/report/symbolizer.h"
#include "fragscope/symbolize/module_symbolizer.h"

namespace fragscope {

// Not thread-safe (caches per pc).
class DwarfSymbolizer : public Symbolizer {
 public:
  explicit DwarfSymbolizer(const std::vector<ModuleInfo>& modules);
  std::vector<SymbolizedFrame> Symbolize(uint64_t pc) override;

 private:
  ModuleSymbolizer symbolizer_;
};

// A DwarfSymbolizer, as a factory (SessionServerOptions::make_symbolizer).
std::unique_ptr<Symbolizer> MakeDwarfSymbolizer(const std::vector<ModuleInfo>& modules);

}  // namespace fragscope

#endif  // FRAGSCOPE_SYMBOLIZE_DWARF_SYMBOLIZER_H_
