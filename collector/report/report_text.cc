// Text rendering of a ModelSummary: what `fragscope run/report` prints.
#include "fragscope/report/report_text.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "fragscope.pb.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/report/free_range_sizes.h"
#include "fragscope/report/job_summary.h"
#include "fragscope/report/oom_file.h"
#include "fragscope/report/report_caveats.h"
#include "fragscope/report/report_verdict.h"
#include "fragscope/report/stack_cut.h"

namespace fragscope {
namespace {

// The CUDA spelling, or the number of an API this build does not know.
std::string ApiLabel(int api) {
  std::string name = ApiName(api);
  return name.empty() ? absl::StrFormat("api %d", api) : name;
}

std::string Bytes(const Measured<uint64_t>& m) {
  return m.value ? FormatBytes(*m.value) : "unknown (" + m.unknown_reason + ")";
}

std::string Ratio(const Measured<double>& m) {
  return m.value ? FormatPercent(*m.value) : "n/a (" + m.unknown_reason + ")";
}

class TextReport {
 public:
  TextReport(const ModelSummary& s, Symbolizer& symbolizer, std::ostream& out,
             const TextReportOptions& options)
      : s_(s), symbolizer_(symbolizer), out_(out), options_(options) {}

  void Render();
  // One OOM's file (oom_file.h).
  void RenderOomFile(const OomPostMortem& o, const OomFileNote& note);

 private:
  void Title();
  void Row(std::string_view label, const std::string& value, const std::string& note = {}) {
    std::string line = absl::StrFormat("  %-22s %-14s %s", label, value, note);
    line.erase(line.find_last_not_of(' ') + 1);
    out_ << line << "\n";
  }
  // `end`: how the stack (or the site's stacks) ended; a cut is said after the last frame.
  void Stack(uint64_t stack_id, StackEnd end, std::string_view indent);
  void Sites(const std::vector<SiteEntry>& sites, std::string_view indent);
  void Device(const DeviceSummary& d);
  void Failures();
  void Oom(const OomPostMortem& o);
  void FreeRangesAtFailure(const OomPostMortem& o);

  const ModelSummary& s_;
  Symbolizer& symbolizer_;
  std::ostream& out_;
  const TextReportOptions& options_;
};

void TextReport::Stack(uint64_t stack_id, StackEnd end, std::string_view indent) {
  if (stack_id == 0) {
    out_ << indent << "(no stack recorded)\n";
    return;
  }
  std::vector<SymbolizedFrame> frames = SymbolizeStack(s_, stack_id, symbolizer_);
  if (frames.empty()) {
    out_ << indent << absl::StrFormat("(stack %d not in the stream)\n", stack_id);
    return;
  }
  // fragscope's own frames (annotate.h's inline functions, the PyTorch adapter's callback) name
  // no site of the program's: the site starts below them.
  const std::size_t first = LeadingOwnFrames(frames);
  const std::size_t shown = std::min(frames.size(), first + options_.max_stack_frames);
  for (std::size_t i = first; i < shown; ++i)
    out_ << indent << "at " << FormatFrame(frames[i]) << "\n";
  if (shown < frames.size()) {
    out_ << indent << absl::StrFormat("... %d more frames\n", frames.size() - shown);
  }
  // Whole and unspecified (older agents) stacks print nothing more.
  if (const std::string cut = DescribeStackCut(end, s_.stack_depth); !cut.empty()) {
    out_ << indent << "\u2026 " << cut << "\n";
  }
}

void TextReport::Sites(const std::vector<SiteEntry>& sites, std::string_view indent) {
  if (sites.empty()) {
    out_ << indent << "(nothing live)\n";
    return;
  }
  const std::size_t shown = std::min(sites.size(), options_.max_sites);
  const std::string inner = std::string(indent) + "    ";
  for (std::size_t i = 0; i < shown; ++i) {
    out_ << indent
         << absl::StrFormat("%s in %d allocation(s)\n", FormatBytes(sites[i].live_bytes),
                            sites[i].count);
    Stack(sites[i].stack_id, SiteStackEnd(s_, sites[i]), inner);
  }
  if (shown < sites.size())
    out_ << indent << absl::StrFormat("... %d more sites\n", sites.size() - shown);
}

void TextReport::Device(const DeviceSummary& d) {
  out_ << absl::StrFormat("Device %d", d.ordinal);
  if (!d.name.empty()) out_ << " (" << d.name << ")";
  if (!d.uuid_hex.empty()) out_ << " uuid " << GpuUuidName(d.uuid_hex);
  out_ << " — total " << Bytes(d.total_bytes) << "\n";
  Row("reserved", FormatBytes(d.reserved_bytes),
      "peak " + FormatBytes(d.peak_reserved_bytes) + PeakSince(s_));
  Row("allocated", FormatBytes(d.allocated_bytes),
      "peak " + FormatBytes(d.peak_allocated_bytes) + PeakSince(s_));
  Row("cached", FormatBytes(d.cached_bytes), "free inside annotated segments");
  Row("largest free range", FormatBytes(d.largest_free_range_bytes));
  Row("fragmentation", d.fragmentation.value ? FormatPercent(*d.fragmentation.value) : "n/a",
      d.fragmentation.value ? "max " + Ratio(d.max_fragmentation) + PeakSince(s_)
                            : d.fragmentation.unknown_reason);
  Row("stranded", FormatBytes(d.stranded_bytes), "cached bytes no single request can use");
  if (d.opaque_bytes > 0 || d.opaque_segments > 0) {
    Row("opaque", FormatBytes(d.opaque_bytes),
        absl::StrFormat("%d segment(s) carved by an allocator fragscope cannot see",
                        d.opaque_segments));
  }
  if (d.pending_free_bytes > 0) Row("pending free", FormatBytes(d.pending_free_bytes));
  Row("untracked", d.untracked_bytes.value ? FormatBytes(*d.untracked_bytes.value) : "unknown",
      d.untracked_bytes.value ? "outside this process's segments (context, other processes)"
                              : d.untracked_bytes.unknown_reason);
  if (d.device_free_bytes.value)
    Row("device free", FormatBytes(*d.device_free_bytes.value),
        absl::StrFormat("sampled at seq %d", d.device_free_sample_seq));
  if (d.pool_reserved_bytes > 0) {
    Row("pools", FormatBytes(d.pool_reserved_bytes),
        absl::StrFormat("used %s, pending free %s; layout unknown (no largest free)",
                        FormatBytes(d.pool_used_bytes), FormatBytes(d.pool_pending_free_bytes)));
  }
  if (d.graph_bytes > 0) Row("graph memory", FormatBytes(d.graph_bytes));
  if (d.managed_bytes > 0) Row("managed", FormatBytes(d.managed_bytes), "not counted as reserved");
  if (d.imported_bytes > 0) {
    Row("imported", FormatBytes(d.imported_bytes), "another process's memory, not reserved");
  }
  if (d.unmapped_handle_bytes > 0) Row("unmapped handles", FormatBytes(d.unmapped_handle_bytes));
  out_ << absl::StrFormat(
      "  segments %d (exact %d%s, annotated %d, opaque %d) · blocks %d · free ranges %d\n",
      d.segments, d.exact_segments,
      d.exact_segments > 0 ? " holding " + FormatBytes(d.exact_bytes) : std::string(),
      d.annotated_segments, d.opaque_segments, d.blocks, d.free_ranges);
  out_ << "  Top sites (live now):\n";
  Sites(d.sites, "    ");
  // What made the memory peak, for a run that did not fail (a CI job, capacity planning); an
  // OOM's post-mortem on this device lists them itself.
  const bool has_oom = std::any_of(s_.ooms.begin(), s_.ooms.end(), [&](const OomPostMortem& o) {
    return o.failure.device == d.ordinal;
  });
  if (!has_oom && !d.sites_at_peak.empty()) {
    out_ << absl::StrFormat("  Top sites at peak reserved (%s%s):\n",
                            FormatBytes(d.peak_reserved_bytes), PeakSince(s_));
    Sites(d.sites_at_peak, "    ");
  }
  out_ << "\n";
}

void TextReport::Failures() {
  if (s_.failed_allocations.empty()) return;
  out_ << absl::StrFormat("Failed allocations (%d):\n", s_.failed_allocations.size());
  for (const FailedAllocation& f : s_.failed_allocations) {
    std::string status;
    if (f.superseded_by_seq != 0) {
      status = absl::StrFormat("explained by the OOM at seq %d", f.superseded_by_seq);
    } else if (f.recovered) {
      status = absl::StrFormat("recovered (seq %d succeeded)", f.recovered_by_seq);
    } else {
      status = "NOT recovered";
    }
    out_ << absl::StrFormat("  seq %-8d device %-2d %-28s %12s  result %d%s%s  %s\n", f.seq,
                            f.device, f.api_name, FormatBytes(f.requested_bytes), f.result,
                            f.is_oom ? " OOM" : "", f.from_sub_allocator ? " (sub-allocator)" : "",
                            status);
  }
  out_ << "\n";
}

// Where the cached bytes lay when the request failed, from the post-mortem's segment map: how
// many free ranges, in how many segments, by size (largest first). What "not in one piece"
// meant for this failure, in a form a terminal shows.
void TextReport::FreeRangesAtFailure(const OomPostMortem& o) {
  if (o.segments_at_failure == nullptr) return;
  constexpr std::size_t kSizesShown = 5;
  const FreeRangeCensus census = CensusOfFreeRanges(*o.segments_at_failure);
  if (census.ranges == 0) return;
  out_ << absl::StrFormat(
      "\nFree ranges at the failure: %d, in %d of %d segments%s; by size:\n", census.ranges,
      census.segments_with_free, census.segments,
      o.segments_left_out > 0
          ? absl::StrFormat(" (the largest; %d more not looked at)", o.segments_left_out)
          : "");
  const FreeRangeSizes sizes = GroupFreeRangeSizes(census, kSizesShown);
  for (const auto& [shown, count] : sizes.lines) {
    out_ << absl::StrFormat("  %14s x %d\n", shown, count);
  }
  if (sizes.rest > 0) {
    out_ << absl::StrFormat("  ... %d smaller, %s in all\n", sizes.rest,
                            FormatBytes(sizes.rest_bytes));
  }
}

void TextReport::Oom(const OomPostMortem& o) {
  const OomFigures& g = o.figures;
  const std::string rule(std::max<std::size_t>(o.headline.size(), 60), '=');
  out_ << rule << "\n" << o.headline << "\n" << rule << "\n";
  out_ << o.explanation << "\n";
  if (o.approximate) {
    out_ << "(approximate: events were lost before this failure and no resync came yet)\n";
  }
  if (o.failure.recovered) {
    out_ << absl::StrFormat("(the program went on: seq %d allocated as much)\n",
                            o.failure.recovered_by_seq);
  }
  out_ << "\nAt the failure:\n";
  Row("requested", FormatBytes(g.requested_bytes),
      absl::StrFormat("%s, seq %d", o.failure.api_name, o.failure.seq));
  // Wall-clock time, to line the failure up with the job's own logs.
  if (auto wall = s_.WallTimeNs(o.failure.time_ns)) Row("when", FormatWallTime(*wall));
  Row("device total", Bytes(g.device_total_bytes));
  Row("device free", Bytes(g.device_free_bytes),
      g.device_free_bytes.value && !g.mem_info_from_failure ? "(latest sample before it)" : "");
  Row("reserved", FormatBytes(g.reserved_bytes),
      "peak " + FormatBytes(o.peak_reserved_bytes) + PeakSince(s_));
  // Blocks known at syncs only, the last one events before: the block figures are its.
  const std::string as_of_sync =
      g.blocks_synced_at_seq
          ? absl::StrFormat("blocks as of the sync at seq %d", *g.blocks_synced_at_seq)
          : "";
  Row("allocated", FormatBytes(g.allocated_bytes), as_of_sync);
  Row("cached", FormatBytes(g.cached_bytes), as_of_sync);
  Row("largest free range", FormatBytes(g.largest_free_range_bytes), as_of_sync);
  Row("stranded",
      FormatBytes(g.cached_bytes - std::min(g.cached_bytes, g.largest_free_range_bytes)),
      as_of_sync);
  if (g.opaque_bytes > 0) {
    Row("opaque", FormatBytes(g.opaque_bytes), absl::StrFormat("%d segment(s)", g.opaque_segments));
  }
  if (g.pending_free_bytes > 0) Row("pending free", FormatBytes(g.pending_free_bytes));
  if (g.pool_free_bytes > 0) Row("pool free", FormatBytes(g.pool_free_bytes));
  Row("untracked", Bytes(g.untracked_bytes));
  FreeRangesAtFailure(o);
  out_ << "\nFailed call:\n";
  Stack(o.failure.stack_id, StackEndOf(s_, o.failure.stack_id), "    ");
  out_ << "\nAdvice:\n";
  for (const std::string& a : o.advice) out_ << "  - " << a << "\n";
  out_ << "\nLive at the failure, by site:\n";
  Sites(o.sites_at_failure, "    ");
  out_ << absl::StrFormat("\nLive at peak reserved (%s%s), by site:\n",
                          FormatBytes(o.peak_reserved_bytes), PeakSince(s_));
  Sites(o.sites_at_peak, "    ");
  out_ << "\nLast events before the failure:\n";
  const std::size_t first = o.recent_events.size() > options_.max_recent_events
                                ? o.recent_events.size() - options_.max_recent_events
                                : 0;
  for (std::size_t i = first; i < o.recent_events.size(); ++i) {
    const RecentEvent& e = o.recent_events[i];
    std::string what;
    if (e.kind == EventKind::kMemInfo) {
      what = "device free " + FormatBytes(e.size);
    } else if (e.kind == EventKind::kMark) {
      what = "\"" + e.label + "\"";
    } else {
      what = FormatBytes(e.size);
      if (e.address != 0) what += absl::StrFormat(" at 0x%x", e.address);
      if (e.result != 0) what += absl::StrFormat(" result %d", e.result);
    }
    const std::string api =
        e.api != 0 && e.kind != EventKind::kMark ? ApiLabel(e.api) : std::string();
    std::string line =
        absl::StrFormat("  seq %-8d %-18s %-28s %s", e.seq, EventKindName(e.kind), api, what);
    out_ << line << "\n";
  }
  out_ << "\n";
}

void TextReport::RenderOomFile(const OomPostMortem& o, const OomFileNote& note) {
  Title();
  out_ << "Written because " << note.written_because << ".\n";
  if (note.repeats > 1) {
    out_ << absl::StrFormat(
        "The same request failed %d times (seq %d to %d): this file stands for all of them.\n",
        note.repeats, note.first_seq, note.last_seq);
  }
  if (note.recovered_by_seq != 0) {
    out_ << absl::StrFormat(
        "RECOVERED: the program later allocated that size on this device (seq %d).\n",
        note.recovered_by_seq);
  } else {
    out_ << (note.stream_ended ? "Not recovered: no later success of that size before the "
                                 "stream ended.\n"
                               : "Not recovered so far: no later success of that size yet.\n");
  }
  for (const std::string& caveat : ReportCaveats(s_)) out_ << "Note: " << caveat << "\n";
  out_ << "\n";
  Oom(o);
}

void TextReport::Title() {
  if (s_.imported) {
    out_ << "fragscope report — imported allocator snapshot";
  } else {
    out_ << absl::StrFormat("fragscope report — pid %d", s_.pid);
  }
  if (!s_.exe.empty()) out_ << " (" << s_.exe << ")";
  if (!s_.host.empty()) out_ << " on " << s_.host;
  if (s_.rank) {
    out_ << ", rank " << *s_.rank;
    if (s_.world_size) out_ << " of " << *s_.world_size;
  }
  out_ << "\n";
  out_ << absl::StrFormat("%d events, %d dropped; ", s_.events, s_.drops);
  if (s_.stream_ended && s_.ended_by_exec) {
    out_ << "the program exec'ed: its next image is traced in a stream of its own";
  } else if (s_.stream_ended) {
    out_ << (s_.exit_status ? absl::StrFormat("process exited with status %d", *s_.exit_status)
                            : std::string("stream ended"));
  } else {
    out_ << "stream cut before its end (figures are as of the last frame)";
  }
  out_ << "\n";
}

void TextReport::Render() {
  Title();
  // The answer first: what failed and why, before the end-of-run state (which after an OOM is
  // usually a cache given back: zeros).
  const ReportVerdict verdict = BuildVerdict(s_);
  out_ << "Verdict: " << FormatVerdictHeadline(verdict) << "\n";
  for (const VerdictOom& o : verdict.ooms) out_ << "  " << FormatVerdictOom(o) << "\n";
  for (const VerdictFragmentation& f : verdict.fragmentation) {
    out_ << "  " << FormatVerdictFragmentation(f) << "\n";
  }
  for (const std::string& caveat : ReportCaveats(s_)) out_ << "Note: " << caveat << "\n";
  for (const SymbolSourceNote& note : symbolizer_.SymbolSourceNotes()) {
    out_ << "Note: symbols: " << DescribeSymbolSource(note) << "\n";
  }
  out_ << "\nAt the end of the run:\n";
  for (const DeviceSummary& d : s_.devices) Device(d);
  if (!s_.orphan_blocks.empty()) {
    out_ << absl::StrFormat(
        "Orphan blocks (annotated outside any known segment): %d live, %d "
        "seen\n",
        s_.orphan_blocks.size(), s_.orphan_blocks_total);
    for (const OrphanBlock& o : s_.orphan_blocks) {
      out_ << absl::StrFormat("  device %d 0x%x %s (seq %d)\n", o.device, o.address,
                              FormatBytes(o.size), o.seq);
    }
    out_ << "\n";
  }
  Failures();
  for (const OomPostMortem& o : s_.ooms) Oom(o);
  if (s_.ooms_without_postmortem > 0) {
    out_ << absl::StrFormat("%d more OOMs without a post-mortem (limit reached).\n",
                            s_.ooms_without_postmortem);
  }
}

}  // namespace

void RenderText(const ModelSummary& summary, Symbolizer& symbolizer, std::ostream& out,
                const TextReportOptions& options) {
  TextReport(summary, symbolizer, out, options).Render();
}

void RenderOomText(const ModelSummary& summary, const OomPostMortem& oom, const OomFileNote& note,
                   Symbolizer& symbolizer, std::ostream& out) {
  const TextReportOptions options;
  TextReport(summary, symbolizer, out, options).RenderOomFile(oom, note);
}

void RenderText(const ModelSummary& summary, std::ostream& out, const TextReportOptions& options) {
  ModuleOffsetSymbolizer symbolizer(summary.modules);
  RenderText(summary, symbolizer, out, options);
}

}  // namespace fragscope
