#include "fragscope/model/device_state.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "fragscope/model/format_bytes.h"

namespace fragscope {

DeviceState::DeviceState(int ordinal, const ModelOptions& options)
    : ordinal_(ordinal), options_(&options), timeline_(options.timeline_max_points) {}

std::optional<uint64_t> DeviceState::total() const {
  if (info_total && *info_total > 0) return info_total;
  if (last_sample && last_sample->total > 0) return last_sample->total;
  return std::nullopt;
}

void DeviceState::Deposit(const SegmentContribution& c) {
  if (!c.counted) return;
  seg_allocated_ += c.allocated;
  seg_opaque_ += c.opaque;
  seg_cached_ += c.cached;
  seg_pending_ += c.pending;
  seg_blocks_ += c.blocks;
  free_ranges_ += c.free_ranges;
  ++segments_;
  switch (c.coverage) {
    case Coverage::kExact:
      ++exact_segments_;
      seg_exact_ += c.allocated;
      break;
    case Coverage::kOpaque:
      ++opaque_segments_;
      break;
    case Coverage::kAnnotated:
      ++annotated_segments_;
      largest_free_by_segment_.Insert(c.largest_free);
      break;
  }
}

void DeviceState::Retract(const SegmentContribution& c) {
  if (!c.counted) return;
  seg_allocated_ -= c.allocated;
  seg_opaque_ -= c.opaque;
  seg_cached_ -= c.cached;
  seg_pending_ -= c.pending;
  seg_blocks_ -= c.blocks;
  free_ranges_ -= c.free_ranges;
  --segments_;
  switch (c.coverage) {
    case Coverage::kExact:
      --exact_segments_;
      seg_exact_ -= c.allocated;
      break;
    case Coverage::kOpaque:
      --opaque_segments_;
      break;
    case Coverage::kAnnotated:
      --annotated_segments_;
      // Always present (every Retract follows the Deposit of the same contribution); a bug
      // could skew a figure but never crash the collector (MaxMultiset tolerates it).
      largest_free_by_segment_.Erase(c.largest_free);
      if (largest_free_by_segment_.Wasteful()) largest_free_by_segment_.Compact();
      break;
  }
}

void DeviceState::Replace(const SegmentContribution& before, const SegmentContribution& after) {
  if (before.counted != after.counted || before.coverage != after.coverage) {
    Retract(before);
    Deposit(after);
    return;
  }
  if (!after.counted) return;
  if (before.largest_free != after.largest_free) {
    // Only annotated segments have a largest free range (the others' is 0 before and after):
    // one Replace in the summary where Retract + Deposit took an erase and an insert.
    largest_free_by_segment_.Replace(before.largest_free, after.largest_free);
    if (largest_free_by_segment_.Wasteful()) largest_free_by_segment_.Compact();
  }
  // Same coverage: only the sums move (unsigned wrap-around cancels).
  seg_allocated_ += after.allocated - before.allocated;
  if (after.coverage == Coverage::kExact) seg_exact_ += after.allocated - before.allocated;
  seg_opaque_ += after.opaque - before.opaque;
  seg_cached_ += after.cached - before.cached;
  seg_pending_ += after.pending - before.pending;
  seg_blocks_ += after.blocks - before.blocks;
  free_ranges_ += after.free_ranges - before.free_ranges;
}

PoolState& DeviceState::pool(uint64_t id) { return pools_[id]; }

void DeviceState::RetractPool(const PoolState& p) {
  pool_reserved_ -= p.effective_reserved();
  pool_used_ -= p.used;
  pool_pending_ -= p.pending;
  pool_blocks_ -= p.blocks;
}

void DeviceState::DepositPool(const PoolState& p) {
  pool_reserved_ += p.effective_reserved();
  pool_used_ += p.used;
  pool_pending_ += p.pending;
  pool_blocks_ += p.blocks;
}

void DeviceState::AddSite(uint64_t stack_id, uint64_t bytes) { sites_.Add(stack_id, bytes); }

void DeviceState::RemoveSite(uint64_t stack_id, uint64_t bytes) { sites_.Remove(stack_id, bytes); }

void DeviceState::UpdatePeak(uint64_t seq, uint64_t reserved) {
  if (reserved > peak_reserved_) {
    peak_reserved_ = reserved;
    peak_reserved_seq_ = peak_sites_seq_ = seq;
    MarkSites();
    peak_open_ = !settle_peak_;  // a peak that placed a block itself is settled
  } else {
    if (reserved == peak_reserved_ && settle_peak_) {
      peak_sites_seq_ = seq;
      MarkSites();
    }
    peak_open_ = reserved == peak_reserved_ && quiet_event_ && !settle_peak_;
  }
  settle_peak_ = quiet_event_ = false;
}

void DeviceState::MarkSites() {
  sites_.Mark();
  if (!freed_since_mark_.empty()) freed_since_mark_.clear();
}

bool DeviceState::MoveFreedBlockSite(uint64_t address, uint64_t size, uint64_t site) {
  auto it = freed_since_mark_.find(address);
  if (it == freed_since_mark_.end() || (size != 0 && size != it->second.size)) return false;
  sites_.MoveAtMark(it->second.stack_id, site, it->second.size);
  freed_since_mark_.erase(it);
  return true;
}

void DeviceState::MoveSite(uint64_t from, uint64_t to, uint64_t bytes, uint64_t placed_seq) {
  sites_.Move(from, to, bytes, placed_seq != 0 && placed_seq <= peak_sites_seq_);
}

DeviceMetrics DeviceState::Metrics(bool with_reasons) const {
  DeviceMetrics m;
  // Graph memory is device memory this process holds (the graph's pool), so it is reserved and
  // allocated; managed and imported memory are not this process's device segments.
  m.reserved = ReservedNow();
  m.allocated = seg_allocated_ + pool_used_ + graph_bytes;
  m.opaque = seg_opaque_;
  m.cached = seg_cached_;
  m.pending = seg_pending_ + pool_pending_;
  m.largest_free = largest_free_by_segment_.Max();
  m.stranded = m.cached - std::min(m.cached, m.largest_free);
  m.pool_free = pool_reserved_ - std::min(pool_reserved_, pool_used_ + pool_pending_);
  if (!with_reasons) {
    // Same decision, no strings.
    m.fragmentation.value = FragmentationValue(m.cached, m.largest_free);
  } else if (opaque_segments_ > 0) {
    m.fragmentation = Measured<double>::Unknown(absl::StrFormat(
        "%d opaque segment(s) holding %s: a caching allocator carves them and its free ranges "
        "are not visible",
        opaque_segments_, FormatBytes(m.opaque)));
  } else if (m.cached == 0 || m.cached < options_->fragmentation_floor_bytes) {
    m.fragmentation = Measured<double>::Unknown(
        absl::StrFormat("cached %s is below the %s floor: the ratio would be noise",
                        FormatBytes(m.cached), FormatBytes(options_->fragmentation_floor_bytes)));
  } else {
    m.fragmentation = Measured<double>::Known(1.0 - static_cast<double>(m.largest_free) /
                                                        static_cast<double>(m.cached));
  }
  if (!last_sample) {
    m.untracked = Measured<uint64_t>::Unknown(
        with_reasons ? "no device free/total sample (MemInfo) in the stream" : "");
  } else if (last_sample->total == 0 && !total()) {
    // A free figure alone (an OOM entry of a PyTorch snapshot) says nothing of what is used.
    m.untracked = Measured<uint64_t>::Unknown(
        with_reasons ? "the device's total is not in the stream (no DeviceInfo or MemInfo total)"
                     : "");
  } else {
    const uint64_t sample_total = last_sample->total > 0 ? last_sample->total : *total();
    const uint64_t used = sample_total - std::min(sample_total, last_sample->free);
    // Samples and events are not taken at the same instant: clamp rather than go negative.
    m.untracked = Measured<uint64_t>::Known(used - std::min(used, last_sample->reserved_at_sample));
  }
  return m;
}

void DeviceState::AfterEvent(uint64_t seq, uint64_t time_ns) {
  // The per-event path: only the figures peaks and the timeline need, the same sums Metrics()
  // uses (not all of Metrics: untracked, stranded and pool_free are not needed here).
  const uint64_t reserved = ReservedNow();
  const uint64_t allocated = seg_allocated_ + pool_used_ + graph_bytes;
  const uint64_t cached = seg_cached_;
  const uint64_t largest_free = largest_free_by_segment_.Max();
  const std::optional<double> fragmentation = FragmentationValue(cached, largest_free);
  peak_allocated_ = std::max(peak_allocated_, allocated);
  if (fragmentation) {
    max_fragmentation_ = std::max(max_fragmentation_.value_or(0.0), *fragmentation);
  }
  timeline_.Offer([&] {
    return TimelinePoint{seq, time_ns, reserved, allocated, cached, largest_free, fragmentation};
  });
  // Last, so that nothing is live across the call (a tail call): before the rest, it made
  // every call save and restore registers.
  if (reserved > peak_reserved_ || peak_open_) [[unlikely]] {
    UpdatePeak(seq, reserved);
    return;
  }
  settle_peak_ = quiet_event_ = false;
}

void DeviceState::RecordEvent(const RecentEvent& e) {
  if (RecentEvent* slot = NextRecentSlot()) *slot = e;
}

std::vector<RecentEvent> DeviceState::RecentEvents() const {
  std::vector<RecentEvent> out;
  out.reserve(recent_.size());
  out.insert(out.end(), recent_.begin() + recent_head_, recent_.end());
  out.insert(out.end(), recent_.begin(), recent_.begin() + recent_head_);
  return out;
}

void DeviceState::ResetLive() {
  seg_allocated_ = seg_opaque_ = seg_cached_ = seg_pending_ = seg_exact_ = 0;
  segments_ = exact_segments_ = annotated_segments_ = opaque_segments_ = 0;
  seg_blocks_ = free_ranges_ = 0;
  largest_free_by_segment_.Clear();
  driver_segment_bytes = handle_bytes = unmapped_handle_bytes = imported_bytes = 0;
  graph_bytes = managed_bytes = graph_blocks = 0;
  for (auto& [id, p] : pools_) {
    p.used = p.pending = p.blocks = 0;
    p.pending_addresses.clear();
  }
  pool_reserved_ = pool_used_ = pool_pending_ = pool_blocks_ = 0;
  for (const auto& [id, p] : pools_) DepositPool(p);
  sites_.ClearKeepingMark();
}

void DeviceState::FillSummary(DeviceSummary* out) const {
  const DeviceMetrics m = Metrics();
  out->ordinal = ordinal_;
  out->uuid_hex = uuid_hex;
  out->name = name;
  if (auto t = total()) {
    out->total_bytes = Measured<uint64_t>::Known(*t);
  } else {
    out->total_bytes = Measured<uint64_t>::Unknown("no DeviceInfo or MemInfo total");
  }
  if (last_sample) {
    out->device_free_bytes = Measured<uint64_t>::Known(last_sample->free);
    out->device_free_sample_seq = last_sample->seq;
  } else {
    out->device_free_bytes = Measured<uint64_t>::Unknown("no MemInfo sample");
  }
  out->reserved_bytes = m.reserved;
  out->allocated_bytes = m.allocated;
  out->opaque_bytes = m.opaque;
  out->cached_bytes = m.cached;
  out->pending_free_bytes = m.pending;
  out->largest_free_range_bytes = m.largest_free;
  out->fragmentation = m.fragmentation;
  out->stranded_bytes = m.stranded;
  out->untracked_bytes = m.untracked;
  out->peak_reserved_bytes = peak_reserved_;
  out->peak_reserved_seq = peak_reserved_seq_;
  out->peak_allocated_bytes = peak_allocated_;
  if (max_fragmentation_) {
    out->max_fragmentation = Measured<double>::Known(*max_fragmentation_);
  } else {
    out->max_fragmentation = Measured<double>::Unknown(
        "fragmentation was never reportable (cached below the floor or opaque segments)");
  }
  out->pool_reserved_bytes = pool_reserved_;
  out->pool_used_bytes = pool_used_;
  out->pool_pending_free_bytes = pool_pending_;
  out->graph_bytes = graph_bytes;
  out->managed_bytes = managed_bytes;
  out->imported_bytes = imported_bytes;
  out->unmapped_handle_bytes = unmapped_handle_bytes;
  out->pools.clear();
  for (const auto& [id, p] : pools_) {
    PoolSummary ps;
    ps.pool = id;
    ps.sampled_reserved_bytes = p.sampled_reserved
                                    ? Measured<uint64_t>::Known(*p.sampled_reserved)
                                    : Measured<uint64_t>::Unknown("pool attributes never sampled");
    ps.reserved_bytes = p.effective_reserved();
    ps.used_bytes = p.used;
    ps.pending_free_bytes = p.pending;
    ps.blocks = p.blocks;
    out->pools.push_back(std::move(ps));
  }
  std::sort(out->pools.begin(), out->pools.end(),
            [](const PoolSummary& a, const PoolSummary& b) { return a.pool < b.pool; });
  out->segments = segments_;
  out->exact_segments = exact_segments_;
  out->exact_bytes = seg_exact_;
  out->annotated_segments = annotated_segments_;
  out->opaque_segments = opaque_segments_;
  out->blocks = seg_blocks_ + pool_blocks_ + graph_blocks;
  out->free_ranges = free_ranges_;
  // sites and sites_at_peak: the ProcessModel's, which merges sites by their reported stacks.
  out->timeline = timeline_.points();
}

}  // namespace fragscope
