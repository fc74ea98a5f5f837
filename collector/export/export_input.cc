#include "fragscope/export/export_input.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "fragscope/model/format_bytes.h"

namespace fragscope::exporter {
namespace {

void AddStack(const ProcessModel& model, uint64_t id, ModelSummary* summary) {
  if (id == 0 || summary->stacks.count(id)) return;
  if (std::optional<StackInfo> s = model.FindStack(id)) summary->stacks[id] = *std::move(s);
}

// The stacks a map names: each segment's allocation and each block's.
void AddLayoutStacks(const ProcessModel& model, const std::vector<SegmentLayout>& layouts,
                     ModelSummary* summary) {
  for (const SegmentLayout& s : layouts) {
    AddStack(model, s.stack_id, summary);
    for (const BlockLayout& b : s.blocks) AddStack(model, b.stack_id, summary);
  }
}

}  // namespace

ExportInput CaptureExportInput(const ProcessModel& model, const CaptureOptions& options) {
  ExportInput in;
  in.summary = model.Summarize();
  in.segments_captured = true;
  for (const DeviceSummary& d : in.summary.devices) {
    std::vector<SegmentLayout> layouts =
        model.SegmentLayouts(d.ordinal, options.max_segments_per_device);
    AddLayoutStacks(model, layouts, &in.summary);
    const uint64_t kept = layouts.size();
    if (d.segments > kept) in.segments_left_out[d.ordinal] = d.segments - kept;
    in.segments[d.ordinal] = std::move(layouts);
  }
  // The post-mortems' maps name sites too (blocks long freed by the end).
  for (const OomPostMortem& o : in.summary.ooms) {
    if (o.segments_at_failure != nullptr)
      AddLayoutStacks(model, *o.segments_at_failure, &in.summary);
  }
  return in;
}

absl::StatusOr<ExportMoment> ResolveExportMoment(std::string_view at, const ModelSummary& whole) {
  ExportMoment m;
  m.description = "the end of the trace";
  auto oom_moment = [&](std::size_t index) {
    const OomPostMortem& o = whole.ooms[index];
    m.stop_at_seq = o.failure.seq;
    m.description =
        absl::StrFormat("OOM %d of %d (seq %d, %s requested on device %d%s)", index + 1,
                        whole.ooms.size(), o.failure.seq, FormatBytes(o.failure.requested_bytes),
                        o.failure.device, o.failure.recovered ? ", recovered" : "");
    return m;
  };
  auto first_unrecovered = [&]() -> std::optional<std::size_t> {
    for (std::size_t i = 0; i < whole.ooms.size(); ++i) {
      if (!whole.ooms[i].failure.recovered) return i;
    }
    return std::nullopt;
  };
  if (at.empty()) {
    if (std::optional<std::size_t> i = first_unrecovered()) return oom_moment(*i);
    return m;
  }
  if (at == "end") return m;
  if (at == "peak") {
    const DeviceSummary* best = nullptr;
    for (const DeviceSummary& d : whole.devices) {
      if (d.peak_reserved_seq != 0 &&
          (best == nullptr || d.peak_reserved_bytes > best->peak_reserved_bytes)) {
        best = &d;
      }
    }
    if (best == nullptr) return m;  // nothing was ever reserved: the end is the peak
    m.stop_at_seq = best->peak_reserved_seq;
    m.stop_after_blocks = true;
    m.description =
        absl::StrFormat("the peak of reserved memory on device %d (%s, seq %d)", best->ordinal,
                        FormatBytes(best->peak_reserved_bytes), best->peak_reserved_seq);
    return m;
  }
  if (at == "oom") {
    if (std::optional<std::size_t> i = first_unrecovered()) return oom_moment(*i);
    if (whole.ooms.empty()) {
      return absl::NotFoundError("--at oom: the trace has no OOM; use --at end or --at peak");
    }
    return absl::NotFoundError(absl::StrFormat(
        "--at oom: every OOM of the trace was recovered; name one with --at oom:N (1..%d)",
        whole.ooms.size()));
  }
  if (at.substr(0, 4) == "oom:") {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(std::string(at.substr(4)), &n) || n == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--at '%s': N in oom:N counts the OOMs from 1", std::string(at)));
    }
    if (n > whole.ooms.size()) {
      return absl::NotFoundError(absl::StrFormat(
          "--at '%s': the trace has %d OOM post-mortem(s)%s", std::string(at), whole.ooms.size(),
          whole.ooms.empty() ? "; use --at end or --at peak" : ""));
    }
    return oom_moment(n - 1);
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("--at '%s' is not a moment: use end, peak, oom or oom:N", std::string(at)));
}

ExportInput CaptureExportInputByReplay(const FrameSource& next, const ModelOptions& model_options,
                                       const ExportMoment& moment, const CaptureOptions& options) {
  ProcessModel model(model_options);
  ReplayOptions replay;
  replay.stop_at_seq = moment.stop_at_seq;
  replay.stop_after_blocks = moment.stop_after_blocks;
  ReplayRecord record;
  ReplayStream(next, replay, model, record);
  ExportInput in = CaptureExportInput(model, options);
  for (const auto& [device, entries] : record.history) {
    for (const HistoryEntry& e : entries) AddStack(model, e.stack_id, &in.summary);
  }
  in.record = std::move(record);
  in.history_recorded = true;
  in.moment = moment.description;
  return in;
}

}  // namespace fragscope::exporter
