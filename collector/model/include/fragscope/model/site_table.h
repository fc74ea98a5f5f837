// Live bytes and counts by allocation site (interned stack id), per device.
#ifndef FRAGSCOPE_MODEL_SITE_TABLE_H_
#define FRAGSCOPE_MODEL_SITE_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fragscope/model/model_summary.h"

namespace fragscope {

// Top `n` of `entries`: largest live_bytes first, ties by smaller stack id.
std::vector<SiteEntry> TopSites(std::vector<SiteEntry> entries, std::size_t n);

// Also remembers the table as it was at one moment (Mark, the device's peak), in O(1) per Mark
// and per change: each site keeps its figures from the moment of the latest Mark beside the
// live ones, saved the first time it changes after that Mark. (Copying the table at each new
// peak cost O(sites) per peak, and a stream climbing to new peaks reaches many.)
// Memory O(distinct sites live now or at the mark). Not thread-safe; owned by its device.
class SiteTable {
 public:
  void Add(uint64_t stack_id, uint64_t bytes);
  // A site at count 0 is dropped, unless it was live at the mark.
  void Remove(uint64_t stack_id, uint64_t bytes);
  // One live allocation of `bytes` moves from site `from` to `to` (its site learned after the
  // fact). With `live_at_mark` (it was live at the latest Mark, and has been since), the figures
  // at the mark move as well: it was there, under the site now known. O(1).
  void Move(uint64_t from, uint64_t to, uint64_t bytes, bool live_at_mark);
  // A block that was live at the latest Mark, and is not now, moves from site `from` to `to`
  // there (its site learned after its free). The live figures do not change. O(1).
  void MoveAtMark(uint64_t from, uint64_t to, uint64_t bytes);
  // Every site at count 0 (a Snapshot's fresh start); what was live at the mark stays readable.
  void ClearKeepingMark();

  // Remembers the table as it is now for AllAtMark. O(1).
  void Mark() { ++mark_; }
  bool marked() const { return mark_ != 0; }

  // Every live site, in no order: TopSites orders them, after the stream's stacks merged the
  // sites that are one (ProcessModel). O(sites).
  std::vector<SiteEntry> All() const;
  // Every site live at the latest Mark (none before any), in no order. O(sites).
  std::vector<SiteEntry> AllAtMark() const;

 private:
  struct Live {
    uint64_t bytes = 0;
    uint64_t count = 0;
    uint64_t marked_bytes = 0;  // the figures at mark `mark`: valid when mark == mark_
    uint64_t marked_count = 0;
    uint64_t mark = 0;
  };
  // Keeps the figures at the latest Mark before the first change after it.
  void SaveMarked(Live& live) const {
    if (live.mark == mark_) return;
    live.marked_bytes = live.bytes;
    live.marked_count = live.count;
    live.mark = mark_;
  }

  absl::flat_hash_map<uint64_t, Live> sites_;
  uint64_t mark_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_SITE_TABLE_H_
