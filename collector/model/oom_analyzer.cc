#include "fragscope/model/oom_analyzer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "fragscope/model/format_bytes.h"

namespace fragscope {
namespace {

std::string B(uint64_t bytes) { return FormatBytes(bytes); }

void AdviseOpaque(const OomFigures& f, OomVerdict* v) {
  v->advice.push_back(absl::StrFormat(
      "%d segment(s) (%s) come from a caching allocator fragscope cannot see into. Make them "
      "visible: for PyTorch load the fragscope PyTorch adapter (scripts/), which annotates every "
      "block; other allocators can report blocks through annotate.h.",
      f.opaque_segments, B(f.opaque_bytes)));
}

}  // namespace

// Decision rules, in order (r = requested bytes; all figures at the failure, on its device):
//
//   T = device total, F = device free (from the failure's own sample when it has one, else the
//   latest MemInfo before it). Without both the class is `unknown`, except with F alone when
//   held + r + context overhead <= F + reserved and O = 0: the device has at least F + reserved,
//   so capacity and external use are ruled out and rules 4.. decide (a PyTorch snapshot's oom
//   entry records F only).
//   held  = allocated + pending frees        (bytes this process certainly holds; pool blocks and
//                                             graph memory included)
//   O     = opaque bytes                      (held or free: cannot tell)
//   reach = F + reserved                      (all this process could hold while memory outside
//                                             its segments stays where it is)
//   room  = T - ModelOptions::context_overhead_bytes
//
//   1. capacity       held + r > room: even alone on the device, with every cached byte given
//                     back and perfect packing, it does not fit.
//   2. with O > 0:    external if held + O + r <= room (fits the device even if every opaque
//                     byte is in use) and held + r > reach (does not fit this process's reach
//                     even if every opaque byte is free); otherwise `unknown`: the opaque bytes
//                     decide it.
//   3. external       held + r > reach: it would fit the device, but memory outside this
//                     process's segments (other processes, context, memory from before an
//                     attach: `untracked`) holds the difference.
//   From here r <= F + cached + pool free + unmapped handles: the bytes exist in this process's
//   reach, so the question is their layout.
//   4. r <= F:        `unknown`: the device had r free; a limit refused it (per-process memory
//                     fraction, pool limits) or the sample is stale.
//   5. largest_free >= r: a free range fits. If none in a segment of the request's stream and
//                     pool does (largest compatible < r): unusable_cache (another stream/pool).
//                     Otherwise `unknown`: the allocator declined a fitting range (policy, e.g.
//                     oversize blocks are not split).
//   6. unusable_cache if a free range >= r would exist once pending frees complete.
//   7. fragmentation  r <= cached + F (and r > largest_free, r > F): the bytes exist, not in
//                     one piece.
//   8. unusable_cache otherwise: the missing bytes are pool reservations (or created but
//                     unmapped VMM handles) this request cannot use.
//
// Then, when the sub-allocator's blocks are known at syncs only and the last sync came events
// before the failure (OomFigures::blocks_synced_at_seq): `unknown`, whatever the rules gave.
// Every class above reads the blocks (held, cached, the free ranges), and those are the sync's;
// the explanation says what the sync's blocks would give.
namespace {

OomVerdict ClassifyFromFigures(const OomFigures& f, const FailedAllocation& failure,
                               const ModelOptions& options);

}  // namespace

OomVerdict ClassifyOom(const OomFigures& f, const FailedAllocation& failure,
                       const ModelOptions& options) {
  OomVerdict v = ClassifyFromFigures(f, failure, options);
  if (!f.blocks_synced_at_seq) return v;
  OomVerdict stale;
  stale.oom_class = OomClass::kUnknown;
  stale.explanation = absl::StrFormat(
      "The sub-allocator's blocks are read from its own state at syncs only (a snapshot diff), "
      "the last at seq %d, events before this failure: what it held and where its free ranges "
      "were at the failure is not known. With the blocks of that sync the class would be %s: %s",
      *f.blocks_synced_at_seq, OomClassName(v.oom_class), v.explanation);
  stale.advice.push_back(
      "Let the failure sync the blocks first: PyTorch's OOM observer does it when the fragscope "
      "PyTorch adapter is loaded (or found by `fragscope attach`); the adapter's C++ extension "
      "follows every block.");
  for (std::string& a : v.advice) stale.advice.push_back(std::move(a));
  return stale;
}

namespace {

OomVerdict ClassifyFromFigures(const OomFigures& f, const FailedAllocation& failure,
                               const ModelOptions& options) {
  OomVerdict v;
  const uint64_t r = f.requested_bytes;
  const uint64_t held = f.allocated_bytes + f.pending_free_bytes;
  // Free bytes without the total (a PyTorch snapshot's oom entry records only free): the device
  // has at least free + reserved, so a request that fits there rules capacity and external use
  // out, and the classes below need no more. Anything else stays unknown.
  const bool free_only =
      !f.device_total_bytes.known() && f.device_free_bytes.known() && f.opaque_bytes == 0 &&
      held + r + options.context_overhead_bytes <= *f.device_free_bytes.value + f.reserved_bytes;
  if ((!f.device_total_bytes.known() || !f.device_free_bytes.known()) && !free_only) {
    v.oom_class = OomClass::kUnknown;
    if (f.device_free_bytes.known()) {
      v.explanation = absl::StrFormat(
          "The device's total is not known (only its free bytes, %s), and the request with what "
          "this process holds (%s) does not fit free + reserved (%s): capacity and external use "
          "cannot be told apart.",
          B(*f.device_free_bytes.value), B(held + r),
          B(*f.device_free_bytes.value + f.reserved_bytes));
    } else {
      v.explanation =
          "No device free/total sample at or before the failure, so capacity, external use and "
          "fragmentation cannot be told apart.";
    }
    v.advice.push_back(
        "Run with the agent active from the start so MemInfo samples are taken at failures.");
    if (f.opaque_segments > 0) AdviseOpaque(f, &v);
    return v;
  }
  const uint64_t free = *f.device_free_bytes.value;
  const uint64_t reach = free + f.reserved_bytes;
  // Without a total, what is known of it: at least reach (enough for the tests below).
  const uint64_t total = free_only ? reach : *f.device_total_bytes.value;
  const uint64_t room = total - std::min(total, options.context_overhead_bytes);
  const uint64_t outside = total - std::min(total, reach);

  if (held + r > room) {
    v.oom_class = OomClass::kCapacity;
    v.explanation = absl::StrFormat(
        "This process holds %s (allocated %s + pending frees %s); with the request that is %s, "
        "more than the %s the device has%s. It cannot fit even with every cached byte returned "
        "and perfect packing.",
        B(held), B(f.allocated_bytes), B(f.pending_free_bytes), B(held + r), B(room),
        options.context_overhead_bytes > 0 ? " after the context allowance" : "");
    v.advice.push_back(
        "Reduce what is live at the failure: a smaller batch or sequence length, activation "
        "checkpointing (torch.utils.checkpoint), lower precision (bf16/fp16, 8-bit optimizer "
        "state), or sharding across devices (FSDP/ZeRO).");
    v.advice.push_back("The sites holding the most memory at the failure are listed below.");
    return v;
  }
  const std::string outside_text = absl::StrFormat(
      "%s of the device is outside this process's segments (device total %s - free %s - "
      "reserved %s)",
      B(outside), B(total), B(free), B(f.reserved_bytes));
  // The process's own CUDA context is outside its segments too (hundreds of MiB on a real GPU),
  // so "other processes" alone would send a user with the GPU to themselves looking for one.
  const std::string external_advice =
      "Memory outside this process's segments holds the difference: other processes on the GPU "
      "(nvidia-smi lists them; give the job a device of its own with CUDA_VISIBLE_DEVICES), this "
      "process's own CUDA context and what libraries allocate beside its allocator (usually a "
      "few hundred MiB: if nvidia-smi shows this process alone, that is where the bytes went, "
      "and the job needs that much headroom), or, after an attach, memory allocated before "
      "fragscope started.";
  if (f.opaque_bytes > 0) {
    if (held + f.opaque_bytes + r <= room && held + r > reach) {
      v.oom_class = OomClass::kExternal;
      v.explanation = absl::StrFormat(
          "The request fits the device even if all %s of opaque segments are in use (%s + %s "
          "<= %s), but not in this process's reach even if they are all free: %s.",
          B(f.opaque_bytes), B(held + f.opaque_bytes), B(r), B(room), outside_text);
      v.advice.push_back(external_advice);
      return v;
    }
    v.oom_class = OomClass::kUnknown;
    v.explanation = absl::StrFormat(
        "%d opaque segment(s) hold %s whose used part is unknown: whether the request failed "
        "for capacity or for fragmentation depends on them.",
        f.opaque_segments, B(f.opaque_bytes));
    AdviseOpaque(f, &v);
    return v;
  }
  if (held + r > reach) {
    v.oom_class = OomClass::kExternal;
    v.explanation = absl::StrFormat(
        "This process holds %s; with the request that is %s, which fits the device (%s) but "
        "not what this process can reach (free %s + reserved %s = %s): %s.",
        B(held), B(held + r), B(room), B(free), B(f.reserved_bytes), B(reach), outside_text);
    v.advice.push_back(external_advice);
    return v;
  }
  if (r <= free) {
    v.oom_class = OomClass::kUnknown;
    v.explanation = absl::StrFormat(
        "The device had %s free, enough for the request: a limit refused it (a per-process "
        "memory fraction, a pool limit) or the free figure was sampled %s.",
        B(free), f.mem_info_from_failure ? "at another moment" : "before the failure");
    v.advice.push_back(
        "Check torch.cuda.set_per_process_memory_fraction and pool limits; run with the agent "
        "active so the failure carries its own free/total sample.");
    return v;
  }
  if (f.largest_free_range_bytes >= r) {
    if (f.largest_compatible_free_range_bytes < r) {
      v.oom_class = OomClass::kUnusableCache;
      v.explanation = absl::StrFormat(
          "A free range of %s exists, but in a segment of another stream or pool; the largest "
          "free range usable by this request's stream and pool is %s.",
          B(f.largest_free_range_bytes), B(f.largest_compatible_free_range_bytes));
      v.advice.push_back(
          "Memory cached for another stream/pool cannot serve this request. Release it first "
          "(torch.cuda.empty_cache()), allocate on the stream that frees the memory, or avoid "
          "Tensor.record_stream on large tensors.");
      return v;
    }
    v.oom_class = OomClass::kUnknown;
    v.explanation = absl::StrFormat(
        "A free range of %s in a compatible segment would fit the request: the allocator "
        "declined it (policy, e.g. oversize cached blocks are not split).",
        B(f.largest_compatible_free_range_bytes));
    v.advice.push_back(
        "Check the allocator settings (PYTORCH_CUDA_ALLOC_CONF max_split_size_mb, "
        "roundup_power2_divisions).");
    return v;
  }
  if (f.largest_free_range_if_pending_completed_bytes >= r) {
    v.oom_class = OomClass::kUnusableCache;
    v.explanation = absl::StrFormat(
        "No free range fits now (largest %s), but one of %s would once the %s of pending frees "
        "complete: the memory is freed, its stream has not passed the free yet.",
        B(f.largest_free_range_bytes), B(f.largest_free_range_if_pending_completed_bytes),
        B(f.pending_free_bytes));
    v.advice.push_back(
        "Synchronize the stream that freed the memory before the large allocation, or free it "
        "earlier (memory recorded on another stream stays pending until that stream passes).");
    return v;
  }
  if (r <= f.cached_bytes + free) {
    v.oom_class = OomClass::kFragmentation;
    v.explanation = absl::StrFormat(
        "The bytes exist, not in one piece: cached %s + device free %s = %s >= requested %s, "
        "but the largest free range is %s and the device has only %s free. %s of the cache is "
        "stranded (cached - largest free range).",
        B(f.cached_bytes), B(free), B(f.cached_bytes + free), B(r), B(f.largest_free_range_bytes),
        B(free), B(f.cached_bytes - std::min(f.cached_bytes, f.largest_free_range_bytes)));
    // Not when segments already grow in place: said by the caller (PYTORCH_CUDA_ALLOC_CONF
    // under `fragscope run`) or seen in the trace (a sub-allocator carves VMM reservations).
    if (options.expandable_segments != true && f.carved_reservation_bytes == 0) {
      v.advice.push_back(
          "PyTorch: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so segments grow in "
          "place instead of leaving free ranges stranded between them.");
    }
    v.advice.push_back(
        "PyTorch: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:<n> (e.g. a little above the "
        "largest request) keeps large cached blocks from being split into unusable pieces; "
        "garbage_collection_threshold:0.8 returns unused cache earlier.");
    v.advice.push_back(
        "Allocate long-lived large buffers first and reuse them (preallocate at the largest "
        "shape), so short-lived tensors do not split the ranges they need.");
    return v;
  }
  v.oom_class = OomClass::kUnusableCache;
  v.explanation = absl::StrFormat(
      "Cached %s + device free %s = %s is less than the request, but memory pools keep %s "
      "reserved and unused (and %s of VMM handles are created but unmapped): this request "
      "cannot use it.",
      B(f.cached_bytes), B(free), B(f.cached_bytes + free), B(f.pool_free_bytes),
      B(reach - std::min(reach, held + f.cached_bytes + free + f.pool_free_bytes)));
  v.advice.push_back(
      "Return pool memory before the allocation: cudaMemPoolTrimTo, or lower "
      "cudaMemPoolAttrReleaseThreshold so pools release at synchronize; in PyTorch "
      "torch.cuda.empty_cache().");
  (void)failure;
  return v;
}

}  // namespace

OomAnalyzer::OomAnalyzer(const ModelOptions& options) : options_(&options) {}

void OomAnalyzer::OnFailure(const FailedAllocation& failure, OomPostMortem postmortem) {
  const std::size_t index = failures_.size();
  failures_.push_back(failure);
  if (failure.from_sub_allocator) {
    // The driver failures right before a sub-allocator OOM on the same device are the
    // sub-allocator's own attempts (PyTorch frees its cache and retries before raising): this
    // post-mortem explains them.
    std::erase_if(waiting_, [&](std::size_t i) {
      FailedAllocation& earlier = failures_[i];
      if (earlier.from_sub_allocator) return false;
      if (earlier.device != failure.device && earlier.device >= 0 && failure.device >= 0) {
        return false;
      }
      earlier.superseded_by_seq = failure.seq;
      std::erase_if(postmortems_, [i](const auto& p) { return p.first == i; });
      return true;
    });
  }
  waiting_.push_back(index);
  if (!failure.is_oom) return;
  if (postmortems_.size() >= options_->max_postmortems) {
    ++postmortems_refused_;
    return;
  }
  const OomVerdict verdict = ClassifyOom(postmortem.figures, failure, *options_);
  postmortem.failure = failure;
  postmortem.oom_class = verdict.oom_class;
  postmortem.explanation = verdict.explanation;
  postmortem.advice = verdict.advice;
  postmortem.headline =
      absl::StrFormat("OOM on device %d: requested %s \xe2\x80\x94 class: %s", failure.device,
                      FormatBytes(failure.requested_bytes), OomClassName(verdict.oom_class));
  postmortems_.emplace_back(index, std::move(postmortem));
  // Maps cost O(blocks) each: the latest max_postmortem_maps keep theirs (the last OOM is the
  // one a run died of).
  std::size_t maps = 0;
  for (auto it = postmortems_.rbegin(); it != postmortems_.rend(); ++it) {
    OomPostMortem& pm = it->second;
    if (pm.segments_at_failure == nullptr) continue;
    if (++maps > options_->max_postmortem_maps) {
      pm.segments_at_failure.reset();
      pm.map_missing = absl::StrFormat(
          "let go: only the latest %d OOMs keep their segment map (each costs memory in "
          "proportion to the live blocks)",
          options_->max_postmortem_maps);
    }
  }
}

void OomAnalyzer::OnSuccess(int device, uint64_t bytes, uint64_t seq) {
  if (waiting_.empty()) return;
  std::erase_if(waiting_, [&](std::size_t i) {
    FailedAllocation& f = failures_[i];
    if (f.device != device && f.device >= 0 && device >= 0) return false;
    if (bytes < f.requested_bytes) return false;
    f.recovered = true;
    f.recovered_by_seq = seq;
    // A sub-allocator OOM was raised to the program: its post-mortem stays even if the program
    // caught it and went on. A recovered driver failure was a retry that worked: no OOM.
    if (!f.from_sub_allocator) {
      std::erase_if(postmortems_, [i](const auto& p) { return p.first == i; });
    }
    return true;
  });
}

void OomAnalyzer::Collect(ModelSummary* out) const {
  out->failed_allocations = failures_;
  out->ooms.clear();
  for (const auto& [index, pm] : postmortems_) {
    out->failed_allocations[index].has_postmortem = true;
    OomPostMortem copy = pm;
    copy.failure = out->failed_allocations[index];
    out->ooms.push_back(std::move(copy));
  }
  out->ooms_without_postmortem = postmortems_refused_;
}

std::vector<uint64_t> OomAnalyzer::ReferencedStacks() const {
  std::vector<uint64_t> ids;
  for (const FailedAllocation& f : failures_) ids.push_back(f.stack_id);
  for (const auto& [index, pm] : postmortems_) {
    for (const SiteEntry& s : pm.sites_at_failure) ids.push_back(s.stack_id);
    for (const SiteEntry& s : pm.sites_at_peak) ids.push_back(s.stack_id);
    for (const RecentEvent& e : pm.recent_events) ids.push_back(e.stack_id);
  }
  return ids;
}

}  // namespace fragscope
