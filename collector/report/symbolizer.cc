#include "fragscope/report/symbolizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

std::string_view BaseName(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

ModuleOffsetSymbolizer::ModuleOffsetSymbolizer(std::vector<ModuleInfo> modules)
    : modules_(std::move(modules)) {
  std::sort(modules_.begin(), modules_.end(), [](const ModuleInfo& a, const ModuleInfo& b) {
    return a.load_address < b.load_address;
  });
}

std::vector<SymbolizedFrame> ModuleOffsetSymbolizer::Symbolize(uint64_t pc) {
  SymbolizedFrame frame;
  frame.pc = pc;
  auto it = std::upper_bound(modules_.begin(), modules_.end(), pc,
                             [](uint64_t v, const ModuleInfo& m) { return v < m.load_address; });
  if (it != modules_.begin()) {
    const ModuleInfo& m = *std::prev(it);
    if (pc - m.load_address < m.size) {
      frame.module = m.path;
      frame.module_offset = pc - m.load_address;
    }
  }
  return {frame};
}

std::string FormatFrame(const SymbolizedFrame& frame) {
  std::string location;
  if (!frame.file.empty()) {
    location = frame.line > 0 ? absl::StrFormat("%s:%d", frame.file, frame.line) : frame.file;
  }
  if (!frame.function.empty()) {
    return location.empty() ? frame.function : absl::StrFormat("%s (%s)", frame.function, location);
  }
  if (!location.empty()) return location;
  if (!frame.module.empty()) {
    return absl::StrFormat("%s+0x%x", BaseName(frame.module), frame.module_offset);
  }
  // A text frame that names nothing (an adapter's frame without function or file).
  if (frame.pc == 0) return "(unknown frame)";
  return absl::StrFormat("0x%x", frame.pc);
}

std::string DescribeSymbolSource(const SymbolSourceNote& note) {
  std::string what =
      note.build_id_differs
          ? absl::StrFormat("%s on this machine has build-id %s, not %s that ran", note.module,
                            note.found_build_id_hex.empty() ? "(none)" : note.found_build_id_hex,
                            note.build_id_hex)
          : absl::StrFormat("%s (build-id %s) is not on this machine", note.module,
                            note.build_id_hex.empty() ? "(none recorded)" : note.build_id_hex);
  if (note.from_stored_symbols) {
    return what + ": its frames are named from the symbols stored in the trace.";
  }
  return what +
         ": its frames are shown as module+offset (run `fragscope symbolize TRACE` where the "
         "trace was taken, or give --debug-dir with its debug files).";
}

bool IsOwnFrame(std::string_view function, std::string_view module) {
  if (function.starts_with("fragscope_")) return true;
  module = BaseName(module);
  return module.starts_with("libfragscope") ||
         (module.starts_with("fragscope_") && module.ends_with(".so"));
}

std::size_t LeadingOwnFrames(const std::vector<SymbolizedFrame>& frames) {
  std::size_t n = 0;
  while (n + 1 < frames.size() && IsOwnFrame(frames[n].function, frames[n].module)) ++n;
  return n;
}

std::vector<SymbolizedFrame> SymbolizeStack(const ModelSummary& summary, uint64_t stack_id,
                                            Symbolizer& symbolizer) {
  std::vector<SymbolizedFrame> frames;
  if (stack_id == 0) return frames;
  auto it = summary.stacks.find(stack_id);
  if (it == summary.stacks.end()) return frames;
  for (const SourceFrameInfo& f : it->second.source_frames) {
    SymbolizedFrame frame;
    frame.function = f.function;
    frame.file = f.file;
    frame.line = f.line;
    frames.push_back(std::move(frame));
  }
  for (uint64_t pc : it->second.pcs) {
    std::vector<SymbolizedFrame> more = symbolizer.Symbolize(pc);
    if (more.empty()) more.emplace_back().pc = pc;
    for (SymbolizedFrame& f : more) {
      if (f.pc == 0) f.pc = pc;
      frames.push_back(std::move(f));
    }
  }
  return frames;
}

}  // namespace fragscope
