// The CUPTI backend's translation (interpose/cupti/translate.h), fed with hand-built callback
// data and activity records as CUPTI would deliver them, and checked down to the protobuf frame
// the agent's encoder makes of the result. No driver, no libcupti.
#include "translate.h"

#include <gtest/gtest.h>

#include <vector>

#include "parse_frames.h"
#include "shipping/frame_encoder.h"
#include "shipping/wire_encoder.h"

namespace fragscope::cupti {
namespace {

using agent::Api;
using agent::MemoryKind;
using agent::RecordType;

constexpr auto kDriver = CUPTI_CB_DOMAIN_DRIVER_API;
constexpr auto kRuntime = CUPTI_CB_DOMAIN_RUNTIME_API;

// One call as CUPTI reports it: the same params struct at enter and exit, the return value
// written only by the time of the exit callback.
class Call {
 public:
  Call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params, uint32_t corr)
      : domain_(domain), cbid_(cbid) {
    data_.functionParams = params;
    data_.functionReturnValue = &result_;
    data_.correlationId = corr;
  }
  CallbackTranslation Enter(CallbackNesting& n) {
    data_.callbackSite = CUPTI_API_ENTER;
    return TranslateCallback(domain_, cbid_, data_, n);
  }
  CallbackTranslation Exit(CallbackNesting& n, int32_t result) {
    data_.callbackSite = CUPTI_API_EXIT;
    result_ = result;
    return TranslateCallback(domain_, cbid_, data_, n);
  }

 private:
  CUpti_CallbackDomain domain_;
  CUpti_CallbackId cbid_;
  int32_t result_ = 0;
  CUpti_CallbackData data_{};
};

// A single (not nested) call: enter then exit.
CallbackTranslation Once(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params,
                         int32_t result, CallbackNesting* nesting = nullptr) {
  CallbackNesting local;
  CallbackNesting& n = nesting != nullptr ? *nesting : local;
  Call call(domain, cbid, params, 7);
  call.Enter(n);
  return call.Exit(n, result);
}

// Encodes a record with the agent's encoder and parses it back with libprotobuf.
v1::Frame Encode(agent::EventRecord r) {
  r.seq = 42;
  uint8_t buffer[512];
  agent::WireWriter w(buffer, sizeof(buffer));
  EXPECT_TRUE(agent::EncodeRecord(w, r));
  bool ok = false;
  std::vector<v1::Frame> frames = agent_test::ParseFrames(w.data(), w.size(), &ok);
  EXPECT_TRUE(ok);
  EXPECT_EQ(frames.size(), 1u);
  return frames.empty() ? v1::Frame() : frames[0];
}

// cudaMalloc reaching cuMemAlloc_v2: CUPTI reports both; one event, named after the runtime call.
TEST(CuptiTranslate, RuntimeCallNestingADriverCallIsOneEvent) {
  CallbackNesting n;
  void* device_ptr = reinterpret_cast<void*>(0x7f0000200000);
  cudaMalloc_v3020_params outer{&device_ptr, 1 << 20};
  CUdeviceptr dptr = 0x7f0000200000;
  cuMemAlloc_v2_params inner{&dptr, 1 << 20};
  Call runtime(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &outer, 11);
  Call driver(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &inner, 12);
  EXPECT_EQ(runtime.Enter(n).action, CallbackAction::kNone);
  EXPECT_EQ(driver.Enter(n).action, CallbackAction::kNone);
  EXPECT_EQ(n.depth, 2);
  EXPECT_EQ(driver.Exit(n, CUDA_SUCCESS).action, CallbackAction::kNone);
  CallbackTranslation t = runtime.Exit(n, cudaSuccess);
  EXPECT_EQ(n.depth, 0);
  ASSERT_EQ(t.action, CallbackAction::kEmit);
  EXPECT_FALSE(t.seq_from_enter);
  EXPECT_EQ(t.correlation_id, 11u);
  EXPECT_EQ(t.inner_correlation_id, 12u);
  v1::Frame f = Encode(t.record);
  ASSERT_TRUE(f.has_alloc()) << f.DebugString();
  EXPECT_EQ(f.alloc().api(), v1::API_cudaMalloc);
  EXPECT_EQ(f.alloc().address(), 0x7f0000200000u);
  EXPECT_EQ(f.alloc().size(), 1u << 20);
  EXPECT_EQ(f.alloc().kind(), v1::MEMORY_KIND_DEVICE);
  EXPECT_EQ(f.alloc().device(), -1);  // the backend asks the driver
  EXPECT_EQ(f.alloc().seq(), 42u);
}

// A runtime failure after a failing driver call reports the driver's result, as the agent does.
TEST(CuptiTranslate, RuntimeFailureCarriesTheDriverResult) {
  CallbackNesting n;
  void* device_ptr = nullptr;
  cudaMalloc_v3020_params outer{&device_ptr, size_t{5} << 30};
  CUdeviceptr dptr = 0;
  cuMemAlloc_v2_params inner{&dptr, size_t{5} << 30};
  Call runtime(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &outer, 1);
  Call driver(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &inner, 2);
  runtime.Enter(n);
  driver.Enter(n);
  driver.Exit(n, CUDA_ERROR_OUT_OF_MEMORY);
  CallbackTranslation t = runtime.Exit(n, cudaErrorInitializationError);
  ASSERT_EQ(t.action, CallbackAction::kEmit);
  v1::Frame f = Encode(t.record);
  ASSERT_TRUE(f.has_failed()) << f.DebugString();
  EXPECT_EQ(f.failed().api(), v1::API_cudaMalloc);
  EXPECT_EQ(f.failed().result(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(f.failed().size(), 5ull << 30);
  EXPECT_EQ(f.failed().kind(), v1::MEMORY_KIND_DEVICE);
  // The next outermost call starts clean.
  CUdeviceptr ok_ptr = 0x1000;
  cuMemAlloc_v2_params alone{&ok_ptr, 4096};
  CallbackTranslation next = Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &alone, 0, &n);
  EXPECT_EQ(next.record.type, RecordType::kAlloc);
  EXPECT_EQ(next.inner_correlation_id, 0u);
}

TEST(CuptiTranslate, ReleasesTakeTheirSeqAtEnter) {
  CallbackNesting n;
  cudaFree_v3020_params params{reinterpret_cast<void*>(0x7f0000200000)};
  Call call(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, &params, 3);
  EXPECT_EQ(call.Enter(n).action, CallbackAction::kTakeSeq);
  CallbackTranslation t = call.Exit(n, cudaSuccess);
  ASSERT_EQ(t.action, CallbackAction::kEmit);
  EXPECT_TRUE(t.seq_from_enter);
  EXPECT_TRUE(t.is_release);
  v1::Frame f = Encode(t.record);
  ASSERT_TRUE(f.has_free()) << f.DebugString();
  EXPECT_EQ(f.free().api(), v1::API_cudaFree);
  EXPECT_EQ(f.free().address(), 0x7f0000200000u);
  EXPECT_EQ(f.free().result(), 0);
}

TEST(CuptiTranslate, FailedReleaseIsRecordedWithItsResult) {
  cuMemFree_v2_params params{0x1234};
  CallbackTranslation t =
      Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &params, CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(t.action, CallbackAction::kEmit);
  EXPECT_EQ(t.record.type, RecordType::kFree);
  EXPECT_EQ(t.record.result, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.record.api, Api::k_cuMemFree_v2);
}

// cudaFree(NULL) and zero-size allocations are not events (agent README, "What an event is").
TEST(CuptiTranslate, NullFreeAndZeroSizeAllocAreNotEvents) {
  CallbackNesting n;
  cudaFree_v3020_params null_free{nullptr};
  Call call(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, &null_free, 1);
  EXPECT_EQ(call.Enter(n).action, CallbackAction::kNone);
  EXPECT_EQ(call.Exit(n, cudaSuccess).action, CallbackAction::kNone);
  EXPECT_EQ(n.depth, 0);
  void* p = nullptr;
  cudaMalloc_v3020_params zero{&p, 0};
  EXPECT_EQ(Once(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &zero, 0).action,
            CallbackAction::kNone);
}

TEST(CuptiTranslate, PitchedAllocationsCountPitchTimesRows) {
  CUdeviceptr dptr = 0x2000000;
  size_t pitch = 0;
  cuMemAllocPitch_v2_params params{&dptr, &pitch, 1000, 30, 4};
  pitch = 1024;  // written by the driver before the exit callback
  CallbackTranslation t = Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, &params, 0);
  v1::Frame f = Encode(t.record);
  ASSERT_TRUE(f.has_alloc());
  EXPECT_EQ(f.alloc().kind(), v1::MEMORY_KIND_PITCHED);
  EXPECT_EQ(f.alloc().size(), 1024u * 30);
  EXPECT_EQ(f.alloc().pitch(), 1024u);

  cudaPitchedPtr pitched{reinterpret_cast<void*>(0x3000000), 512, 500, 8};
  cudaMalloc3D_v3020_params params3d{&pitched, cudaExtent{500, 8, 3}};
  f = Encode(Once(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020, &params3d, 0).record);
  ASSERT_TRUE(f.has_alloc());
  EXPECT_EQ(f.alloc().api(), v1::API_cudaMalloc3D);
  EXPECT_EQ(f.alloc().address(), 0x3000000u);
  EXPECT_EQ(f.alloc().size(), 512u * 8 * 3);
  EXPECT_EQ(f.alloc().pitch(), 512u);
}

TEST(CuptiTranslate, StreamOrderedAllocationsNameStreamAndPool) {
  CUdeviceptr dptr = 0x5000;
  auto stream = reinterpret_cast<CUstream>(0xabc0);
  auto pool = reinterpret_cast<CUmemoryPool>(0xdef0);
  cuMemAllocFromPoolAsync_params params{&dptr, 999, pool, stream};
  v1::Frame f =
      Encode(Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, &params, 0).record);
  ASSERT_TRUE(f.has_alloc());
  EXPECT_EQ(f.alloc().api(), v1::API_cuMemAllocFromPoolAsync);
  EXPECT_EQ(f.alloc().kind(), v1::MEMORY_KIND_POOL);
  EXPECT_EQ(f.alloc().stream(), 0xabc0u);
  EXPECT_EQ(f.alloc().pool(), 0xdef0u);

  void* p = reinterpret_cast<void*>(0x6000);
  cudaMallocAsync_v11020_params rt{&p, 5000, reinterpret_cast<cudaStream_t>(0x77)};
  f = Encode(Once(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020, &rt, 0).record);
  EXPECT_EQ(f.alloc().api(), v1::API_cudaMallocAsync);
  EXPECT_EQ(f.alloc().pool(), 0u);  // the device's current pool: the backend looks it up
  EXPECT_EQ(f.alloc().stream(), 0x77u);

  cudaFreeAsync_v11020_params free_params{p, reinterpret_cast<cudaStream_t>(0x77)};
  f = Encode(Once(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, &free_params, 0).record);
  ASSERT_TRUE(f.has_free());
  EXPECT_EQ(f.free().api(), v1::API_cudaFreeAsync);
  EXPECT_EQ(f.free().stream(), 0x77u);
}

TEST(CuptiTranslate, VirtualMemoryManagement) {
  CUdeviceptr va = 0;
  cuMemAddressReserve_params reserve{&va, 64 << 20, 2 << 20, 0, 0};
  va = 0x10000000;
  v1::Frame f =
      Encode(Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve, &reserve, 0).record);
  ASSERT_TRUE(f.has_map()) << f.DebugString();
  EXPECT_EQ(f.map().op(), v1::MapEvent::OP_RESERVE);
  EXPECT_EQ(f.map().address(), 0x10000000u);
  EXPECT_EQ(f.map().size(), 64u << 20);
  EXPECT_EQ(f.map().alignment(), 2u << 20);

  CUmemGenericAllocationHandle handle = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 3;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  cuMemCreate_params create{&handle, 20 << 20, &prop, 0};
  handle = 0x4242;
  f = Encode(Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemCreate, &create, 0).record);
  ASSERT_TRUE(f.has_handle()) << f.DebugString();
  EXPECT_EQ(f.handle().op(), v1::HandleEvent::OP_CREATE);
  EXPECT_EQ(f.handle().handle(), 0x4242u);
  EXPECT_EQ(f.handle().size(), 20u << 20);
  EXPECT_EQ(f.handle().device(), 3);
  EXPECT_EQ(f.handle().handle_type(),
            static_cast<uint32_t>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));

  // A cuMemCreate refused (PyTorch tries a handle type that may not be supported) is a failure
  // record on the device the properties named, for the collector to judge.
  f = Encode(
      Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemCreate, &create, CUDA_ERROR_NOT_SUPPORTED).record);
  ASSERT_TRUE(f.has_failed());
  EXPECT_EQ(f.failed().device(), 3);
  EXPECT_EQ(f.failed().result(), CUDA_ERROR_NOT_SUPPORTED);

  cuMemMap_params map{0x10000000, 20 << 20, 0, 0x4242, 0};
  f = Encode(Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemMap, &map, 0).record);
  ASSERT_TRUE(f.has_map());
  EXPECT_EQ(f.map().op(), v1::MapEvent::OP_MAP);
  EXPECT_EQ(f.map().handle(), 0x4242u);

  cuMemUnmap_params unmap{0x10000000, 20 << 20};
  CallbackTranslation t = Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, &unmap, 0);
  EXPECT_TRUE(t.seq_from_enter);
  f = Encode(t.record);
  EXPECT_EQ(f.map().op(), v1::MapEvent::OP_UNMAP);
  EXPECT_EQ(f.map().size(), 20u << 20);

  cuMemRelease_params release{0x4242};
  t = Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemRelease, &release, 0);
  EXPECT_TRUE(t.seq_from_enter);
  f = Encode(t.record);
  EXPECT_EQ(f.handle().op(), v1::HandleEvent::OP_RELEASE);
  EXPECT_EQ(f.handle().handle(), 0x4242u);

  cuMemAddressFree_params address_free{0x10000000, 64 << 20};
  f = Encode(Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree, &address_free, 0).record);
  EXPECT_EQ(f.map().op(), v1::MapEvent::OP_FREE_RANGE);
  EXPECT_EQ(f.map().address(), 0x10000000u);
}

// A failed cuMemRetainAllocationHandle is a probe ("is this VMM memory?"), recorded as a retain
// with its result, never as an allocation failure.
TEST(CuptiTranslate, FailedRetainIsARetainRecordNotAFailure) {
  CUmemGenericAllocationHandle handle = 0;
  cuMemRetainAllocationHandle_params params{&handle, reinterpret_cast<void*>(0x7000)};
  CallbackTranslation t = Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemRetainAllocationHandle,
                               &params, CUDA_ERROR_INVALID_VALUE);
  v1::Frame f = Encode(t.record);
  ASSERT_TRUE(f.has_handle());
  EXPECT_EQ(f.handle().op(), v1::HandleEvent::OP_RETAIN);
  EXPECT_EQ(f.handle().result(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(f.handle().address(), 0x7000u);
}

TEST(CuptiTranslate, FailureOnlyFunctionsRecordOnlyFailures) {
  cuLaunchKernel_params params{};
  EXPECT_EQ(Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &params, 0).action,
            CallbackAction::kNone);
  CallbackTranslation t =
      Once(kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, &params, CUDA_ERROR_OUT_OF_MEMORY);
  v1::Frame f = Encode(t.record);
  ASSERT_TRUE(f.has_failed());
  EXPECT_EQ(f.failed().api(), v1::API_cuLaunchKernel);
  EXPECT_EQ(f.failed().size(), 0u);
}

TEST(CuptiTranslate, PoolTrimAsksForAPoolSample) {
  cudaMemPoolTrimTo_v11020_params params{reinterpret_cast<cudaMemPool_t>(0x9900), 0};
  CallbackTranslation t =
      Once(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolTrimTo_v11020, &params, cudaSuccess);
  EXPECT_EQ(t.action, CallbackAction::kSamplePool);
  EXPECT_EQ(t.record.pool, 0x9900u);
  EXPECT_EQ(Once(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolTrimTo_v11020, &params,
                 cudaErrorInvalidValue)
                .action,
            CallbackAction::kNone);
}

TEST(CuptiTranslate, UntrackedCallbacksLeaveNestingAlone) {
  CallbackNesting n;
  cuMemGetInfo_v2_params params{};
  Call call(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2, &params, 1);
  EXPECT_EQ(call.Enter(n).action, CallbackAction::kNone);
  EXPECT_EQ(n.depth, 0);
  EXPECT_EQ(call.Exit(n, 0).action, CallbackAction::kNone);
  EXPECT_EQ(n.depth, 0);
  EXPECT_FALSE(IsTrackedCallback(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2));
  EXPECT_FALSE(IsTrackedCallback(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2));
}

// Every cbid handed to cuptiEnableCallback is tracked and names a real Api.
TEST(CuptiTranslate, EveryTrackedCallbackHasAnApi) {
  for (CUpti_CallbackDomain domain : {kDriver, kRuntime}) {
    CUpti_CallbackId ids[256];
    size_t n = TrackedCallbacks(domain, ids, 256);
    EXPECT_GT(n, domain == kDriver ? 40u : 10u);
    EXPECT_LT(n, 256u);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(IsTrackedCallback(domain, ids[i])) << ids[i];
      EXPECT_NE(CallbackApi(domain, ids[i]), Api::k_UNKNOWN) << ids[i];
    }
  }
  EXPECT_EQ(CallbackApi(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc), Api::k_cuMemAlloc);
  EXPECT_EQ(CallbackApi(kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2), Api::k_cuMemAlloc_v2);
}

CUpti_ActivityMemory4 MemoryRecord(CUpti_ActivityMemoryOperationType op,
                                   CUpti_ActivityMemoryKind kind, uint32_t corr) {
  CUpti_ActivityMemory4 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = op;
  m.memoryKind = kind;
  m.correlationId = corr;
  m.address = 0x7f0000400000;
  m.bytes = 3 << 20;
  m.deviceId = 1;
  return m;
}

TEST(CuptiTranslate, MemoryActivityRecords) {
  agent::EventRecord r;
  auto alloc = MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                            CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 5);
  ASSERT_TRUE(TranslateMemoryActivity(alloc, &r));
  v1::Frame f = Encode(r);
  ASSERT_TRUE(f.has_alloc());
  EXPECT_EQ(f.alloc().address(), 0x7f0000400000u);
  EXPECT_EQ(f.alloc().size(), 3u << 20);
  EXPECT_EQ(f.alloc().device(), 1);
  EXPECT_EQ(f.alloc().kind(), v1::MEMORY_KIND_DEVICE);
  EXPECT_EQ(f.alloc().api(), v1::API_UNKNOWN);

  alloc.isAsync = 1;
  ASSERT_TRUE(TranslateMemoryActivity(alloc, &r));
  EXPECT_EQ(r.kind, MemoryKind::kPool);

  auto release = MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE,
                              CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, 6);
  ASSERT_TRUE(TranslateMemoryActivity(release, &r));
  EXPECT_EQ(r.type, RecordType::kFree);

  for (auto kind : {CUPTI_ACTIVITY_MEMORY_KIND_PINNED, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE,
                    CUPTI_ACTIVITY_MEMORY_KIND_ARRAY, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC}) {
    EXPECT_FALSE(TranslateMemoryActivity(
        MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, kind, 7), &r))
        << kind;
  }
}

TEST(CuptiTranslate, MemoryPoolActivityBecomesAPoolSample) {
  CUpti_ActivityMemoryPool3 p{};
  p.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
  p.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED;
  p.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  p.deviceId = 2;
  p.address = 0x7e0000000000;
  p.size = 64 << 20;
  p.utilizedSize = 5 << 20;
  agent::EventRecord r;
  ASSERT_TRUE(TranslateMemoryPoolActivity(p, &r));
  r.pool = 0xdef0;  // what ActivityCorrelator resolves
  v1::Frame f = Encode(r);
  ASSERT_TRUE(f.has_mem_info()) << f.DebugString();
  EXPECT_EQ(f.mem_info().device(), 2);
  EXPECT_EQ(f.mem_info().pool(), 0xdef0u);
  EXPECT_EQ(f.mem_info().pool_reserved_bytes(), 64u << 20);
  EXPECT_EQ(f.mem_info().pool_used_bytes(), 5u << 20);
  EXPECT_EQ(f.mem_info().total_bytes(), 0u);  // not sampled: the collector ignores 0/0

  p.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED;
  ASSERT_TRUE(TranslateMemoryPoolActivity(p, &r));
  EXPECT_EQ(r.aux2, 0u);
  p.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_IMPORTED;
  EXPECT_FALSE(TranslateMemoryPoolActivity(p, &r));
}

TEST(CuptiTranslate, CorrelatorSkipsWhatCallbacksSawAndLearnsPoolBases) {
  ActivityCorrelator c(/*capacity=*/2);
  c.Recorded(10, 0xdef0);
  auto seen = MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                           CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 10);
  seen.isAsync = 1;
  seen.memoryPoolConfig.address = 0x7e0000000000;
  EXPECT_FALSE(c.IsNew(seen));
  EXPECT_EQ(c.PoolForBase(0x7e0000000000), 0xdef0u);
  EXPECT_EQ(c.PoolForBase(0x1234), 0u);
  // A graph memory node's allocation: no callback recorded its correlation id.
  EXPECT_TRUE(c.IsNew(MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                                   CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 99)));
  // Bounded: the oldest id is forgotten first.
  c.Recorded(11, 0);
  c.Recorded(12, 0);
  EXPECT_TRUE(c.IsNew(seen));
  EXPECT_FALSE(c.IsNew(MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE,
                                    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 12)));
  c.Recorded(0, 0xaaaa);  // no correlation id: nothing to remember
  EXPECT_TRUE(c.IsNew(MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE,
                                   CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0)));
}

}  // namespace
}  // namespace fragscope::cupti
