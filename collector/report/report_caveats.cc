#include "fragscope/report/report_caveats.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

constexpr std::size_t kListedIntervals = 5;  // lost-event intervals named one by one

}  // namespace

std::vector<std::string> ReportCaveats(const ModelSummary& s) {
  std::vector<std::string> out;
  if (s.imported && s.imported_history) {
    out.push_back(
        "an allocator snapshot with its recorded history, replayed: peaks and maxima are the "
        "history's; what happened before its first entry is not known.");
  } else if (s.imported) {
    out.push_back("the state at the moment of the snapshot; what happened before it is not known.");
  } else if (!s.history_complete) {
    // Not `attached` alone: a woken dormant agent kept its live table from the program's
    // first CUDA call, so nothing before the attach is missing.
    out.push_back("the agent started after the program; memory allocated before is untracked.");
  }
  if (const std::optional<uint64_t> from = s.partial_history_from()) {
    out.push_back(absl::StrFormat(
        "the trace begins at seq %d with a snapshot of what was live then (a flight-recorder "
        "segment, a late connect or an attach): peaks, maxima and failures before it are not in "
        "this trace.",
        *from));
  }
  if (s.block_syncs > 0) {
    out.push_back(absl::StrFormat(
        "the sub-allocator's blocks (PyTorch's) were read from its own state at %d sync(s) only "
        "(snapshot diffs), the last at seq %d: allocated, cached, the largest free range and "
        "fragmentation are exact at those points; between them blocks that came and went were "
        "not seen, so peaks and maxima may be higher than shown%s.",
        s.block_syncs, s.last_block_sync_seq,
        s.blocks_known_at_end ? "" : ", and the final figures are those of the last sync"));
  }
  if (!s.release_stacks) {
    out.push_back(
        "frees and unmaps were recorded without stacks (FRAGSCOPE_FREE_STACKS=0); allocation "
        "sites are complete.");
  }
  // A stream that kept losing its connection can have hundreds of intervals: the first few
  // say where, one more line how many there were in all.
  const std::size_t listed = std::min(s.approximate_intervals.size(), kListedIntervals);
  for (std::size_t i = 0; i < listed; ++i) {
    const ApproximateInterval& a = s.approximate_intervals[i];
    // A resync without a Drops frame before it says that events were lost, not how many.
    const std::string lost = a.dropped_events > 0 ? absl::StrFormat("%d events", a.dropped_events)
                                                  : std::string("an unknown number of events");
    out.push_back(absl::StrFormat("%s lost after seq %d; approximate until %s.", lost, a.from_seq,
                                  a.to_seq ? absl::StrFormat("the resync at seq %d", *a.to_seq)
                                           : std::string("the end (no resync came)")));
  }
  if (s.approximate_intervals.size() > listed) {
    uint64_t more_events = 0;
    for (std::size_t i = listed; i < s.approximate_intervals.size(); ++i) {
      more_events += s.approximate_intervals[i].dropped_events;
    }
    out.push_back(absl::StrFormat(
        "%d more intervals with lost events (%d counted), the last after seq %d; approximate "
        "there too.",
        s.approximate_intervals.size() - listed, more_events,
        s.approximate_intervals.back().from_seq));
  }
  if (s.live_entries_not_held > 0) {
    out.push_back(absl::StrFormat(
        "the agent's live table was full (%d inserts refused): its snapshots from seq %d on "
        "lack some live allocations (at most that many), so the figures may undercount. Run "
        "with a larger FRAGSCOPE_LIVE_SLOTS.",
        s.live_entries_not_held, s.not_held_since_seq));
  }
  if (s.unmatched_events > 0) {
    out.push_back(absl::StrFormat(
        "%d events did not match the known state (frees of unseen addresses, lost frees).",
        s.unmatched_events));
  }
  return out;
}

std::string PeakSince(const ModelSummary& s) {
  // A snapshot is one moment: its "peak" is that moment's (the caveat says the rest).
  if (s.imported) return s.imported_history ? " in the snapshot's history" : " at snapshot time";
  const std::optional<uint64_t> from = s.partial_history_from();
  return from ? absl::StrFormat(" since seq %d", *from) : std::string();
}

}  // namespace fragscope
