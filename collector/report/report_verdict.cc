#include "fragscope/report/report_verdict.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_format.h"
#include "fragscope/model/format_bytes.h"

namespace fragscope {
namespace {

// The explanation's first sentence: where no shorter reason is written for a class.
std::string FirstSentence(const std::string& text) {
  for (std::size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] == '.' && text[i + 1] == ' ') return text.substr(0, i);
  }
  return !text.empty() && text.back() == '.' ? text.substr(0, text.size() - 1) : text;
}

std::string Reason(const OomPostMortem& o) {
  const OomFigures& f = o.figures;
  const uint64_t held = f.allocated_bytes + f.pending_free_bytes;
  switch (o.oom_class) {
    case OomClass::kFragmentation:
      return absl::StrFormat(
          "the bytes exist but not in one piece: largest free range %s, %s of %s cached stranded",
          FormatBytes(f.largest_free_range_bytes),
          FormatBytes(f.cached_bytes - std::min(f.cached_bytes, f.largest_free_range_bytes)),
          FormatBytes(f.cached_bytes));
    case OomClass::kCapacity:
      return absl::StrFormat(
          "too much is live: the process holds %s, %s with the request, more than the device "
          "can give",
          FormatBytes(held), FormatBytes(held + f.requested_bytes));
    case OomClass::kExternal:
      if (f.untracked_bytes.known() && f.device_free_bytes.known()) {
        return absl::StrFormat(
            "%s of the device is outside this process's segments (other processes, its CUDA "
            "context); it could reach only %s",
            FormatBytes(*f.untracked_bytes.value),
            FormatBytes(*f.device_free_bytes.value + f.reserved_bytes));
      }
      break;
    case OomClass::kUnusableCache:
      return absl::StrFormat(
          "%s is cached but this request cannot use it (another stream or pool, or frees still "
          "pending)",
          FormatBytes(f.cached_bytes + f.pending_free_bytes + f.pool_free_bytes));
    case OomClass::kUnknown:
      break;
  }
  return FirstSentence(o.explanation);
}

}  // namespace

ReportVerdict BuildVerdict(const ModelSummary& s) {
  ReportVerdict v;
  std::map<uint64_t, const OomPostMortem*> postmortems;
  for (const OomPostMortem& o : s.ooms) postmortems[o.failure.seq] = &o;
  // Repeats of one failure (a retry loop) are one line: same device, request and class. A
  // repeat past the limit of post-mortems takes the class its group's first one was given.
  std::map<std::tuple<int, uint64_t, std::string>, std::size_t> group_of;
  std::map<std::pair<int, uint64_t>, std::string> class_of_request;
  for (const FailedAllocation& f : s.failed_allocations) {
    if (!f.CountsAsOom()) continue;
    auto pm = postmortems.find(f.seq);
    const OomPostMortem* o = pm == postmortems.end() ? nullptr : pm->second;
    std::string cls = "unknown";
    if (o != nullptr) {
      cls = OomClassName(o->oom_class);
      class_of_request.try_emplace({f.device, f.requested_bytes}, cls);
    } else if (auto known = class_of_request.find({f.device, f.requested_bytes});
               known != class_of_request.end()) {
      cls = known->second;
    }
    auto [it, inserted] =
        group_of.try_emplace(std::make_tuple(f.device, f.requested_bytes, cls), v.ooms.size());
    if (inserted) {
      VerdictOom line;
      line.device = f.device;
      line.requested_bytes = f.requested_bytes;
      line.oom_class = cls;
      line.reason = o != nullptr ? Reason(*o)
                                 : "no post-mortem was kept for it (the limit of post-mortems was "
                                   "reached)";
      line.first_seq = f.seq;
      v.ooms.push_back(std::move(line));
    }
    VerdictOom& line = v.ooms[it->second];
    line.last_seq = f.seq;
    ++line.count;
    if (f.recovered) ++line.recovered;
  }
  for (const DeviceSummary& d : s.devices) {
    if (d.peak_reserved_bytes == 0) continue;
    v.fragmentation.push_back({d.ordinal, d.max_fragmentation, d.peak_reserved_bytes});
  }
  if (s.stream_ended && s.ended_by_exec) {
    v.ending = "the program exec'ed";
  } else if (s.stream_ended) {
    v.ending = s.exit_status ? absl::StrFormat("exited with status %d", *s.exit_status)
                             : std::string("the stream ended");
  } else {
    v.ending = "the stream was cut before its end";
  }
  v.approximate = s.drops > 0 || !s.stream_ended || !s.approximate_intervals.empty() ||
                  !s.history_complete || s.partial_history_from().has_value();
  return v;
}

std::string FormatVerdictOom(const VerdictOom& o) {
  std::string where = o.count == 1
                          ? absl::StrFormat("at seq %d", o.first_seq)
                          : absl::StrFormat("x%d, seq %d to %d", o.count, o.first_seq, o.last_seq);
  std::string recovered;
  if (o.recovered == o.count) {
    recovered = o.count == 1 ? " (recovered)" : " (all recovered)";
  } else if (o.recovered > 0) {
    recovered = absl::StrFormat(" (%d of %d recovered)", o.recovered, o.count);
  }
  return absl::StrFormat("OOM on device %d %s: %s, %s: %s%s", o.device, where,
                         FormatBytes(o.requested_bytes), o.oom_class, o.reason, recovered);
}

std::string FormatVerdictFragmentation(const VerdictFragmentation& f) {
  const std::string worst =
      f.worst.known() ? FormatPercent(*f.worst.value) : "n/a (" + f.worst.unknown_reason + ")";
  return absl::StrFormat("worst fragmentation on device %d: %s (peak reserved %s)", f.device, worst,
                         FormatBytes(f.peak_reserved_bytes));
}

std::string FormatVerdictHeadline(const ReportVerdict& v) {
  uint64_t ooms = 0, recovered = 0;
  for (const VerdictOom& o : v.ooms) {
    ooms += o.count;
    recovered += o.recovered;
  }
  std::string line;
  if (ooms == 0) {
    line = "no OOM; " + v.ending;
  } else {
    line = absl::StrFormat("%d OOM%s", ooms, ooms == 1 ? "" : "s");
    if (recovered == 0) {
      line += ooms == 1 ? ", not recovered" : ", none recovered";
    } else if (recovered < ooms) {
      line += absl::StrFormat(", %d not recovered", ooms - recovered);
    } else {
      line += ooms == 1 ? ", recovered" : ", all recovered";
    }
    line += "; " + v.ending;
  }
  if (v.approximate) line += " (figures may miss events: see the notes)";
  return line;
}

}  // namespace fragscope
