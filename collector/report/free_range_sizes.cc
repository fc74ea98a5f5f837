#include "fragscope/report/free_range_sizes.h"

#include "fragscope/model/format_bytes.h"

namespace fragscope {

FreeRangeSizes GroupFreeRangeSizes(const FreeRangeCensus& census, std::size_t shown) {
  FreeRangeSizes out;
  // census.by_size is largest first, so sizes that print alike are neighbours.
  for (const auto& [size, count] : census.by_size) {
    std::string printed = FormatBytes(size);
    if (!out.lines.empty() && out.lines.back().first == printed) {
      out.lines.back().second += count;
    } else if (out.lines.size() < shown) {
      out.lines.emplace_back(std::move(printed), count);
    } else {
      out.rest += count;
      out.rest_bytes += size * count;
    }
  }
  return out;
}

}  // namespace fragscope
