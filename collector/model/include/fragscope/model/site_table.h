// Live bytes and counts by allocation site (interned stack id), per device.
#ifndef FRAGSCOPE_MODEL_SITE_TABLE_H_
#define FRAGSCOPE_MODEL_SITE_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fragscope/model/model_summary.h"

namespace fragscope {

// Memory O(distinct live sites). Not thread-safe; owned by its device.
class SiteTable {
 public:
  void Add(uint64_t stack_id, uint64_t bytes);
  void Remove(uint64_t stack_id, uint64_t bytes);  // a site reaching count 0 is dropped

  // Largest live_bytes first (ties: smaller stack id first), at most `n`. O(sites log n).
  std::vector<SiteEntry> Top(std::size_t n) const;
  // Every live site, in no particular order, into `out` (its capacity is reused). O(sites), no
  // sort: for copies kept in case they are read later (sites at peak), sorted when read.
  void CopyTo(std::vector<SiteEntry>* out) const;
  std::size_t size() const { return sites_.size(); }

 private:
  struct Live {
    uint64_t bytes = 0;
    uint64_t count = 0;
  };
  absl::flat_hash_map<uint64_t, Live> sites_;
};

// Top `n` of `entries` by the same order as SiteTable::Top.
std::vector<SiteEntry> TopSites(std::vector<SiteEntry> entries, std::size_t n);

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_SITE_TABLE_H_
