#include "fragscope/report/stack_cut.h"

#include "absl/strings/str_format.h"

namespace fragscope {

StackEnd StackEndOf(const ModelSummary& summary, uint64_t stack_id) {
  if (stack_id == 0) return StackEnd::kUnspecified;
  auto it = summary.stacks.find(stack_id);
  return it == summary.stacks.end() ? StackEnd::kUnspecified : it->second.end;
}

StackEnd SiteStackEnd(const ModelSummary& summary, const SiteEntry& site) {
  return site.end ? *site.end : StackEndOf(summary, site.stack_id);
}

std::string DescribeStackCut(StackEnd end, uint32_t stack_depth) {
  switch (end) {
    case StackEnd::kDepthLimit:
      return stack_depth != 0
                 ? absl::StrFormat(
                       "stack cut here: deeper than FRAGSCOPE_STACK_DEPTH=%d (raise it)",
                       stack_depth)
                 : "stack cut here: deeper than FRAGSCOPE_STACK_DEPTH (raise it)";
    case StackEnd::kNoUnwindInfo:
      return "stack cut here: no unwind information for this code (JIT or stripped)";
    case StackEnd::kUnreadable:
      return "stack cut here: unreadable frame (its saved registers lie outside the thread's "
             "stack)";
    case StackEnd::kUnsupported:
      return "stack cut here: unsupported frame (signal handler or DWARF expression)";
    case StackEnd::kOutermost:
    case StackEnd::kUnspecified:
      break;
  }
  return "";
}

std::string StackCutFrameName(StackEnd end) {
  switch (end) {
    case StackEnd::kDepthLimit:
      return "[stack cut: depth limit]";
    case StackEnd::kNoUnwindInfo:
      return "[stack cut: no unwind info]";
    case StackEnd::kUnreadable:
      return "[stack cut: unreadable frame]";
    case StackEnd::kUnsupported:
      return "[stack cut: unsupported frame]";
    case StackEnd::kOutermost:
    case StackEnd::kUnspecified:
      break;
  }
  return "";
}

}  // namespace fragscope
