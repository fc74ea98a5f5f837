// A bounded, evenly thinned series of a device's metrics over the stream.
#ifndef FRAGSCOPE_MODEL_TIMELINE_H_
#define FRAGSCOPE_MODEL_TIMELINE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fragscope/model/model_summary.h"

namespace fragscope {

// Keeps at most `max_points` samples: every `stride`-th offered point is stored; when the
// series is full every other stored point is dropped and the stride doubles, so the kept points
// stay evenly spread over the whole stream. O(1) amortized per offer. Not thread-safe.
class Timeline {
 public:
  explicit Timeline(std::size_t max_points);
  // Offers one point: `make()` returns it, and is called only when the point is kept. Inline:
  // every event offers a point and most are not kept, so their points are never built (built
  // field by field on the stack and copied out, each one cost a store-forwarding stall).
  template <typename MakePoint>
  void Offer(MakePoint&& make) {
    // stride_ is a power of two: a mask instead of a division on this per-event path.
    if ((offered_++ & (stride_ - 1)) != 0) return;
    Keep(make());
  }
  const std::vector<TimelinePoint>& points() const { return points_; }

 private:
  void Keep(const TimelinePoint& point);

  std::size_t max_points_;
  uint64_t stride_ = 1;
  uint64_t offered_ = 0;
  std::vector<TimelinePoint> points_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_TIMELINE_H_
