// What fragscope.proto promises of its event messages beyond their numbers: seq, time_ns, tid,
// api, result and stack_id have the same field numbers in every event message (AllocEvent,
// FreeEvent, MapEvent, HandleEvent, FailedAlloc, BlockEvent), so a writer or reader handles them
// once for all. Checked here against the generated numbers, at compile time, for every user.
#ifndef FRAGSCOPE_WIRE_EVENTS_H_
#define FRAGSCOPE_WIRE_EVENTS_H_

#include "fragscope/wire_constants.h"

namespace fragscope::wire {

// The common fields' numbers (EventCommon::kSeq ... kStackId), valid in every event message.
using EventCommon = AllocEvent;

template <typename Event>
constexpr bool HasEventCommonFields() {
  using C = EventCommon;
  return Event::kSeq == C::kSeq && Event::kTimeNs == C::kTimeNs && Event::kTid == C::kTid &&
         Event::kApi == C::kApi && Event::kResult == C::kResult && Event::kStackId == C::kStackId;
}
static_assert(HasEventCommonFields<FreeEvent>() && HasEventCommonFields<MapEvent>() &&
              HasEventCommonFields<HandleEvent>() && HasEventCommonFields<FailedAlloc>() &&
              HasEventCommonFields<BlockEvent>());

}  // namespace fragscope::wire

#endif  // FRAGSCOPE_WIRE_EVENTS_H_
