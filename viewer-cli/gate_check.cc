#include "gate_check.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace fragscope::cli {

namespace {

// The figures a gate looks at, at one moment of one device.
struct Moment {
  std::string when;  // "at peak (seq 812)", "at end", "at OOM (seq 900)"
  uint64_t reserved = 0;
  uint64_t cached = 0;
  uint64_t largest_free = 0;
  uint64_t opaque_segments = 0;
  uint64_t opaque_bytes = 0;
  // The sub-allocator's blocks are as they were at this moment (always, unless they are known
  // at syncs only: ModelSummary::block_syncs).
  bool blocks_known = true;
};

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%d B", b) : absl::StrFormat("%.2f %s", v, units[u]);
}

std::vector<Moment> MomentsOf(const DeviceSummary& d, const ModelSummary& s, GateMoment at) {
  std::vector<Moment> out;
  // Between syncs (the peak, timeline points) blocks that came and went are not known.
  const bool between_syncs_known = s.block_syncs == 0;
  auto end = [&] {
    out.push_back(Moment{"at end", d.reserved_bytes, d.cached_bytes, d.largest_free_range_bytes,
                         d.opaque_segments, d.opaque_bytes, s.blocks_known_at_end});
  };
  auto peak = [&] {
    // The timeline point at the peak of reserved memory; the summary keeps the exact peak seq,
    // and the timeline always keeps that point's figures.
    const TimelinePoint* best = nullptr;
    for (const TimelinePoint& p : d.timeline) {
      if (best == nullptr || p.reserved_bytes > best->reserved_bytes) best = &p;
    }
    if (best == nullptr) {  // no samples: the end is all there is (once)
      if (!Has(at, GateMoment::kEnd)) end();
      return;
    }
    out.push_back(Moment{absl::StrFormat("at peak (seq %d)", best->seq), best->reserved_bytes,
                         best->cached_bytes, best->largest_free_range_bytes, d.opaque_segments,
                         d.opaque_bytes, between_syncs_known});
  };
  auto ooms = [&] {
    for (const OomPostMortem& o : s.ooms) {
      if (o.failure.device != d.ordinal) continue;
      out.push_back(Moment{absl::StrFormat("at OOM (seq %d)", o.failure.seq),
                           o.figures.reserved_bytes, o.figures.cached_bytes,
                           o.figures.largest_free_range_bytes, o.figures.opaque_segments,
                           o.figures.opaque_bytes, !o.figures.blocks_synced_at_seq.has_value()});
    }
  };
  // In time order where it matters to a reader: the samples (which hold the peak), the peak
  // alone otherwise, the end, then the OOMs.
  if (Has(at, GateMoment::kSamples)) {
    for (const TimelinePoint& p : d.timeline) {
      out.push_back(Moment{absl::StrFormat("at seq %d", p.seq), p.reserved_bytes, p.cached_bytes,
                           p.largest_free_range_bytes, d.opaque_segments, d.opaque_bytes,
                           between_syncs_known});
    }
  } else if (Has(at, GateMoment::kPeak)) {
    peak();
  }
  if (Has(at, GateMoment::kEnd)) end();
  if (Has(at, GateMoment::kOom)) ooms();
  return out;
}

// Why a block figure cannot be judged `when`: the sub-allocator's blocks are read at syncs only.
std::string CoarseBlocksReason(const std::string& dev, const ModelSummary& s,
                               const std::string& what, const std::string& when) {
  return absl::StrFormat(
      "%s: the sub-allocator's blocks (PyTorch's) were read at %d sync(s) only (snapshot diffs), "
      "the last at seq %d, so %s %s is not known; gate --at oom or end, follow every block (the "
      "PyTorch adapter's C++ extension), or pass --allow-coarse-blocks to judge the blocks of "
      "the last sync",
      dev, s.block_syncs, s.last_block_sync_seq, what, when);
}

// A check of a figure against its limit at one moment; passes until the caller says otherwise.
GateCheck Measured(const std::string& kind, int device, const std::string& when, double value,
                   double limit, std::string value_text, std::string limit_text) {
  GateCheck c;
  c.name = absl::StrFormat("device %d %s %s", device, kind, when);
  c.kind = kind;
  c.device = device;
  c.when = when;
  c.value = value;
  c.limit = limit;
  c.value_text = std::move(value_text);
  c.limit_text = std::move(limit_text);
  return c;
}

}  // namespace

GateCheck FailedCheck(std::string name, std::string kind, std::string reason, int device,
                      std::string when) {
  GateCheck c;
  c.name = std::move(name);
  c.passed = false;
  c.reason = std::move(reason);
  c.kind = std::move(kind);
  c.device = device;
  c.when = std::move(when);
  return c;
}

double GateSeverity(const GateCheck& c) {
  if (c.passed) {
    // Among passes, the nearest to its limit is the worst (what a summary table shows).
    if (!c.value || !c.limit) return -2.0;
    return -1.0 + (*c.limit > 0 ? std::min(1.0, std::max(0.0, *c.value / *c.limit)) * 0.5 : 0.5);
  }
  if (!c.value || !c.limit) return 0.0;
  // Past a limit of 0 any amount is infinitely far; rank those by the amount.
  if (*c.limit <= 0) return 1e12 + *c.value;
  return 1.0 + *c.value / *c.limit;
}

std::vector<GateCheck> WorstPerCheck(const std::vector<GateCheck>& checks) {
  std::vector<GateCheck> out;
  for (const GateCheck& c : checks) {
    const std::string kind = c.kind.empty() ? c.name : c.kind;
    auto it = std::find_if(out.begin(), out.end(), [&](const GateCheck& o) {
      return o.kind == kind && o.device == c.device;
    });
    if (it == out.end()) {
      GateCheck first = c;
      first.kind = kind;
      first.failed_moments = c.passed ? 0 : 1;
      out.push_back(std::move(first));
      continue;
    }
    const int moments = it->moments + 1;
    const int failed = it->failed_moments + (c.passed ? 0 : 1);
    if (GateSeverity(c) > GateSeverity(*it)) {
      *it = c;
      it->kind = kind;
    }
    it->moments = moments;
    it->failed_moments = failed;
  }
  for (GateCheck& c : out) {
    c.name = c.device >= 0 ? absl::StrFormat("device %d %s", c.device, c.kind) : c.kind;
    if (c.failed_moments > 1) {
      absl::StrAppendFormat(&c.reason, " (the worst of %d moments over the limit, of %d judged)",
                            c.failed_moments, c.moments);
    }
  }
  return out;
}

std::vector<GateCheck> EvaluateGate(const ModelSummary& summary, const GateLimits& limits) {
  std::vector<GateCheck> checks;
  if (summary.devices.empty()) {
    checks.push_back(FailedCheck(
        "device memory measured", "device memory measured",
        "no device memory events in the trace: nothing was measured, so nothing can pass"));
    return checks;
  }
  // The run's peak (and maximum) are not in a stream that begins mid-run.
  const std::optional<uint64_t> from = summary.partial_history_from();
  const bool judges_peak =
      Has(limits.at, GateMoment::kPeak) || Has(limits.at, GateMoment::kSamples);
  const bool judges_history = !limits.allow_partial_history &&
                              (judges_peak || limits.max_increase || limits.max_reserved_increase);
  if (judges_history && summary.imported) {
    checks.push_back(FailedCheck(
        "history", "history",
        "an imported allocator snapshot holds one moment: the run's peak and maximum are "
        "not in "
        "it; use --at end to judge the snapshot, or pass --allow-partial-history"));
  } else if (judges_history && from) {
    checks.push_back(FailedCheck(
        "history", "history",
        absl::StrFormat("the trace begins at seq %d with a snapshot (a flight-recorder segment, a "
                        "late connect or an attach): the run's peak and maximum before it are "
                        "not known; gate a trace recorded from the start (fragscope run), use "
                        "--at end or oom, or pass --allow-partial-history to judge this window",
                        *from)));
  }
  for (const DeviceSummary& d : summary.devices) {
    std::string dev = absl::StrFormat("device %d", d.ordinal);
    for (const Moment& m : MomentsOf(d, summary, limits.at)) {
      if (m.opaque_segments > 0 && !limits.allow_opaque) {
        checks.push_back(FailedCheck(
            absl::StrFormat("%s visibility %s", dev, m.when), "visibility",
            absl::StrFormat("%s: %d opaque segment(s) (%s) %s are carved by an allocator "
                            "fragscope cannot see, so fragmentation is unknown; make "
                            "them visible (PyTorch adapter) or pass --allow-opaque",
                            dev, m.opaque_segments, Bytes(m.opaque_bytes), m.when),
            d.ordinal, m.when));
      }
      // Reserved memory comes from the driver and is always known; the block figures are not
      // between syncs.
      const bool judges_blocks = limits.max_stranded_bytes || limits.max_fragmentation;
      if (judges_blocks && !m.blocks_known && !limits.allow_coarse_blocks) {
        checks.push_back(FailedCheck(
            absl::StrFormat("%s block visibility %s", dev, m.when), "block visibility",
            CoarseBlocksReason(dev, summary, "stranded bytes and fragmentation", m.when), d.ordinal,
            m.when));
      }
      const bool blocks_judged = m.blocks_known || limits.allow_coarse_blocks;
      if (limits.max_reserved_bytes) {
        GateCheck c = Measured("reserved", d.ordinal, m.when, static_cast<double>(m.reserved),
                               static_cast<double>(*limits.max_reserved_bytes), Bytes(m.reserved),
                               Bytes(*limits.max_reserved_bytes));
        if (m.reserved > *limits.max_reserved_bytes) {
          c.passed = false;
          c.reason = absl::StrFormat("%s reserved %s > limit %s %s", dev, Bytes(m.reserved),
                                     Bytes(*limits.max_reserved_bytes), m.when);
        }
        checks.push_back(c);
      }
      if (limits.max_stranded_bytes && blocks_judged) {
        uint64_t stranded = m.cached - std::min(m.cached, m.largest_free);
        GateCheck c = Measured("stranded", d.ordinal, m.when, static_cast<double>(stranded),
                               static_cast<double>(*limits.max_stranded_bytes), Bytes(stranded),
                               Bytes(*limits.max_stranded_bytes));
        if (stranded > *limits.max_stranded_bytes) {
          c.passed = false;
          c.reason =
              absl::StrFormat("%s stranded %s > limit %s %s (cached %s, largest free range %s)",
                              dev, Bytes(stranded), Bytes(*limits.max_stranded_bytes), m.when,
                              Bytes(m.cached), Bytes(m.largest_free));
        }
        checks.push_back(c);
      }
      if (limits.max_fragmentation && blocks_judged && m.cached >= limits.min_cached_bytes &&
          m.cached > 0) {
        double frag = 1.0 - static_cast<double>(m.largest_free) / static_cast<double>(m.cached);
        GateCheck c = Measured("fragmentation", d.ordinal, m.when, frag, *limits.max_fragmentation,
                               absl::StrFormat("%.3f", frag),
                               absl::StrFormat("%.3f", *limits.max_fragmentation));
        if (frag > *limits.max_fragmentation) {
          c.passed = false;
          c.reason = absl::StrFormat(
              "%s fragmentation %.3f > limit %.3f %s (cached %s, largest free range %s)", dev, frag,
              *limits.max_fragmentation, m.when, Bytes(m.cached), Bytes(m.largest_free));
        }
        checks.push_back(c);
      }
    }
    if (limits.max_increase) {
      auto base = limits.baseline_max_fragmentation.find(d.ordinal);
      GateCheck c;
      c.name = absl::StrFormat("%s max fragmentation vs baseline", dev);
      c.kind = "max fragmentation vs baseline";
      c.device = d.ordinal;
      c.limit = *limits.max_increase;
      c.limit_text = absl::StrFormat("+%.3f", *limits.max_increase);
      if (base != limits.baseline_max_fragmentation.end() && d.max_fragmentation.known()) {
        c.value = *d.max_fragmentation.value - base->second;
        c.value_text = absl::StrFormat("%+.3f (%.3f)", *c.value, *d.max_fragmentation.value);
      }
      if (base == limits.baseline_max_fragmentation.end()) {
        c.reason = "";  // a device the baseline did not have: nothing to compare
      } else if (summary.block_syncs > 0 && !limits.allow_coarse_blocks) {
        // The maximum over the run: most of it lies between syncs.
        c.passed = false;
        c.reason = CoarseBlocksReason(dev, summary, "max fragmentation", "over the run");
      } else if (!d.max_fragmentation.known()) {
        c.passed = false;
        c.reason = absl::StrFormat("%s max fragmentation is unknown (%s); baseline was %.3f", dev,
                                   d.max_fragmentation.unknown_reason, base->second);
      } else if (*d.max_fragmentation.value - base->second > *limits.max_increase) {
        c.passed = false;
        c.reason = absl::StrFormat(
            "%s max fragmentation %.3f rose by %.3f over baseline %.3f (limit +%.3f)", dev,
            *d.max_fragmentation.value, *d.max_fragmentation.value - base->second, base->second,
            *limits.max_increase);
      }
      checks.push_back(c);
    }
    if (limits.max_reserved_increase) {
      // Reserved memory comes from the driver: known whether or not blocks are.
      auto base = limits.baseline_peak_reserved.find(d.ordinal);
      GateCheck c;
      c.name = absl::StrFormat("%s peak reserved vs baseline", dev);
      c.kind = "peak reserved vs baseline";
      c.device = d.ordinal;
      c.limit = *limits.max_reserved_increase;
      c.limit_text = absl::StrFormat("+%.1f %%", 100.0 * *limits.max_reserved_increase);
      if (base != limits.baseline_peak_reserved.end() && base->second > 0) {
        c.value =
            static_cast<double>(d.peak_reserved_bytes) / static_cast<double>(base->second) - 1.0;
        c.value_text =
            absl::StrFormat("%+.1f %% (%s)", 100.0 * *c.value, Bytes(d.peak_reserved_bytes));
      }
      if (base != limits.baseline_peak_reserved.end()) {
        const double allowed =
            static_cast<double>(base->second) * (1.0 + *limits.max_reserved_increase);
        if (static_cast<double>(d.peak_reserved_bytes) > allowed) {
          c.passed = false;
          const double rise = base->second == 0 ? 0.0
                                                : static_cast<double>(d.peak_reserved_bytes) /
                                                          static_cast<double>(base->second) -
                                                      1.0;
          c.reason =
              absl::StrFormat("%s peak reserved %s rose %s over baseline %s (limit +%.1f %%)", dev,
                              Bytes(d.peak_reserved_bytes),
                              base->second == 0 ? std::string("from nothing")
                                                : absl::StrFormat("by %.1f %%", 100.0 * rise),
                              Bytes(base->second), 100.0 * *limits.max_reserved_increase);
        }
      }
      checks.push_back(c);
    }
  }
  return checks;
}

std::string GateJunitXml(const std::vector<GateCheck>& checks, const std::string& trace) {
  return GateJunitXml(std::vector<GateSuite>{{trace, checks}});
}

std::string GateJunitXml(const std::vector<GateSuite>& suites) {
  auto esc = [](const std::string& s) {
    return absl::StrReplaceAll(
        s, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}, {"'", "&apos;"}});
  };
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>";
  for (const GateSuite& suite : suites) {
    int failures = 0;
    for (const GateCheck& c : suite.checks) failures += c.passed ? 0 : 1;
    // One trace keeps the suite name it always had; several are told apart by their trace.
    const std::string name =
        suites.size() == 1 ? "fragscope gate" : "fragscope gate: " + suite.trace;
    xml += absl::StrFormat("<testsuite name=\"%s\" tests=\"%d\" failures=\"%d\">\n", esc(name),
                           suite.checks.size(), failures);
    for (const GateCheck& c : suite.checks) {
      xml += absl::StrFormat("  <testcase classname=\"fragscope.gate\" name=\"%s\" file=\"%s\"",
                             esc(c.name), esc(suite.trace));
      if (c.passed) {
        xml += "/>\n";
      } else {
        xml += absl::StrFormat(">\n    <failure message=\"%s\"/>\n  </testcase>\n", esc(c.reason));
      }
    }
    xml += "</testsuite>";
  }
  xml += "</testsuites>\n";
  return xml;
}

}  // namespace fragscope::cli
