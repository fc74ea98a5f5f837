// JSON rendering of a ModelSummary. The schema is documented field by field in
// collector/REPORT.md; keep the two in step.
#include "fragscope/report/report_json.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "fragscope.pb.h"
#include "fragscope/report/job_summary.h"
#include "fragscope/report/json_writer.h"
#include "fragscope/report/oom_file.h"
#include "fragscope/report/report_caveats.h"
#include "fragscope/report/report_verdict.h"
#include "fragscope/report/stack_cut.h"

namespace fragscope {
namespace {

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

class JsonReport {
 public:
  JsonReport(const ModelSummary& summary, Symbolizer& symbolizer, std::ostream& out,
             const JsonReportOptions& options)
      : s_(summary), symbolizer_(symbolizer), w_(out, options.pretty), options_(options) {}

  void Render();
  void Verdict();
  // One OOM's file (oom_file.h).
  void RenderOomFile(const OomPostMortem& o, const OomFileNote& note);

 private:
  void MaybeUint(std::string_view key, const Measured<uint64_t>& m) {
    w_.Key(key);
    if (m.value) {
      w_.Uint(*m.value);
    } else {
      w_.Null();
    }
  }
  void MaybeDouble(std::string_view key, const Measured<double>& m) {
    w_.Key(key);
    if (m.value) {
      w_.Double(*m.value);
    } else {
      w_.Null();
    }
  }
  // "peak_scope": what the peak and maximum figures beside it cover, in the words the text
  // report puts beside them ("at snapshot time", "since seq S", "in the snapshot's history"),
  // null for the whole run.
  void PeakScope() {
    const std::string since = PeakSince(s_);
    w_.Key("peak_scope");
    if (since.empty()) {
      w_.Null();
    } else {
      w_.String(std::string_view(since).substr(1));
    }
  }
  void NullReason(std::string_view key, const std::string& reason, bool known) {
    w_.Key(key);
    if (known) {
      w_.Null();
    } else {
      w_.String(reason);
    }
  }
  // "stack": its frames, then "stack_end": how the capture ended (`end`, StackEndName).
  void Stack(uint64_t stack_id, StackEnd end);
  void Stack(uint64_t stack_id) { Stack(stack_id, StackEndOf(s_, stack_id)); }
  void Sites(std::string_view key, const std::vector<SiteEntry>& sites);
  void Device(const DeviceSummary& d);
  void Failure(const FailedAllocation& f);
  void Oom(const OomPostMortem& o);

  const ModelSummary& s_;
  Symbolizer& symbolizer_;
  JsonWriter w_;
  const JsonReportOptions& options_;
};

void JsonReport::Stack(uint64_t stack_id, StackEnd end) {
  w_.Key("stack");
  w_.BeginArray();
  std::vector<SymbolizedFrame> frames = SymbolizeStack(s_, stack_id, symbolizer_);
  if (frames.size() > options_.max_stack_frames) frames.resize(options_.max_stack_frames);
  for (const SymbolizedFrame& f : frames) {
    w_.BeginObject();
    w_.Key("pc");
    if (f.pc != 0) {
      w_.String(Hex(f.pc));
    } else {
      w_.Null();
    }
    w_.Field("function", f.function);
    w_.Field("file", f.file);
    w_.Field("line", static_cast<uint64_t>(f.line));
    w_.Field("module", f.module);
    w_.Key("module_offset");
    if (!f.module.empty()) {
      w_.String(Hex(f.module_offset));
    } else {
      w_.Null();
    }
    w_.Field("text", FormatFrame(f));
    w_.EndObject();
  }
  w_.EndArray();
  w_.Field("stack_end", StackEndName(end));
}

void JsonReport::Sites(std::string_view key, const std::vector<SiteEntry>& sites) {
  w_.Key(key);
  w_.BeginArray();
  for (const SiteEntry& site : sites) {
    w_.BeginObject();
    w_.Field("stack_id", site.stack_id);
    w_.Field("live_bytes", site.live_bytes);
    w_.Field("count", site.count);
    Stack(site.stack_id, SiteStackEnd(s_, site));
    w_.EndObject();
  }
  w_.EndArray();
}

void JsonReport::Device(const DeviceSummary& d) {
  w_.BeginObject();
  w_.Field("device", d.ordinal);
  w_.Field("uuid", GpuUuidName(d.uuid_hex));  // nvidia-smi's form, "" when unknown
  w_.Field("name", d.name);
  MaybeUint("total_bytes", d.total_bytes);
  MaybeUint("device_free_bytes", d.device_free_bytes);
  w_.Field("reserved_bytes", d.reserved_bytes);
  w_.Field("allocated_bytes", d.allocated_bytes);
  w_.Field("opaque_bytes", d.opaque_bytes);
  w_.Field("cached_bytes", d.cached_bytes);
  w_.Field("pending_free_bytes", d.pending_free_bytes);
  w_.Field("largest_free_range_bytes", d.largest_free_range_bytes);
  MaybeDouble("fragmentation", d.fragmentation);
  NullReason("fragmentation_null_reason", d.fragmentation.unknown_reason, d.fragmentation.known());
  w_.Field("stranded_bytes", d.stranded_bytes);
  MaybeUint("untracked_bytes", d.untracked_bytes);
  NullReason("untracked_null_reason", d.untracked_bytes.unknown_reason, d.untracked_bytes.known());
  w_.Field("peak_reserved_bytes", d.peak_reserved_bytes);
  w_.Field("peak_reserved_seq", d.peak_reserved_seq);
  w_.Field("peak_allocated_bytes", d.peak_allocated_bytes);
  MaybeDouble("max_fragmentation", d.max_fragmentation);
  PeakScope();
  w_.Field("pool_reserved_bytes", d.pool_reserved_bytes);
  w_.Field("pool_used_bytes", d.pool_used_bytes);
  w_.Field("pool_pending_free_bytes", d.pool_pending_free_bytes);
  w_.Field("graph_bytes", d.graph_bytes);
  w_.Field("managed_bytes", d.managed_bytes);
  w_.Field("imported_bytes", d.imported_bytes);
  w_.Field("unmapped_handle_bytes", d.unmapped_handle_bytes);
  w_.Key("pools");
  w_.BeginArray();
  for (const PoolSummary& p : d.pools) {
    w_.BeginObject();
    w_.Field("pool", Hex(p.pool));
    w_.Field("reserved_bytes", p.reserved_bytes);
    MaybeUint("sampled_reserved_bytes", p.sampled_reserved_bytes);
    w_.Field("used_bytes", p.used_bytes);
    w_.Field("pending_free_bytes", p.pending_free_bytes);
    w_.Field("blocks", p.blocks);
    w_.FieldNull("largest_free_range_bytes");  // a pool's layout is not visible
    w_.EndObject();
  }
  w_.EndArray();
  w_.Field("segments", d.segments);
  w_.Field("exact_segments", d.exact_segments);
  w_.Field("exact_bytes", d.exact_bytes);
  w_.Field("annotated_segments", d.annotated_segments);
  w_.Field("opaque_segments", d.opaque_segments);
  w_.Field("blocks", d.blocks);
  w_.Field("free_ranges", d.free_ranges);
  w_.Field("oom_count", d.oom_count);
  Sites("sites", d.sites);
  Sites("sites_at_peak", d.sites_at_peak);
  if (options_.include_timeline) {
    w_.Key("timeline");
    w_.BeginArray();
    for (const TimelinePoint& p : d.timeline) {
      w_.BeginObject();
      w_.Field("seq", p.seq);
      w_.Field("time_ns", p.time_ns);
      w_.Field("reserved_bytes", p.reserved_bytes);
      w_.Field("allocated_bytes", p.allocated_bytes);
      w_.Field("cached_bytes", p.cached_bytes);
      w_.Field("largest_free_range_bytes", p.largest_free_range_bytes);
      w_.Key("fragmentation");
      if (p.fragmentation) {
        w_.Double(*p.fragmentation);
      } else {
        w_.Null();
      }
      w_.EndObject();
    }
    w_.EndArray();
  }
  w_.EndObject();
}

void JsonReport::Failure(const FailedAllocation& f) {
  w_.BeginObject();
  w_.Field("seq", f.seq);
  w_.Field("time_ns", f.time_ns);
  w_.Field("device", f.device);
  w_.Field("api", f.api_name);
  w_.Field("result", f.result);
  w_.Field("requested_bytes", f.requested_bytes);
  w_.Field("stream", Hex(f.stream));
  w_.Field("pool", Hex(f.pool));
  w_.Field("from_sub_allocator", f.from_sub_allocator);
  w_.Field("is_oom", f.is_oom);
  w_.Field("recovered", f.recovered);
  w_.Key("recovered_by_seq");
  if (f.recovered) {
    w_.Uint(f.recovered_by_seq);
  } else {
    w_.Null();
  }
  w_.Key("superseded_by_seq");
  if (f.superseded_by_seq != 0) {
    w_.Uint(f.superseded_by_seq);
  } else {
    w_.Null();
  }
  w_.Field("has_postmortem", f.has_postmortem);
  Stack(f.stack_id);
  w_.EndObject();
}

void JsonReport::Oom(const OomPostMortem& o) {
  const OomFigures& g = o.figures;
  w_.BeginObject();
  w_.Field("seq", o.failure.seq);
  w_.Field("device", o.failure.device);
  w_.Field("api", o.failure.api_name);
  w_.Field("requested_bytes", o.failure.requested_bytes);
  w_.Field("from_sub_allocator", o.failure.from_sub_allocator);
  w_.Field("recovered", o.failure.recovered);
  w_.FieldOrNull("wall_time_ns", s_.WallTimeNs(o.failure.time_ns));
  w_.Field("class", OomClassName(o.oom_class));
  w_.Field("headline", o.headline);
  w_.Field("explanation", o.explanation);
  MaybeUint("device_total_bytes", g.device_total_bytes);
  MaybeUint("device_free_bytes", g.device_free_bytes);
  w_.Field("mem_info_from_failure", g.mem_info_from_failure);
  w_.Field("reserved_bytes", g.reserved_bytes);
  w_.Field("allocated_bytes", g.allocated_bytes);
  w_.Field("opaque_bytes", g.opaque_bytes);
  w_.Field("opaque_segments", g.opaque_segments);
  w_.Field("cached_bytes", g.cached_bytes);
  w_.Field("pending_free_bytes", g.pending_free_bytes);
  w_.Field("pool_free_bytes", g.pool_free_bytes);
  w_.Field("graph_bytes", g.graph_bytes);
  w_.Field("largest_free_range_bytes", g.largest_free_range_bytes);
  w_.Field("largest_compatible_free_range_bytes", g.largest_compatible_free_range_bytes);
  w_.Field("largest_free_range_if_pending_completed_bytes",
           g.largest_free_range_if_pending_completed_bytes);
  w_.Field("stranded_bytes", g.cached_bytes - std::min(g.cached_bytes, g.largest_free_range_bytes));
  MaybeUint("untracked_bytes", g.untracked_bytes);
  w_.Field("peak_reserved_bytes", o.peak_reserved_bytes);
  PeakScope();
  w_.Key("blocks_synced_at_seq");
  if (g.blocks_synced_at_seq) {
    w_.Uint(*g.blocks_synced_at_seq);
  } else {
    w_.Null();
  }
  w_.Field("approximate", o.approximate);
  // Where the cache lay at the failure (the post-mortem's segment map); null when there is no
  // map, and map_missing says why.
  w_.Key("free_ranges_at_failure");
  if (o.segments_at_failure != nullptr) {
    constexpr std::size_t kSizesListed = 16;
    const FreeRangeCensus census = CensusOfFreeRanges(*o.segments_at_failure);
    w_.BeginObject();
    w_.Field("ranges", census.ranges);
    w_.Field("bytes", census.bytes);
    w_.Field("segments", census.segments);
    w_.Field("segments_with_free", census.segments_with_free);
    w_.Field("segments_left_out", o.segments_left_out);
    w_.Key("by_size");  // largest first, at most kSizesListed sizes
    w_.BeginArray();
    for (std::size_t i = 0; i < census.by_size.size() && i < kSizesListed; ++i) {
      w_.BeginObject();
      w_.Field("bytes", census.by_size[i].first);
      w_.Field("count", census.by_size[i].second);
      w_.EndObject();
    }
    w_.EndArray();
    w_.EndObject();
  } else {
    w_.Null();
  }
  NullReason("map_missing", o.map_missing, o.map_missing.empty());
  Stack(o.failure.stack_id);
  w_.FieldStrings("advice", o.advice);
  Sites("sites_at_failure", o.sites_at_failure);
  Sites("sites_at_peak", o.sites_at_peak);
  w_.Key("recent_events");
  w_.BeginArray();
  for (const RecentEvent& e : o.recent_events) {
    w_.BeginObject();
    w_.Field("seq", e.seq);
    w_.Field("time_ns", e.time_ns);
    w_.Field("kind", EventKindName(e.kind));
    w_.Field("api", ApiName(e.api));
    w_.Field("address", Hex(e.address));
    w_.Field("size", e.size);
    w_.Field("result", e.result);
    w_.Field("stack_id", e.stack_id);
    if (!e.label.empty()) w_.Field("label", e.label);
    w_.EndObject();
  }
  w_.EndArray();
  w_.EndObject();
}

// The answer a reader looks for first, as the text report opens with it (report_verdict.h).
void JsonReport::Verdict() {
  const ReportVerdict v = BuildVerdict(s_);
  w_.Key("verdict");
  w_.BeginObject();
  w_.Field("headline", FormatVerdictHeadline(v));
  w_.Field("ending", v.ending);
  w_.Field("approximate", v.approximate);
  w_.Key("ooms");
  w_.BeginArray();
  for (const VerdictOom& o : v.ooms) {
    w_.BeginObject();
    w_.Field("device", o.device);
    w_.Field("requested_bytes", o.requested_bytes);
    w_.Field("class", o.oom_class);
    w_.Field("reason", o.reason);
    w_.Field("first_seq", o.first_seq);
    w_.Field("last_seq", o.last_seq);
    w_.Field("count", o.count);
    w_.Field("recovered", o.recovered);
    w_.EndObject();
  }
  w_.EndArray();
  w_.Key("fragmentation");
  w_.BeginArray();
  for (const VerdictFragmentation& f : v.fragmentation) {
    w_.BeginObject();
    w_.Field("device", f.device);
    MaybeDouble("worst", f.worst);
    NullReason("worst_null_reason", f.worst.unknown_reason, f.worst.known());
    w_.Field("peak_reserved_bytes", f.peak_reserved_bytes);
    w_.EndObject();
  }
  w_.EndArray();
  w_.EndObject();
}

void JsonReport::RenderOomFile(const OomPostMortem& o, const OomFileNote& note) {
  w_.BeginObject();
  w_.Field("schema_version", kJsonReportSchemaVersion);
  w_.Key("process");
  w_.BeginObject();
  w_.Field("pid", static_cast<uint64_t>(s_.pid));
  w_.Field("host", s_.host);
  w_.Field("exe", s_.exe);
  w_.FieldOrNull("rank", s_.rank);
  w_.FieldOrNull("world_size", s_.world_size);
  w_.EndObject();
  w_.Field("written_because", note.written_because);
  w_.Field("stream_ended", note.stream_ended);
  w_.Key("repeats");
  w_.BeginObject();
  w_.Field("count", note.repeats);
  w_.Field("first_seq", note.first_seq);
  w_.Field("last_seq", note.last_seq);
  w_.EndObject();
  w_.Field("recovered", note.recovered_by_seq != 0);
  w_.Key("recovered_by_seq");
  if (note.recovered_by_seq != 0) {
    w_.Uint(note.recovered_by_seq);
  } else {
    w_.Null();
  }
  w_.Key("oom");
  Oom(o);
  w_.EndObject();
}

void JsonReport::Render() {
  w_.BeginObject();
  w_.Field("schema_version", kJsonReportSchemaVersion);
  Verdict();
  w_.Key("process");
  w_.BeginObject();
  w_.Field("pid", static_cast<uint64_t>(s_.pid));
  w_.Field("host", s_.host);
  w_.Field("exe", s_.exe);
  w_.FieldOrNull("rank", s_.rank);
  w_.FieldOrNull("world_size", s_.world_size);
  w_.Field("attached", s_.attached);
  w_.Field("imported", s_.imported);
  w_.Field("history_complete", s_.history_complete);
  w_.FieldOrNull("history_from_seq", s_.history_from_seq);
  w_.Field("release_stacks", s_.release_stacks);
  w_.Field("stream_ended", s_.stream_ended);
  w_.Field("ended_by_exec", s_.ended_by_exec);
  w_.Field("exec_image", static_cast<uint64_t>(s_.exec_image));
  w_.Key("exit_status");
  if (s_.exit_status) {
    w_.Int(*s_.exit_status);
  } else {
    w_.Null();
  }
  w_.EndObject();
  w_.Field("frames", s_.frames);
  w_.Field("events", s_.events);
  w_.Field("drops", s_.drops);
  w_.Field("last_seq", s_.last_seq);
  w_.Field("unmatched_events", s_.unmatched_events);
  w_.Field("live_entries_not_held", s_.live_entries_not_held);
  w_.Field("not_held_since_seq", s_.not_held_since_seq);
  w_.Field("block_syncs", s_.block_syncs);
  w_.Field("last_block_sync_seq", s_.last_block_sync_seq);
  w_.Field("blocks_known_at_end", s_.blocks_known_at_end);
  w_.Key("approximate_intervals");
  w_.BeginArray();
  for (const ApproximateInterval& a : s_.approximate_intervals) {
    w_.BeginObject();
    w_.Field("from_seq", a.from_seq);
    w_.Key("to_seq");
    if (a.to_seq) {
      w_.Uint(*a.to_seq);
    } else {
      w_.Null();
    }
    // 0 only for a resync without a Drops frame before it: lost, but not counted.
    w_.Key("dropped_events");
    if (a.dropped_events > 0) {
      w_.Uint(a.dropped_events);
    } else {
      w_.Null();
    }
    w_.EndObject();
  }
  w_.EndArray();
  w_.Key("symbol_sources");
  w_.BeginArray();
  for (const SymbolSourceNote& note : symbolizer_.SymbolSourceNotes()) {
    w_.BeginObject();
    w_.Field("module", note.module);
    w_.Field("build_id", note.build_id_hex);
    w_.Field("problem", note.build_id_differs ? "build_id_differs" : "missing");
    w_.Key("found_build_id");
    if (note.build_id_differs) {
      w_.String(note.found_build_id_hex);
    } else {
      w_.Null();
    }
    w_.Field("frames_from", note.from_stored_symbols ? "stored_symbols" : "module_offset");
    w_.Field("text", DescribeSymbolSource(note));
    w_.EndObject();
  }
  w_.EndArray();
  w_.Key("devices");
  w_.BeginArray();
  for (const DeviceSummary& d : s_.devices) Device(d);
  w_.EndArray();
  w_.Key("failed_allocations");
  w_.BeginArray();
  for (const FailedAllocation& f : s_.failed_allocations) Failure(f);
  w_.EndArray();
  w_.Key("ooms");
  w_.BeginArray();
  for (const OomPostMortem& o : s_.ooms) Oom(o);
  w_.EndArray();
  w_.Field("ooms_without_postmortem", s_.ooms_without_postmortem);
  // All devices' live sites in one list (largest first), for tools that do not care where.
  w_.Key("sites");
  w_.BeginArray();
  std::vector<std::pair<int, SiteEntry>> sites;
  for (const DeviceSummary& d : s_.devices) {
    for (const SiteEntry& site : d.sites) sites.emplace_back(d.ordinal, site);
  }
  std::stable_sort(sites.begin(), sites.end(), [](const auto& a, const auto& b) {
    return a.second.live_bytes > b.second.live_bytes;
  });
  for (const auto& [device, site] : sites) {
    w_.BeginObject();
    w_.Field("device", device);
    w_.Field("stack_id", site.stack_id);
    w_.Field("live_bytes", site.live_bytes);
    w_.Field("count", site.count);
    Stack(site.stack_id, SiteStackEnd(s_, site));
    w_.EndObject();
  }
  w_.EndArray();
  w_.Key("orphan_blocks");
  w_.BeginArray();
  for (const OrphanBlock& o : s_.orphan_blocks) {
    w_.BeginObject();
    w_.Field("seq", o.seq);
    w_.Field("device", o.device);
    w_.Field("address", Hex(o.address));
    w_.Field("size", o.size);
    w_.Field("allocator", o.allocator);
    Stack(o.stack_id);
    w_.EndObject();
  }
  w_.EndArray();
  w_.Field("orphan_blocks_total", s_.orphan_blocks_total);
  w_.EndObject();
}

}  // namespace

void RenderJson(const ModelSummary& summary, Symbolizer& symbolizer, std::ostream& out,
                const JsonReportOptions& options) {
  JsonReport(summary, symbolizer, out, options).Render();
}

void RenderOomJson(const ModelSummary& summary, const OomPostMortem& oom, const OomFileNote& note,
                   Symbolizer& symbolizer, std::ostream& out) {
  const JsonReportOptions options;
  JsonReport(summary, symbolizer, out, options).RenderOomFile(oom, note);
}

void RenderJson(const ModelSummary& summary, std::ostream& out, const JsonReportOptions& options) {
  ModuleOffsetSymbolizer symbolizer(summary.modules);
  RenderJson(summary, symbolizer, out, options);
}

}  // namespace fragscope
