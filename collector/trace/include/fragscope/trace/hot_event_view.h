// Read-only views of a HotEvent (hot_frame_decoder.h) as the AllocEvent, FreeEvent or
// BlockEvent message it was read from, for code that takes either (templates over the event
// type, such as ProcessModel's handlers).
//
// Why: building the message (StoreHotEvent) only to read the same fields back was ~4 % of a
// replay; a view reads them from the decoded field array.
//
// Guarantee: every accessor returns what the message built by StoreHotEvent from the same
// HotEvent returns (same types, the same 32-bit and enum conversions as libprotobuf's parse),
// including fields a hot frame never holds (failed_release_result: 0). A view is valid while
// its HotEvent is, and only for an event of its own body (the caller checks HotEvent::body).
#ifndef FRAGSCOPE_TRACE_HOT_EVENT_VIEW_H_
#define FRAGSCOPE_TRACE_HOT_EVENT_VIEW_H_

#include <cstdint>

#include "fragscope.pb.h"
#include "fragscope/trace/hot_frame_decoder.h"
#include "fragscope/wire_constants.h"
#include "fragscope/wire_events.h"

namespace fragscope {
namespace internal {

inline uint32_t U32(uint64_t v) { return static_cast<uint32_t>(v); }
inline int32_t I32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

// The fields every event message has, with the same numbers in each (hot_frame_decoder.h).
class CommonView {
 public:
  explicit CommonView(const HotEvent& event) : f_(event.field) {}
  uint64_t seq() const { return f_[wire::EventCommon::kSeq]; }
  uint64_t time_ns() const { return f_[wire::EventCommon::kTimeNs]; }
  uint32_t tid() const { return U32(f_[wire::EventCommon::kTid]); }
  v1::Api api() const { return static_cast<v1::Api>(I32(f_[wire::EventCommon::kApi])); }
  int32_t result() const { return I32(f_[wire::EventCommon::kResult]); }
  uint64_t stack_id() const { return f_[wire::EventCommon::kStackId]; }

 protected:
  const uint64_t* f_;
};

}  // namespace internal

// The common fields of any of the five hot events (seq, time, thread, api, result, stack).
using HotCommonView = internal::CommonView;

namespace internal {

// The fields AllocEvent and FreeEvent share, with the same numbers in both.
class AllocOrFreeView : public CommonView {
  using A = wire::AllocEvent;
  using F = wire::FreeEvent;
  static_assert(A::kAddress == F::kAddress && A::kSize == F::kSize && A::kDevice == F::kDevice &&
                A::kStream == F::kStream && A::kPool == F::kPool);

 public:
  using CommonView::CommonView;
  uint64_t address() const { return f_[A::kAddress]; }
  uint64_t size() const { return f_[A::kSize]; }
  int32_t device() const { return I32(f_[A::kDevice]); }
  uint64_t stream() const { return f_[A::kStream]; }
  uint64_t pool() const { return f_[A::kPool]; }
};

}  // namespace internal

// An AllocEvent (event.body == v1::Frame::kAlloc).
class HotAllocView : public internal::AllocOrFreeView {
 public:
  using AllocOrFreeView::AllocOrFreeView;
  v1::MemoryKind kind() const {
    return static_cast<v1::MemoryKind>(internal::I32(f_[wire::AllocEvent::kKind]));
  }
  uint64_t pitch() const { return f_[wire::AllocEvent::kPitch]; }
  bool in_capture() const { return f_[wire::AllocEvent::kInCapture] != 0; }
  // A frame that has it is never a hot frame (the decoder takes AllocEvent fields up to
  // in_capture only).
  int32_t failed_release_result() const { return 0; }
};

// A FreeEvent (event.body == v1::Frame::kFree).
class HotFreeView : public internal::AllocOrFreeView {
 public:
  using AllocOrFreeView::AllocOrFreeView;
};

// A BlockEvent (event.body == v1::Frame::kBlock).
class HotBlockView : public internal::CommonView {
 public:
  using CommonView::CommonView;
  using B = wire::BlockEvent;
  v1::BlockEvent::Op op() const {
    return static_cast<v1::BlockEvent::Op>(internal::I32(f_[B::kOp]));
  }
  uint64_t address() const { return f_[B::kAddress]; }
  uint64_t size() const { return f_[B::kSize]; }
  int32_t device() const { return internal::I32(f_[B::kDevice]); }
  uint64_t stream() const { return f_[B::kStream]; }
  uint64_t pool() const { return f_[B::kPool]; }
  uint64_t allocator() const { return f_[B::kAllocator]; }
};

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_HOT_EVENT_VIEW_H_
