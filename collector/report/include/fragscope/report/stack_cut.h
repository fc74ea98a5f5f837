// What reports say after the last frame of a stack the agent could not capture whole
// (StackEnd), in words a user can act on.
#ifndef FRAGSCOPE_REPORT_STACK_CUT_H_
#define FRAGSCOPE_REPORT_STACK_CUT_H_

#include <cstdint>
#include <string>

#include "fragscope/model/model_summary.h"

namespace fragscope {

// How stack `stack_id` of `summary` ended; kUnspecified for stack 0 or an unknown id.
StackEnd StackEndOf(const ModelSummary& summary, uint64_t stack_id);
// How the site's stacks ended: its merged end (SiteEntry::end), else its stack's own.
StackEnd SiteStackEnd(const ModelSummary& summary, const SiteEntry& site);

// "stack cut here: deeper than FRAGSCOPE_STACK_DEPTH=32 (raise it)" and the like, for a cut
// end (IsCutStackEnd); empty for a whole stack and for an unspecified end (an older agent's:
// nothing known). `stack_depth` 0: the depth is not known and not named.
std::string DescribeStackCut(StackEnd end, uint32_t stack_depth);

// "[stack cut: depth limit]": the synthetic outermost frame exports add to a cut stack (flame
// graphs, PyTorch's viewer), so a tool that only shows frames still shows the cut. Empty when
// the end is not a cut. `fragscope import` reads it back as the stack's end.
std::string StackCutFrameName(StackEnd end);

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_STACK_CUT_H_
