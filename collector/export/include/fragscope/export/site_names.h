// Short names of allocation sites (interned stacks) for exports: "function (file:line)" of the
// innermost frames, symbolized once per stack.
#ifndef FRAGSCOPE_EXPORT_SITE_NAMES_H_
#define FRAGSCOPE_EXPORT_SITE_NAMES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "fragscope/model/model_summary.h"
#include "fragscope/report/stack_cut.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope::exporter {

// Keeps references to `summary` and `symbolizer`, which must outlive it. Not thread-safe
// (caches names, and Symbolizer is not thread-safe).
class SiteNames {
 public:
  SiteNames(const ModelSummary& summary, Symbolizer& symbolizer, std::size_t max_frames = 3)
      : summary_(summary), symbolizer_(symbolizer), max_frames_(max_frames) {}

  // Up to max_frames frames, innermost first below fragscope's own (LeadingOwnFrames), joined
  // by " < "; "(no stack recorded)" for 0,
  // "(stack N not in the stream)" for an id the stream never defined. A cut stack (StackEnd)
  // ends with " … stack cut here: ..." (DescribeStackCut), so no export shows it as whole.
  const std::string& Name(uint64_t stack_id) {
    return Name(stack_id, StackEndOf(summary_, stack_id));
  }
  // A site's name: cut if any stack merged into it is (SiteStackEnd).
  const std::string& SiteName(const SiteEntry& site) {
    return Name(site.stack_id, SiteStackEnd(summary_, site));
  }

 private:
  const ModelSummary& summary_;
  Symbolizer& symbolizer_;
  std::size_t max_frames_;
  const std::string& Name(uint64_t stack_id, StackEnd end);

  std::map<std::pair<uint64_t, StackEnd>, std::string> names_;
};

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_SITE_NAMES_H_
