#include "fragscope/model/segment_layout.h"

#include <functional>
#include <map>

namespace fragscope {

FreeRangeCensus CensusOfFreeRanges(const std::vector<SegmentLayout>& segments) {
  FreeRangeCensus c;
  std::map<uint64_t, uint64_t, std::greater<>> count_by_size;
  for (const SegmentLayout& seg : segments) {
    ++c.segments;
    if (!seg.free_ranges.empty()) ++c.segments_with_free;
    for (const AddressRange& r : seg.free_ranges) {
      ++count_by_size[r.size];
      ++c.ranges;
      c.bytes += r.size;
    }
  }
  c.by_size.assign(count_by_size.begin(), count_by_size.end());
  return c;
}

}  // namespace fragscope
