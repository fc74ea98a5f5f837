// One OOM's post-mortem on its own, as fragscope-collector writes it to `<stream>.oom-<seq>.txt`
// and `.json` while the program runs: the process, when and why the file was written, the
// repeats of the same failure it stands for, whether the program recovered, and the post-mortem
// (the same section the full report has). The whole report stays in `<stream>.report.*`.
#ifndef FRAGSCOPE_REPORT_OOM_FILE_H_
#define FRAGSCOPE_REPORT_OOM_FILE_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "fragscope/model/model_summary.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope {

struct OomFileNote {
  // Why the file was written now: "the allocator raised it", "no success of that size within
  // 2 s", "the stream ended", ... One sentence, lower case.
  std::string written_because;
  // Failures of the same request (device, size, class) this file stands for, itself included.
  uint64_t repeats = 1;
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  // A later success of that size on the device (REPORT.md "Recovered"); 0: none seen yet.
  uint64_t recovered_by_seq = 0;
  bool stream_ended = false;
};

void RenderOomText(const ModelSummary& summary, const OomPostMortem& oom, const OomFileNote& note,
                   Symbolizer& symbolizer, std::ostream& out);
// {"schema_version", "process": {...}, "written_because", "stream_ended", "repeats":
//  {"count","first_seq","last_seq"}, "recovered", "recovered_by_seq", "oom": {the report's
//  ooms[] entry}} (collector/REPORT.md, "Post-mortem files").
void RenderOomJson(const ModelSummary& summary, const OomPostMortem& oom, const OomFileNote& note,
                   Symbolizer& symbolizer, std::ostream& out);

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_OOM_FILE_H_
