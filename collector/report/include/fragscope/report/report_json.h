// Machine-readable report of a ModelSummary. The schema is documented in collector/REPORT.md and
// versioned by `schema_version`: fields are only added within a version.
#ifndef FRAGSCOPE_REPORT_REPORT_JSON_H_
#define FRAGSCOPE_REPORT_REPORT_JSON_H_

#include <ostream>

#include "fragscope/model/model_summary.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope {

inline constexpr int kJsonReportSchemaVersion = 1;

struct JsonReportOptions {
  bool pretty = true;                 // indented, one field per line
  bool include_timeline = true;       // devices[].timeline
  std::size_t max_stack_frames = 64;  // frames per stack
};

// Writes one JSON object (UTF-8, integers for bytes) to `out`. Stateless.
void RenderJson(const ModelSummary& summary, Symbolizer& symbolizer, std::ostream& out,
                const JsonReportOptions& options = {});
// Same, symbolizing with ModuleOffsetSymbolizer over summary.modules.
void RenderJson(const ModelSummary& summary, std::ostream& out,
                const JsonReportOptions& options = {});

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_REPORT_JSON_H_
