// The free ranges at a failure, by size, as reports list them: what "not in one piece" means.
#ifndef FRAGSCOPE_REPORT_FREE_RANGE_SIZES_H_
#define FRAGSCOPE_REPORT_FREE_RANGE_SIZES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fragscope/model/segment_layout.h"

namespace fragscope {

struct FreeRangeSizes {
  // (size as printed, how many ranges), largest first. Sizes that print alike (2 MiB and 2 MiB
  // less 512 bytes) share a line.
  std::vector<std::pair<std::string, uint64_t>> lines;
  uint64_t rest = 0;        // ranges smaller than the last line
  uint64_t rest_bytes = 0;  // their bytes
};

// At most `shown` lines; the smaller sizes summed in `rest`.
FreeRangeSizes GroupFreeRangeSizes(const FreeRangeCensus& census, std::size_t shown = 5);

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_FREE_RANGE_SIZES_H_
