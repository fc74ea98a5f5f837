// Human-readable report of a ModelSummary: per-device table, top sites, failed allocations and
// OOM post-mortems worth pasting into a bug report.
#ifndef FRAGSCOPE_REPORT_REPORT_TEXT_H_
#define FRAGSCOPE_REPORT_REPORT_TEXT_H_

#include <ostream>

#include "fragscope/model/model_summary.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope {

struct TextReportOptions {
  std::size_t max_stack_frames = 12;  // frames printed per stack
  std::size_t max_sites = 10;         // sites printed per device / post-mortem
  std::size_t max_recent_events = 20;
};

// Writes the report to `out`. Stateless; thread-safe as far as `symbolizer` is.
void RenderText(const ModelSummary& summary, Symbolizer& symbolizer, std::ostream& out,
                const TextReportOptions& options = {});
// Same, symbolizing with ModuleOffsetSymbolizer over summary.modules.
void RenderText(const ModelSummary& summary, std::ostream& out,
                const TextReportOptions& options = {});

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_REPORT_TEXT_H_
