#include "translate.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <tuple>

#include "hooks/call_arguments.h"
#include "hooks/call_description.h"
#include "recording/event_infos.h"

namespace fragscope::cupti {
namespace {

using agent::AllocInfo;
using agent::Api;
using agent::CallDescription;
using agent::CallEvent;
using agent::DescribeCall;
using agent::EventRecord;
using agent::FailureInfo;
using agent::MemoryKind;
using agent::RecordType;

// A CUPTI *_params struct read by parameter position (call_arguments.h): its members are the
// function's parameters in order, and `kArity` (the description's) must be their number, or the
// structured binding does not compile.
template <typename Params, size_t kArity>
class ParamsArgs {
 public:
  explicit ParamsArgs(const Params& p) : p_(p) {}
  template <int I>
  auto at() const {
    return std::get<I>(Members());
  }

 private:
  auto Members() const {
    static_assert(kArity >= 1 && kArity <= 5, "add a case for this many parameters");
    if constexpr (kArity == 1) {
      const auto& [a] = p_;
      return std::tie(a);
    } else if constexpr (kArity == 2) {
      const auto& [a, b] = p_;
      return std::tie(a, b);
    } else if constexpr (kArity == 3) {
      const auto& [a, b, c] = p_;
      return std::tie(a, b, c);
    } else if constexpr (kArity == 4) {
      const auto& [a, b, c, d] = p_;
      return std::tie(a, b, c, d);
    } else {
      const auto& [a, b, c, d, e] = p_;
      return std::tie(a, b, c, d, e);
    }
  }
  const Params& p_;
};

EventRecord New(RecordType type, Api api) {
  EventRecord r;
  std::memset(&r, 0, sizeof(r));
  r.type = type;
  r.api = api;
  r.device = -1;
  return r;
}

// An acquire's outcome: AllocEvent when it succeeded with an address, FailedAlloc when it failed,
// nothing for a successful call that allocated nothing (size 0).
bool EmitAcquire(const AllocInfo& info, int32_t result, CallbackTranslation* t) {
  if (result == 0) {
    if (info.address == 0) return false;
    t->record = New(RecordType::kAlloc, info.api);
    agent::FillAllocRecord(t->record, info, info.device, info.pool);
  } else {
    t->record = New(RecordType::kFailed, info.api);
    agent::FillFailureRecord(t->record, agent::FailureOf(info, result), info.device, info.pool);
  }
  t->record.result = result;
  t->action = CallbackAction::kEmit;
  return true;
}

// The FailedAlloc of a call that is not an acquire (nothing for result 0: a call that succeeded
// without writing its out-parameter). Its kind is UNSPECIFIED, as the preload agent writes it: a
// reservation, mapping or handle is not device memory of a kind the call names.
bool EmitFailure(Api api, int32_t result, uint64_t size, int32_t device, CallbackTranslation* t) {
  if (result == 0) return false;
  const FailureInfo failure{api, result, size, device};
  t->record = New(RecordType::kFailed, api);
  agent::FillFailureRecord(t->record, failure, device, 0);
  t->action = CallbackAction::kEmit;
  return true;
}

// Builds the exit record of an outermost call to `kApi` whose parameters are `p`; false when the
// call is not an event. What it records is the call's description, as in the preload wrappers.
template <Api kApi, typename Params>
bool Build(const void* p, int32_t result, CallbackTranslation* t) {
  constexpr const CallDescription& d = DescribeCall(kApi);
  if constexpr (d.event == CallEvent::kFailureOnly) {
    return EmitFailure(kApi, result, 0, -1, t);
  } else {
    const ParamsArgs<Params, d.arity> args(*static_cast<const Params*>(p));
    if constexpr (d.event == CallEvent::kAcquire) {
      // The pool of a stream-ordered allocation without a pool parameter, and an import's size,
      // are the backend's to find.
      return EmitAcquire(agent::AcquireOf<kApi>(args, result), result, t);
    } else if constexpr (d.event == CallEvent::kTrimPool) {
      if (result != 0) return false;
      t->record = New(RecordType::kMemInfo, kApi);
      t->record.pool = agent::PoolOf<kApi>(args);
      t->action = CallbackAction::kSamplePool;
      return true;
    } else if constexpr (d.event == CallEvent::kRelease) {
      // Recorded with its result, seq taken at enter.
      t->record = New(RecordType::kFree, kApi);
      agent::FillFreeRecord(t->record, agent::FreeInfo{agent::ReleaseKeyOf<kApi>(args), 0, -1,
                                                       agent::StreamOf<kApi>(args)});
    } else if constexpr (d.event == CallEvent::kReserve || d.event == CallEvent::kMap ||
                         d.event == CallEvent::kFreeRange || d.event == CallEvent::kUnmap) {
      const agent::MapInfo info = agent::MapOf<kApi>(args, result);
      if constexpr (d.event == CallEvent::kReserve) {
        if (result != 0 || !agent::OutArgGiven<d.args.address>(args)) {
          return EmitFailure(kApi, result, info.size, -1, t);
        }
      } else if constexpr (d.event == CallEvent::kMap) {
        if (result != 0) return EmitFailure(kApi, result, info.size, -1, t);
      }
      t->record = New(RecordType::kMap, kApi);
      agent::FillMapRecord(t->record, info);
    } else {
      const agent::HandleInfo info = agent::HandleOf<kApi>(args, result);
      if constexpr (d.event == CallEvent::kCreateHandle || d.event == CallEvent::kImportHandle) {
        if (!agent::HandleWritten<kApi>(args, result)) {
          return EmitFailure(kApi, result, info.size, info.device, t);
        }
      }
      t->record = New(RecordType::kHandle, kApi);
      agent::FillHandleRecord(t->record, info);
    }
    if constexpr (agent::IsRelease(d.event)) {
      t->record.result = result;
      t->action = CallbackAction::kEmit;
      t->seq_from_enter = true;
      t->is_release = true;
    } else {
      // Retain and export carry their result whatever it is (a failed retain is a probe).
      t->record.result = result;
      t->action = CallbackAction::kEmit;
    }
    return true;
  }
}

// The address or handle a release names (0: nothing to release, e.g. cudaFree(NULL): not an
// event).
template <Api kApi, typename Params>
uint64_t ReleaseKey(const void* p) {
  constexpr const CallDescription& d = DescribeCall(kApi);
  if constexpr (agent::IsRelease(d.event)) {
    return agent::ReleaseKeyOf<kApi>(ParamsArgs<Params, d.arity>(*static_cast<const Params*>(p)));
  } else {
    return 0;
  }
}

// A tracked callback: its Api, its description's event, and its translation for its params.
struct Tracked {
  Api api;
  CallEvent event;
  uint64_t (*release_key)(const void* params);
  bool (*build)(const void* params, int32_t result, CallbackTranslation* t);
};

template <Api kApi, typename Params>
constexpr Tracked Track() {
  return Tracked{kApi, DescribeCall(kApi).event, &ReleaseKey<kApi, Params>, &Build<kApi, Params>};
}

bool Find(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, Tracked* out) {
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
#define FRAGSCOPE_CUPTI_DRIVER_CALLBACK(cb, api) \
  case CUPTI_DRIVER_TRACE_CBID_##cb:             \
    *out = Track<Api::k_##api, cb##_params>();   \
    return true;
#define FRAGSCOPE_CUPTI_RUNTIME_CALLBACK(cb, api)
#include "tracked_callbacks.inc"
#undef FRAGSCOPE_CUPTI_DRIVER_CALLBACK
#undef FRAGSCOPE_CUPTI_RUNTIME_CALLBACK
      default:
        return false;
    }
  }
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
#define FRAGSCOPE_CUPTI_DRIVER_CALLBACK(cb, api)
#define FRAGSCOPE_CUPTI_RUNTIME_CALLBACK(cb, api) \
  case CUPTI_RUNTIME_TRACE_CBID_##cb:             \
    *out = Track<Api::k_##api, cb##_params>();    \
    return true;
#include "tracked_callbacks.inc"
#undef FRAGSCOPE_CUPTI_DRIVER_CALLBACK
#undef FRAGSCOPE_CUPTI_RUNTIME_CALLBACK
      default:
        return false;
    }
  }
  return false;
}

}  // namespace

bool IsTrackedCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  Tracked t;
  return Find(domain, cbid, &t);
}

agent::Api CallbackApi(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  Tracked t;
  return Find(domain, cbid, &t) ? t.api : Api::k_UNKNOWN;
}

size_t TrackedCallbacks(CUpti_CallbackDomain domain, CUpti_CallbackId* out, size_t capacity) {
  size_t n = 0;
  auto add = [&](CUpti_CallbackId id) {
    if (n < capacity) out[n] = id;
    ++n;
  };
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
#define FRAGSCOPE_CUPTI_DRIVER_CALLBACK(cb, api) add(CUPTI_DRIVER_TRACE_CBID_##cb);
#define FRAGSCOPE_CUPTI_RUNTIME_CALLBACK(cb, api)
#include "tracked_callbacks.inc"
#undef FRAGSCOPE_CUPTI_DRIVER_CALLBACK
#undef FRAGSCOPE_CUPTI_RUNTIME_CALLBACK
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
#define FRAGSCOPE_CUPTI_DRIVER_CALLBACK(cb, api)
#define FRAGSCOPE_CUPTI_RUNTIME_CALLBACK(cb, api) add(CUPTI_RUNTIME_TRACE_CBID_##cb);
#include "tracked_callbacks.inc"
#undef FRAGSCOPE_CUPTI_DRIVER_CALLBACK
#undef FRAGSCOPE_CUPTI_RUNTIME_CALLBACK
  }
  return n < capacity ? n : capacity;
}

CallbackTranslation TranslateCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                      const CUpti_CallbackData& data, CallbackNesting& nesting) {
  CallbackTranslation t;
  Tracked tracked;
  if (!Find(domain, cbid, &tracked) || data.functionParams == nullptr) return t;
  if (data.callbackSite == CUPTI_API_ENTER) {
    const bool outermost = nesting.depth == 0;
    ++nesting.depth;
    if (outermost) {
      nesting.inner_failed = false;
      nesting.inner_result = 0;
      nesting.inner_correlation_id = 0;
      if (agent::IsRelease(tracked.event) && tracked.release_key(data.functionParams) != 0) {
        t.action = CallbackAction::kTakeSeq;
      }
    }
    return t;
  }
  if (data.callbackSite != CUPTI_API_EXIT || nesting.depth == 0) return t;  // exit w/o enter
  --nesting.depth;
  int32_t result = data.functionReturnValue != nullptr
                       ? *static_cast<const int32_t*>(data.functionReturnValue)
                       : 0;
  if (nesting.depth > 0) {
    // Nested: the outer call is the event; remember what the driver said.
    nesting.inner_correlation_id = data.correlationId;
    if (result != 0) {
      nesting.inner_failed = true;
      nesting.inner_result = result;
    }
    return t;
  }
  // A runtime call that failed after a failing driver call reports the driver's result.
  if (result != 0 && nesting.inner_failed) result = nesting.inner_result;
  if (agent::IsRelease(tracked.event) && tracked.release_key(data.functionParams) == 0) return t;
  if (!tracked.build(data.functionParams, result, &t)) return CallbackTranslation{};
  t.correlation_id = data.correlationId;
  t.inner_correlation_id = nesting.inner_correlation_id;
  return t;
}

bool TranslateMemoryActivity(const CUpti_ActivityMemory4& activity, EventRecord* out) {
  MemoryKind kind;
  switch (activity.memoryKind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
      kind = activity.isAsync ? MemoryKind::kPool : MemoryKind::kDevice;
      break;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
      kind = MemoryKind::kManaged;
      break;
    default:  // host memory, arrays, module globals (*_STATIC): not the segments we model
      return false;
  }
  RecordType type;
  switch (activity.memoryOperationType) {
    case CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION:
      type = RecordType::kAlloc;
      break;
    case CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE:
      type = RecordType::kFree;
      break;
    default:
      return false;
  }
  if (activity.address == 0) return false;
  *out = New(type, Api::k_UNKNOWN);
  out->address = activity.address;
  out->size = activity.bytes;
  out->device = static_cast<int32_t>(activity.deviceId);
  if (type == RecordType::kAlloc) out->kind = kind;
  return true;
}

bool TranslateMemoryPoolActivity(const CUpti_ActivityMemoryPool3& activity, EventRecord* out) {
  if (activity.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) return false;
  switch (activity.memoryPoolOperationType) {
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED:
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED:
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED:
      break;
    default:
      return false;
  }
  *out = New(RecordType::kMemInfo, Api::k_UNKNOWN);
  out->device = static_cast<int32_t>(activity.deviceId);
  const bool destroyed =
      activity.memoryPoolOperationType == CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED;
  agent::SetMemInfoPool(*out, destroyed ? 0 : activity.size, destroyed ? 0 : activity.utilizedSize);
  return true;
}

void ActivityCorrelator::Recorded(uint32_t correlation_id, uint64_t pool) {
  if (correlation_id == 0 || capacity_ == 0) return;
  if (recorded_.emplace(correlation_id, pool).second) {
    order_.push_back(correlation_id);
  } else if (pool != 0) {
    recorded_[correlation_id] = pool;
  }
  while (order_.size() > capacity_) {
    recorded_.erase(order_.front());
    order_.pop_front();
  }
}

bool ActivityCorrelator::IsNew(const CUpti_ActivityMemory4& activity) {
  auto it = recorded_.find(activity.correlationId);
  if (it == recorded_.end()) return true;
  if (it->second != 0 && activity.isAsync && activity.memoryPoolConfig.address != 0) {
    pool_by_base_[activity.memoryPoolConfig.address] = it->second;
  }
  return false;
}

uint64_t ActivityCorrelator::PoolForBase(uint64_t base_address) const {
  auto it = pool_by_base_.find(base_address);
  return it == pool_by_base_.end() ? 0 : it->second;
}

}  // namespace fragscope::cupti
