// CUPTI backend, the pure part: what one CUPTI callback or activity record means as the agent's
// event records (interpose/src/recording/event_record.h), so libfragscope_cupti.so writes the same
// frames as the preloaded agent. Nothing here calls CUPTI or the driver: inputs are the structures
// CUPTI hands over (CUpti_CallbackData with the generated *_params structs, CUpti_Activity*
// records), which the unit tests build by hand (tests/cupti/).
//
// What the backend still fills in itself: seq, time, tid, stack; the device when a callback
// record says -1 (it asks cuCtxGetDevice); the size of a release (from its own live table); the
// device free/total of failures; the pool handle of a cuMemAllocAsync (the device's current pool).
//
// Thread safety: the functions are pure; a CallbackNesting belongs to one thread (CUPTI calls the
// callback on the thread making the CUDA call); ActivityCorrelator is not synchronized (the
// backend holds its lock).
#ifndef FRAGSCOPE_INTERPOSE_CUPTI_TRANSLATE_H_
#define FRAGSCOPE_INTERPOSE_CUPTI_TRANSLATE_H_

#include <cupti.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "recording/event_record.h"

namespace fragscope::cupti {

// One thread's position in nested tracked calls: a runtime call (cudaMalloc) reaches the driver
// (cuMemAlloc_v2) and CUPTI reports both; only the outermost is an event, named after it, with
// the driver's result when the runtime call failed after a failing driver call (as the agent).
struct CallbackNesting {
  int depth = 0;
  bool inner_failed = false;
  int32_t inner_result = 0;
  uint32_t inner_correlation_id = 0;  // of the last nested tracked call (0: none)
};

// What the backend does with one callback.
enum class CallbackAction : uint8_t {
  kNone,        // untracked function, nested call, or a success that is not an event
  kTakeSeq,     // enter of an outermost release: take the sequence number now, before the call
  kEmit,        // exit: push `record` (seq: the one taken at enter if `seq_from_enter`, else new)
  kSamplePool,  // exit of a successful pool trim: sample pool `record.pool` (MemInfo)
};

struct CallbackTranslation {
  CallbackAction action = CallbackAction::kNone;
  bool seq_from_enter = false;  // releases: seq was taken at kTakeSeq
  bool is_release = false;      // kEmit of a kFree / OP_FREE_RANGE / OP_UNMAP / OP_RELEASE
  // kEmit: the correlation ids of this call and of the nested driver call it made (0: none);
  // an activity record of the same memory carries one of them (see ActivityCorrelator).
  uint32_t correlation_id = 0;
  uint32_t inner_correlation_id = 0;
  agent::EventRecord record{};  // type, api, result, address, size, ... (seq/time/tid/stack 0)
};

// Whether (domain, cbid) is a function the backend subscribes to.
bool IsTrackedCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
// The Api value of a tracked callback (k_UNKNOWN otherwise).
agent::Api CallbackApi(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
// Every tracked cbid of `domain` (for cuptiEnableCallback); returns how many were written.
size_t TrackedCallbacks(CUpti_CallbackDomain domain, CUpti_CallbackId* out, size_t capacity);

// Translates one API callback (domain DRIVER_API or RUNTIME_API). `data.functionReturnValue`
// points at a CUresult / cudaError_t (read only at exit). Updates `nesting`.
CallbackTranslation TranslateCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                      const CUpti_CallbackData& data, CallbackNesting& nesting);

// CUPTI_ACTIVITY_KIND_MEMORY2 (CUpti_ActivityMemory4): device or managed memory made or freed
// by the driver. Most are the same allocations the callbacks saw (same correlation id); the rest
// (graph memory nodes allocated at launch, allocations by code the callbacks do not cover) are
// events only this record shows. Fills `out` with a kAlloc / kFree record (api UNKNOWN, device
// from the record, kind DEVICE/MANAGED/POOL) and returns true; false for memory that is not
// device memory (pinned/pageable host, arrays) or static (module globals).
bool TranslateMemoryActivity(const CUpti_ActivityMemory4& activity, agent::EventRecord* out);

// CUPTI_ACTIVITY_KIND_MEMORY_POOL (CUpti_ActivityMemoryPool3): a pool's reserved and used bytes
// after it was created, trimmed or destroyed, as a MemInfo record (aux2 reserved, aux3 used,
// free/total 0 = not sampled). The record names the pool by its base address, not by its
// CUmemoryPool handle, so `pool` is left 0 for ActivityCorrelator to resolve. False for imported
// pools (another process's memory).
bool TranslateMemoryPoolActivity(const CUpti_ActivityMemoryPool3& activity,
                                 agent::EventRecord* out);

// Ties activity records to callbacks by correlation id:
//  - allocations and frees the callbacks already recorded are not recorded again;
//  - a pool's base address (MEMORY2 memoryPoolConfig.address) is tied to the CUmemoryPool handle
//    the callback of the same correlation id used, so MEMORY_POOL records can name the pool as
//    AllocEvent.pool does.
// Memory: at most `capacity` remembered correlation ids (oldest forgotten first: an activity
// record delivered later than that is recorded twice rather than lost) plus one entry per pool.
class ActivityCorrelator {
 public:
  explicit ActivityCorrelator(size_t capacity = 1 << 16) : capacity_(capacity) {}

  // A callback recorded an event for `correlation_id`; `pool` is the CUmemoryPool it used
  // (0 when not a pool allocation).
  void Recorded(uint32_t correlation_id, uint64_t pool);
  // Whether the MEMORY2 `activity` is new (no callback recorded it). Learns its pool's base.
  bool IsNew(const CUpti_ActivityMemory4& activity);
  // The CUmemoryPool handle of the pool based at `base_address`, 0 if not learned.
  uint64_t PoolForBase(uint64_t base_address) const;

 private:
  size_t capacity_;
  std::unordered_map<uint32_t, uint64_t> recorded_;  // correlation id -> pool handle
  std::deque<uint32_t> order_;
  std::unordered_map<uint64_t, uint64_t> pool_by_base_;
};

}  // namespace fragscope::cupti

#endif  // FRAGSCOPE_INTERPOSE_CUPTI_TRANSLATE_H_
