// A described call's parameters (call_description.h) read into typed records
// (recording/event_infos.h), whatever holds them: a wrapper's own argument list (WrapperArgs)
// or CUPTI's generated *_params struct (cupti/translate.cc, ParamsArgs). Both give parameter I
// as `args.template at<I>()`; the functions here do the rest, so the preload wrappers and the
// CUPTI translation read the same parameter for the same role.
//
// What only one side can add is left to it: the driver's answers (a stream's capture state,
// the current pool, an imported range's size) are the wrapper's, and the backend's live tables
// are the CUPTI backend's. Header-only templates on a compile-time Api: no lookup at run time,
// no allocation.
#ifndef FRAGSCOPE_INTERPOSE_CALL_ARGUMENTS_H_
#define FRAGSCOPE_INTERPOSE_CALL_ARGUMENTS_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "hooks/call_description.h"
#include "recording/event_infos.h"

namespace fragscope::agent {

// An integer, enum or pointer parameter as the 64-bit value a record holds.
template <typename T>
constexpr uint64_t ArgValue(T v) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<uint64_t>(v);
  } else {
    return static_cast<uint64_t>(v);
  }
}

// What an out-parameter points at (0 when it is null).
template <typename T>
uint64_t OutValue(T* p) {
  return p != nullptr ? ArgValue(*p) : 0;
}

// A wrapper's arguments, by position.
template <typename... Args>
class WrapperArgs {
 public:
  static constexpr size_t kCount = sizeof...(Args);
  explicit WrapperArgs(Args... args) : args_(args...) {}
  template <int I>
  auto at() const {
    return std::get<I>(args_);
  }

 private:
  std::tuple<Args...> args_;
};

// Role parameter `kIndex` (call_description.h, CallArgs) as a value; 0 where the call has none.
template <int kIndex, typename A>
uint64_t InArg(const A& args) {
  if constexpr (kIndex == kNoArg) {
    return 0;
  } else {
    return ArgValue(args.template at<kIndex>());
  }
}
// What out-parameter `kIndex` points at; 0 where the call has none.
template <int kIndex, typename A>
uint64_t OutArg(const A& args) {
  if constexpr (kIndex == kNoArg) {
    return 0;
  } else {
    return OutValue(args.template at<kIndex>());
  }
}
// Whether out-parameter `kIndex` is a pointer the call could write (true where there is none).
template <int kIndex, typename A>
bool OutArgGiven(const A& args) {
  if constexpr (kIndex == kNoArg) {
    return true;
  } else {
    return args.template at<kIndex>() != nullptr;
  }
}

// The key a release names: the address (allocations, ranges) or the handle (cuMemRelease).
// 0 is no release (cudaFree(NULL)), not an event.
template <Api kApi, typename A>
uint64_t ReleaseKeyOf(const A& args) {
  constexpr const CallDescription& d = DescribeCall(kApi);
  static_assert(IsRelease(d.event));
  if constexpr (d.event == CallEvent::kReleaseHandle) {
    return InArg<d.args.handle>(args);
  } else {
    return InArg<d.args.address>(args);
  }
}

template <Api kApi, typename A>
uint64_t StreamOf(const A& args) {
  return InArg<DescribeCall(kApi).args.stream>(args);
}

template <Api kApi, typename A>
uint64_t PoolOf(const A& args) {
  return InArg<DescribeCall(kApi).args.pool>(args);
}

// An acquire that returned `result`. On success the address and pitch are what the call wrote;
// the size follows the description's rule (kAddressRange leaves it 0 for the caller to ask).
// `pool` is the pool parameter, 0 without one (stream-ordered: the device's current pool, the
// caller's to find). Kind: the description's.
template <Api kApi, typename A>
AllocInfo AcquireOf(const A& args, int32_t result) {
  constexpr const CallDescription& d = DescribeCall(kApi);
  static_assert(d.event == CallEvent::kAcquire);
  AllocInfo info{kApi, 0, 0, d.kind};
  if constexpr (d.size_rule == SizeRule::kExtent3D) {
    const auto* pitched = args.template at<d.args.address>();  // cudaPitchedPtr*
    const auto extent = args.template at<d.args.size>();       // cudaExtent
    const bool ok = result == 0 && pitched != nullptr;
    const uint64_t rows = uint64_t{extent.height} * extent.depth;
    info.address = ok ? ArgValue(pitched->ptr) : 0;
    info.pitch = ok ? pitched->pitch : 0;
    info.size = ok ? info.pitch * rows : extent.width * rows;
  } else {
    const bool ok =
        result == 0 && OutArgGiven<d.args.address>(args) && OutArgGiven<d.args.pitch>(args);
    info.address = ok ? OutArg<d.args.address>(args) : 0;
    if constexpr (d.size_rule == SizeRule::kPitchTimesRows) {
      info.pitch = ok ? OutArg<d.args.pitch>(args) : 0;
      const uint64_t rows = InArg<d.args.rows>(args);
      info.size = ok ? info.pitch * rows : InArg<d.args.size>(args) * rows;
    } else if constexpr (d.size_rule == SizeRule::kArgument) {
      info.size = InArg<d.args.size>(args);
    }
  }
  info.stream = InArg<d.args.stream>(args);
  info.pool = InArg<d.args.pool>(args);
  return info;
}

// A MapEvent's parameters: reserve, free range, map, unmap. A reservation's address is the one
// it wrote, read only when `result` says it succeeded (a release's result is not known yet when
// it is read: left 0). The device is the caller's to find (the handle's).
template <Api kApi, typename A>
MapInfo MapOf(const A& args, int32_t result = 0) {
  constexpr const CallDescription& d = DescribeCall(kApi);
  MapInfo info{kApi, MapOp::kUnspecified, 0, InArg<d.args.size>(args)};
  if constexpr (d.event == CallEvent::kReserve) {
    info.op = MapOp::kReserve;
    info.address = result == 0 ? OutArg<d.args.address>(args) : 0;
    info.alignment = InArg<d.args.alignment>(args);
  } else {
    static_assert(d.event == CallEvent::kFreeRange || d.event == CallEvent::kMap ||
                  d.event == CallEvent::kUnmap);
    info.op = d.event == CallEvent::kFreeRange ? MapOp::kFreeRange
              : d.event == CallEvent::kMap     ? MapOp::kMap
                                               : MapOp::kUnmap;
    info.address = InArg<d.args.address>(args);
    info.offset = InArg<d.args.offset>(args);
    info.handle = InArg<d.args.handle>(args);
  }
  return info;
}

// Whether a call that creates, imports or retains a handle wrote it (succeeded, out-parameter
// given).
template <Api kApi, typename A>
bool HandleWritten(const A& args, int32_t result) {
  return result == 0 && OutArgGiven<DescribeCall(kApi).args.handle>(args);
}

// A HandleEvent's parameters. Create, import, retain: the handle the call wrote, 0 unless
// HandleWritten. Create: the device and requested handle types of its CUmemAllocationProp.
template <Api kApi, typename A>
HandleInfo HandleOf(const A& args, int32_t result) {
  constexpr const CallDescription& d = DescribeCall(kApi);
  HandleInfo info{kApi, HandleOp::kUnspecified, 0};
  constexpr bool kWritesHandle = d.event == CallEvent::kCreateHandle ||
                                 d.event == CallEvent::kImportHandle ||
                                 d.event == CallEvent::kRetainHandle;
  if constexpr (kWritesHandle) {
    info.handle = HandleWritten<kApi>(args, result) ? OutArg<d.args.handle>(args) : 0;
  } else {
    info.handle = InArg<d.args.handle>(args);
  }
  if constexpr (d.event == CallEvent::kCreateHandle) {
    info.op = HandleOp::kCreate;
    info.size = InArg<d.args.size>(args);
    const auto* prop = args.template at<d.args.prop>();  // const CUmemAllocationProp*
    info.device = prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                      ? prop->location.id
                      : -1;
    info.handle_types = prop != nullptr ? static_cast<uint64_t>(prop->requestedHandleTypes) : 0;
  } else if constexpr (d.event == CallEvent::kReleaseHandle) {
    info.op = HandleOp::kRelease;
  } else if constexpr (d.event == CallEvent::kRetainHandle) {
    info.op = HandleOp::kRetain;
    info.address = InArg<d.args.address>(args);
  } else if constexpr (d.event == CallEvent::kExportHandle) {
    info.op = HandleOp::kExport;
    info.handle_types = InArg<d.args.handle_type>(args);
  } else {
    static_assert(d.event == CallEvent::kImportHandle);
    info.op = HandleOp::kImport;
    info.handle_types = InArg<d.args.handle_type>(args);
  }
  return info;
}

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_CALL_ARGUMENTS_H_
