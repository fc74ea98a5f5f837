#include "fragscope/export/site_names.h"

#include <vector>

#include "absl/strings/str_format.h"

namespace fragscope::exporter {

const std::string& SiteNames::Name(uint64_t stack_id, StackEnd end) {
  auto it = names_.find({stack_id, end});
  if (it != names_.end()) return it->second;
  std::string name;
  if (stack_id == 0) {
    name = "(no stack recorded)";
  } else {
    std::vector<SymbolizedFrame> frames = SymbolizeStack(summary_, stack_id, symbolizer_);
    if (frames.empty()) name = absl::StrFormat("(stack %d not in the stream)", stack_id);
    const std::size_t first = LeadingOwnFrames(frames);  // fragscope's own, no site
    for (std::size_t i = first; i < frames.size() && i < first + max_frames_; ++i) {
      if (i > first) name += " < ";
      name += FormatFrame(frames[i]);
    }
    if (!frames.empty()) {
      if (const std::string cut = DescribeStackCut(end, summary_.stack_depth); !cut.empty()) {
        name += " \u2026 " + cut;
      }
    }
  }
  return names_.emplace(std::make_pair(stack_id, end), std::move(name)).first->second;
}

}  // namespace fragscope::exporter
