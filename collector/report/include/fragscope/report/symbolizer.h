// Turning return addresses into function, file:line and module for reports.
//
// The collector's libdw implementation (collector/symbolize) derives from Symbolizer; this
// header also provides the fallback every report can use without debug info: `module+0xoffset`.
#ifndef FRAGSCOPE_REPORT_SYMBOLIZER_H_
#define FRAGSCOPE_REPORT_SYMBOLIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fragscope/model/model_summary.h"

namespace fragscope {

// One source-level frame of a return address (an inlined call gives several, innermost first).
struct SymbolizedFrame {
  std::string function;        // demangled; empty if unknown
  std::string file;            // empty if unknown
  uint32_t line = 0;           // 0 if unknown
  std::string module;          // path of the module holding the pc; empty if none
  uint64_t module_offset = 0;  // pc - module load address
  uint64_t pc = 0;
};

// A module whose frames a report cannot name from the file on this machine, and what it shows
// for them instead. Reports list these (text notes, JSON `symbol_sources`).
struct SymbolSourceNote {
  std::string module;        // path, as the trace recorded it
  std::string build_id_hex;  // recorded: the build that ran
  // The file at that path has another build-id (found_build_id_hex); else: no such file here.
  bool build_id_differs = false;
  std::string found_build_id_hex;
  // Its frames come from the symbols the trace carries (read where it ran); else they are
  // module+offset.
  bool from_stored_symbols = false;
};

// "MODULE (build-id X) is not on this machine: ..." — the sentence reports print for `note`,
// with a full stop, naming what to do when its frames are module+offset.
std::string DescribeSymbolSource(const SymbolSourceNote& note);

// Implementations may cache (Symbolize is non-const for that). Not required to be thread-safe:
// reports call it from one thread.
class Symbolizer {
 public:
  virtual ~Symbolizer() = default;
  // Frames for one pc, innermost first. Never empty: an unknown pc gives one frame with only
  // `pc` set.
  virtual std::vector<SymbolizedFrame> Symbolize(uint64_t pc) = 0;
  // Modules of the report's stacks that this symbolizer could not read on this machine, and
  // how their frames are shown; in module-path order. None by default.
  virtual std::vector<SymbolSourceNote> SymbolSourceNotes() { return {}; }
};

// Names a pc by the module containing it: `libfoo.so+0x1a2b`. Needs no debug info. Keeps a copy
// of the module list.
class ModuleOffsetSymbolizer : public Symbolizer {
 public:
  explicit ModuleOffsetSymbolizer(std::vector<ModuleInfo> modules);
  std::vector<SymbolizedFrame> Symbolize(uint64_t pc) override;

 private:
  std::vector<ModuleInfo> modules_;  // sorted by load_address
};

// "function (file:line)", or "module+0xoffset", or "0xpc" — the one-line form reports print.
std::string FormatFrame(const SymbolizedFrame& frame);

// Whether a frame is fragscope's own code: annotate.h's inline functions (`fragscope_*`,
// compiled into the program's allocator), the agent (`libfragscope*.so`) or the PyTorch
// adapter's extension (`fragscope_*.so`). `module` may be a path.
bool IsOwnFrame(std::string_view function, std::string_view module);

// How many of `frames`, from the innermost, are fragscope's own (IsOwnFrame). Reports begin a
// site below them; at least one frame is always left.
std::size_t LeadingOwnFrames(const std::vector<SymbolizedFrame>& frames);

// The frames of stack `stack_id` in `summary` (source frames of a converted stream, or its pcs
// through `symbolizer`), innermost first; empty for stack 0 or an unknown id.
std::vector<SymbolizedFrame> SymbolizeStack(const ModelSummary& summary, uint64_t stack_id,
                                            Symbolizer& symbolizer);

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_SYMBOLIZER_H_
