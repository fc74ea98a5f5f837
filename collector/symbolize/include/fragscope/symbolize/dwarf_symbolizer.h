// The reports' Symbolizer backed by debug information (libdwfl through ModuleSymbolizer):
// function and file:line where the module on disk (or in a debug folder) still has the trace's
// build-id; else the symbols the trace carries (SymbolTable frames, read where it ran); else
// module+offset. Never names a frame from a file of another build-id.
#ifndef FRAGSCOPE_SYMBOLIZE_DWARF_SYMBOLIZER_H_
#define FRAGSCOPE_SYMBOLIZE_DWARF_SYMBOLIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "fragscope/model/model_summary.h"
#include "fragscope/report/symbolizer.h"
#include "fragscope/symbolize/module_symbolizer.h"

namespace fragscope {

// Not thread-safe (caches per pc).
class DwarfSymbolizer : public Symbolizer {
 public:
  // From the module map alone (a live stream: its files are here).
  explicit DwarfSymbolizer(const std::vector<ModuleInfo>& modules);
  // For a report of `summary`: its module map and stored symbols, and `debug_dirs` searched for
  // files by build-id (ModuleSymbolizer). Checks the modules of the summary's stacks up front,
  // so SymbolSourceNotes() is complete before the first Symbolize.
  explicit DwarfSymbolizer(const ModelSummary& summary, std::vector<std::string> debug_dirs = {});
  std::vector<SymbolizedFrame> Symbolize(uint64_t pc) override;
  std::vector<SymbolSourceNote> SymbolSourceNotes() override { return notes_; }

 private:
  ModuleSymbolizer symbolizer_;
  std::shared_ptr<const StoredSymbols> stored_;
  std::vector<SymbolSourceNote> notes_;
};

// A DwarfSymbolizer, as a factory (SessionServerOptions::make_symbolizer).
std::unique_ptr<Symbolizer> MakeDwarfSymbolizer(const std::vector<ModuleInfo>& modules);

}  // namespace fragscope

#endif  // FRAGSCOPE_SYMBOLIZE_DWARF_SYMBOLIZER_H_
