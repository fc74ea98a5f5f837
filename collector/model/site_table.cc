#include "fragscope/model/site_table.h"

#include <algorithm>

namespace fragscope {

void SiteTable::Add(uint64_t stack_id, uint64_t bytes) {
  Live& live = sites_[stack_id];
  live.bytes += bytes;
  ++live.count;
}

void SiteTable::Remove(uint64_t stack_id, uint64_t bytes) {
  auto it = sites_.find(stack_id);
  if (it == sites_.end()) return;
  it->second.bytes -= std::min(it->second.bytes, bytes);
  if (--it->second.count == 0) sites_.erase(it);
}

std::vector<SiteEntry> SiteTable::Top(std::size_t n) const {
  std::vector<SiteEntry> entries;
  entries.reserve(sites_.size());
  for (const auto& [id, live] : sites_) entries.push_back({id, live.bytes, live.count});
  return TopSites(std::move(entries), n);
}

void SiteTable::CopyTo(std::vector<SiteEntry>* out) const {
  out->clear();
  for (const auto& [id, live] : sites_) out->push_back({id, live.bytes, live.count});
}

std::vector<SiteEntry> TopSites(std::vector<SiteEntry> entries, std::size_t n) {
  auto larger = [](const SiteEntry& a, const SiteEntry& b) {
    if (a.live_bytes != b.live_bytes) return a.live_bytes > b.live_bytes;
    return a.stack_id < b.stack_id;
  };
  if (entries.size() > n) {
    std::partial_sort(entries.begin(), entries.begin() + n, entries.end(), larger);
    entries.resize(n);
  } else {
    std::sort(entries.begin(), entries.end(), larger);
  }
  return entries;
}

}  // namespace fragscope
