// Summarize + render + check, shared by the targets that drive the model to the end of the
// pipeline (what `fragscope report` does after reading a stream).
#ifndef FRAGSCOPE_TESTS_FUZZ_REPORT_CHECK_H_
#define FRAGSCOPE_TESTS_FUZZ_REPORT_CHECK_H_

#include <cmath>
#include <sstream>
#include <string>

#include "fragscope/model/model_summary.h"
#include "fragscope/model/process_model.h"
#include "fragscope/report/report_json.h"
#include "fragscope/report/report_text.h"
#include "fuzz_util.h"

namespace fragscope::fuzz {

// Properties of a summary that hold whatever frames produced it (model_summary.h). Only the
// documented ones: a hostile stream may make any figure wrong, but not incoherent.
template <typename T>
void CheckMeasured(const Measured<T>& m, const char* what, int device) {
  FUZZ_CHECK(m.known() == m.unknown_reason.empty(),
             "device %d %s: known=%d but unknown_reason='%s' (set exactly when unknown)", device,
             what, m.known(), m.unknown_reason.c_str());
}

inline void CheckRatio(const Measured<double>& m, const char* what, int device) {
  CheckMeasured(m, what, device);
  if (m.known()) {
    FUZZ_CHECK(std::isfinite(*m.value) && *m.value >= 0.0 && *m.value <= 1.0,
               "device %d %s = %g, outside [0, 1]", device, what, *m.value);
  }
}

inline void CheckSummary(const ModelSummary& summary, const ModelOptions& options) {
  for (size_t i = 0; i < summary.devices.size(); ++i) {
    const DeviceSummary& d = summary.devices[i];
    if (i > 0) {
      FUZZ_CHECK(summary.devices[i - 1].ordinal < d.ordinal, "devices not by ordinal: %d then %d",
                 summary.devices[i - 1].ordinal, d.ordinal);
    }
    CheckMeasured(d.total_bytes, "total_bytes", d.ordinal);
    CheckMeasured(d.device_free_bytes, "device_free_bytes", d.ordinal);
    CheckMeasured(d.untracked_bytes, "untracked_bytes", d.ordinal);
    CheckRatio(d.fragmentation, "fragmentation", d.ordinal);
    CheckRatio(d.max_fragmentation, "max_fragmentation", d.ordinal);
    // stranded = cached - largest free range: the largest range is one of the cached ones.
    FUZZ_CHECK(d.largest_free_range_bytes <= d.cached_bytes,
               "device %d largest_free_range %llu > cached %llu", d.ordinal,
               static_cast<unsigned long long>(d.largest_free_range_bytes),
               static_cast<unsigned long long>(d.cached_bytes));
    FUZZ_CHECK(d.timeline.size() <= options.timeline_max_points,
               "device %d timeline has %zu points, limit %zu", d.ordinal, d.timeline.size(),
               options.timeline_max_points);
    FUZZ_CHECK(d.sites.size() <= options.top_sites, "device %d has %zu sites, limit %zu", d.ordinal,
               d.sites.size(), options.top_sites);
    for (const TimelinePoint& p : d.timeline) {
      if (p.fragmentation.has_value()) {
        FUZZ_CHECK(
            std::isfinite(*p.fragmentation) && *p.fragmentation >= 0.0 && *p.fragmentation <= 1.0,
            "device %d timeline fragmentation %g", d.ordinal, *p.fragmentation);
      }
    }
  }
  FUZZ_CHECK(summary.ooms.size() <= options.max_postmortems, "%zu post-mortems kept, limit %zu",
             summary.ooms.size(), options.max_postmortems);
  for (const OomPostMortem& pm : summary.ooms) {
    FUZZ_CHECK(pm.sites_at_failure.size() <= options.top_sites,
               "post-mortem with %zu sites, limit %zu", pm.sites_at_failure.size(),
               options.top_sites);
  }
}

// Summarizes `model`, renders both reports and checks that the JSON one is valid JSON.
// Checks `model`'s summary and reports; returns the JSON report.
inline std::string SummarizeAndRender(const ProcessModel& model) {
  ModelSummary summary = model.Summarize();
  CheckSummary(summary, model.options());
  std::ostringstream json;
  RenderJson(summary, json);
  const std::string text = json.str();
  JsonChecker checker(text);
  if (!checker.Valid()) {
    const size_t at = checker.error_offset();
    const size_t from = at > 120 ? at - 120 : 0;
    FUZZ_CHECK(false, "RenderJson wrote invalid JSON at byte %zu of %zu: ...%s<<HERE>>%s...", at,
               text.size(), text.substr(from, at - from).c_str(), text.substr(at, 80).c_str());
  }
  std::ostringstream plain;
  RenderText(summary, plain);
  return text;
}

}  // namespace fragscope::fuzz

#endif  // FRAGSCOPE_TESTS_FUZZ_REPORT_CHECK_H_
