// What every rendering of a report must say about the limits of its own figures: memory from
// before the agent started, lost events, a full live table, events that matched nothing. One
// list, so that the text report and the HTML page (and whatever comes next) cannot disagree
// about whether a figure can be trusted.
#ifndef FRAGSCOPE_REPORT_REPORT_CAVEATS_H_
#define FRAGSCOPE_REPORT_REPORT_CAVEATS_H_

#include <string>
#include <vector>

#include "fragscope/model/model_summary.h"

namespace fragscope {

// One sentence per caveat, in the order the text report prints them (each after "Note: "),
// ending with a full stop and without a newline. Empty when the figures are complete. The
// first five intervals of lost events are listed one by one, the rest in one more caveat. Pure.
std::vector<std::string> ReportCaveats(const ModelSummary& summary);

// What a peak or maximum figure must carry beside it: " since seq S" for a stream that begins
// mid-run (ModelSummary::partial_history_from), " at snapshot time" for an imported allocator
// snapshot (one moment: the run's peak is not in it), " in the snapshot's history" for one whose
// recorded history was replayed, else "". Pure.
std::string PeakSince(const ModelSummary& summary);

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_REPORT_CAVEATS_H_
