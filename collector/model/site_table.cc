#include "fragscope/model/site_table.h"

#include <algorithm>

namespace fragscope {

void SiteTable::Add(uint64_t stack_id, uint64_t bytes) {
  Live& live = sites_[stack_id];
  SaveMarked(live);
  live.bytes += bytes;
  ++live.count;
}

void SiteTable::Remove(uint64_t stack_id, uint64_t bytes) {
  auto it = sites_.find(stack_id);
  // Not live (a site kept only for the mark is not live either): nothing to remove.
  if (it == sites_.end() || it->second.count == 0) return;
  Live& live = it->second;
  SaveMarked(live);
  live.bytes -= std::min(live.bytes, bytes);
  if (--live.count > 0) return;
  // Dead: a later Add starts from nothing (sizes removed need not match those added).
  live.bytes = 0;
  if (live.marked_count == 0) sites_.erase(it);
}

void SiteTable::Move(uint64_t from, uint64_t to, uint64_t bytes, bool live_at_mark) {
  if (from == to) return;
  Remove(from, bytes);
  Add(to, bytes);
  if (live_at_mark) MoveAtMark(from, to, bytes);
}

void SiteTable::MoveAtMark(uint64_t from, uint64_t to, uint64_t bytes) {
  if (from == to || mark_ == 0) return;
  auto it = sites_.find(from);
  if (it == sites_.end()) return;
  Live& was = it->second;
  SaveMarked(was);
  if (was.marked_count == 0) return;
  was.marked_bytes -= std::min(was.marked_bytes, bytes);
  --was.marked_count;
  if (was.count == 0 && was.marked_count == 0) sites_.erase(it);
  Live& now = sites_[to];  // after the erase: a reference taken before it could dangle
  SaveMarked(now);
  now.marked_bytes += bytes;
  ++now.marked_count;
}

void SiteTable::ClearKeepingMark() {
  for (auto it = sites_.begin(); it != sites_.end();) {
    Live& live = it->second;
    SaveMarked(live);
    live.bytes = 0;
    live.count = 0;
    if (live.marked_count == 0) {
      sites_.erase(it++);
    } else {
      ++it;
    }
  }
}

std::vector<SiteEntry> SiteTable::All() const {
  std::vector<SiteEntry> entries;
  entries.reserve(sites_.size());
  for (const auto& [id, live] : sites_) {
    if (live.count > 0) entries.push_back({id, live.bytes, live.count});
  }
  return entries;
}

std::vector<SiteEntry> SiteTable::AllAtMark() const {
  std::vector<SiteEntry> entries;
  if (mark_ == 0) return entries;
  entries.reserve(sites_.size());
  for (const auto& [id, live] : sites_) {
    // Not changed since the mark: the live figures are the ones at the mark.
    const bool saved = live.mark == mark_;
    const uint64_t count = saved ? live.marked_count : live.count;
    if (count > 0) entries.push_back({id, saved ? live.marked_bytes : live.bytes, count});
  }
  return entries;
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
