#include "fragscope/model/timeline.h"

#include <algorithm>

namespace fragscope {

Timeline::Timeline(std::size_t max_points) : max_points_(std::max<std::size_t>(max_points, 2)) {}

void Timeline::Keep(const TimelinePoint& point) {
  points_.push_back(point);
  if (points_.size() < max_points_) return;
  // Keep points 0, 2, 4, ...: those are exactly the offers that a doubled stride would keep.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < points_.size(); i += 2) points_[kept++] = points_[i];
  points_.resize(kept);
  stride_ *= 2;
}

}  // namespace fragscope
