// Wrappers of the runtime API (runtime_hook_list.inc). Each function is exported three times:
// symbol@libcudart.so.12, symbol@libcudart.so.13 and unversioned, and each copy forwards to the
// same version of the next definition, so a process holding two runtimes stays correct. The
// runtime reaches the driver through our wrapped pointers; those inner calls only report their
// result here (one event, named after the runtime API, with the driver's result). What a call
// records and which parameter plays which role is its description (call_description.h).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <type_traits>

#include "hooks/call_arguments.h"
#include "hooks/call_description.h"
#include "hooks/driver_api.h"
#include "hooks/hook_exports.h"
#include "hooks/hook_table.h"
#include "recording/recorder.h"

namespace fragscope::agent {
namespace {

template <typename Fn>
Fn Real(RuntimeHookId id, int abi) {
  return reinterpret_cast<Fn>(RuntimeReal(id, abi));
}

// Whether a wrapper of hook `kId` taking `Args` has the parameters its description counts.
template <RuntimeHookId kId, typename... Args>
constexpr bool TakesDescribedParameters() {
  return sizeof...(Args) == DescribeCall(HookApi(kId)).arity;
}

// The per-thread default stream exports (_ptsz): their null stream is the calling thread's.
constexpr bool PerThreadStream(RuntimeHookId id) {
  return id == RuntimeHookId::k_cudaMallocAsync_ptsz ||
         id == RuntimeHookId::k_cudaMallocFromPoolAsync_ptsz;
}

// An acquire through the general hook: AllocEvent, or FailedAlloc with the driver's result when
// a driver call failed under it.
template <RuntimeHookId kId, typename Fn, typename... Args>
[[gnu::noinline]] cudaError_t AcquireHook(int abi, Args... args) {
  constexpr Api kApi = HookApi(kId);
  constexpr const CallDescription& d = DescribeCall(kApi);
  static_assert(TakesDescribedParameters<kId, Args...>());
  HookCall hook;
  auto real = Real<Fn>(kId, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(args...);
  hook.Returned(r, false);
  if (hook.record()) {
    AllocInfo info = AcquireOf<kApi>(WrapperArgs<Args...>(args...), r);
    if constexpr (d.kind == MemoryKind::kPool) {
      ResolveStreamOrdered(info, PerThreadStream(kId), d.args.pool != kNoArg);
    }
    RecordAcquire(info, hook.Reported(r));
  }
  return r;
}

using MallocFn = cudaError_t (*)(void**, size_t);

// The dormant fast path of cudaMalloc (recorder.h, DormantFastPathOpen). Its own function, like
// the general hook's: the wrapper that picks one then keeps no frame and tail-calls it.
template <RuntimeHookId kId>
[[gnu::noinline]] cudaError_t MallocDormant(int abi, void** ptr, size_t size) {
  constexpr Api kApi = HookApi(kId);
  constexpr MemoryKind kKind = DescribeCall(kApi).kind;
  void* real = RuntimeRealIfKnown(kId, abi);
  // No real function yet (the general hook resolves it) or no log yet (RecordAlloc takes one).
  if (real == nullptr || !AllocationLogs::ThreadHasUsableLog()) {
    return AcquireHook<kId, MallocFn>(abi, ptr, size);
  }
  DormantCall call;
  const cudaError_t r = reinterpret_cast<MallocFn>(real)(ptr, size);
  const AllocInfo info = AcquireOf<kApi>(WrapperArgs<void**, size_t>(ptr, size), r);
  if (__builtin_expect(info.address != 0, 1) &&
      LogDormantAlloc(kApi, info.address, info.size, kKind)) {
    return r;
  }
  FinishDormantAcquire(info, call.Reported(r));
  return r;
}

template <RuntimeHookId kId, typename Fn>
cudaError_t Malloc(int abi, void** ptr, size_t size) {
  static_assert(std::is_same_v<Fn, MallocFn>);
  if (DormantFastPathOpen()) return MallocDormant<kId>(abi, ptr, size);
  return AcquireHook<kId, MallocFn>(abi, ptr, size);
}

// cudaFree / cudaFreeAsync: the live entry goes (and seq is taken) before the real call.
// `log_searched`: see PendingRelease.
template <RuntimeHookId kId, typename Fn, typename... Args>
[[gnu::noinline]] cudaError_t ReleaseHook(int abi, bool log_searched, Args... args) {
  constexpr Api kApi = HookApi(kId);
  static_assert(TakesDescribedParameters<kId, Args...>());
  auto real = Real<Fn>(kId, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  const WrapperArgs<Args...> a(args...);
  const uint64_t key = ReleaseKeyOf<kApi>(a);
  const uint64_t stream = StreamOf<kApi>(a);
  HookCall hook;
  if (!hook.record() || key == 0) {  // cudaFree(nullptr) only initializes the runtime
    cudaError_t r = real(args...);
    hook.Returned(r, false);
    return r;
  }
  PendingRelease release(key, kApi, stream, log_searched);
  cudaError_t r = real(args...);
  hook.Returned(r, false);
  release.EndFree(kApi, hook.Reported(r), stream);
  return r;
}

// The dormant fast path (recorder.h): the release of an allocation still in this thread's
// allocation log takes it out there, before the real call as PendingRelease does.
template <RuntimeHookId kId, typename Fn, typename... Args>
[[gnu::noinline]] cudaError_t ReleaseDormant(int abi, uint64_t key, Args... args) {
  auto real = reinterpret_cast<Fn>(RuntimeRealIfKnown(kId, abi));
  if (real == nullptr) return ReleaseHook<kId, Fn>(abi, false, args...);  // resolves it
  LoggedAllocation logged;
  if (!Agent().logs.TryCancel(key, &logged)) {
    return ReleaseHook<kId, Fn>(abi, /*log_searched=*/true, args...);
  }
  DormantCall dormant;
  const cudaError_t r = real(args...);
  if (__builtin_expect(r != cudaSuccess, 0)) RestoreDormantRelease(logged, dormant.Reported(r));
  return r;
}

template <RuntimeHookId kId, typename Fn, typename... Args>
cudaError_t Release(int abi, Args... args) {
  const uint64_t key = ReleaseKeyOf<HookApi(kId)>(WrapperArgs<Args...>(args...));
  if (key != 0 && DormantFastPathOpen()) return ReleaseDormant<kId, Fn>(abi, key, args...);
  return ReleaseHook<kId, Fn>(abi, false, args...);
}

// A pool trim: after a success, a sample of the pool (MemInfo).
template <RuntimeHookId kId, typename Fn, typename... Args>
cudaError_t Trim(int abi, Args... args) {
  static_assert(TakesDescribedParameters<kId, Args...>());
  HookCall hook;
  auto real = Real<Fn>(kId, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(args...);
  hook.Returned(r, false);
  if (hook.record() && r == cudaSuccess) {
    SamplePool(CurrentDevice(), PoolOf<HookApi(kId)>(WrapperArgs<Args...>(args...)));
  }
  return r;
}

// The CUDA version a cudaGetDriverEntryPoint of runtime ABI `abi` asks the driver for.
int RuntimeCudaVersion(int abi) { return abi == kCudart12 ? 12000 : 13000; }

template <RuntimeHookId kId, typename Fn>
cudaError_t GetDriverEntryPoint(int abi, const char* symbol, void** fn, unsigned long long flags,
                                cudaDriverEntryPointQueryResult* status) {
  HookCall hook(/*keep_errno=*/true);  // wrapping the answer may call dlsym
  auto real = Real<Fn>(kId, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(symbol, fn, flags, status);
  hook.Returned(r, false);
  if (r == cudaSuccess && fn != nullptr && *fn != nullptr && symbol != nullptr) {
    *fn = WrapDriverLookup(symbol, RuntimeCudaVersion(abi), flags, *fn);
  }
  return r;
}

template <RuntimeHookId kId, typename Fn>
cudaError_t GetDriverEntryPointByVersion(int abi, const char* symbol, void** fn,
                                         unsigned int version, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* status) {
  HookCall hook(/*keep_errno=*/true);  // wrapping the answer may call dlsym
  auto real = Real<Fn>(kId, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(symbol, fn, version, flags, status);
  hook.Returned(r, false);
  if (r == cudaSuccess && fn != nullptr && *fn != nullptr && symbol != nullptr) {
    *fn = WrapDriverLookup(symbol, static_cast<int>(version), flags, *fn);
  }
  return r;
}

}  // namespace

// The three exports of `symbol`, all calling `impl<id, function type>(abi, args...)`. The fs_rt*
// names are made local by the version script (exports.map); only the CUDA names stay visible.
#define FRAGSCOPE_RUNTIME_WRAPPER(symbol, impl, params, args)                              \
  extern "C" FRAGSCOPE_VISIBLE __attribute__((symver(#symbol "@libcudart.so.12")))         \
  cudaError_t fs_rt12_##symbol params {                                                    \
    return impl<RuntimeHookId::k_##symbol, cudaError_t(*) params>(kCudart12,               \
                                                                  FRAGSCOPE_UNPAREN args); \
  }                                                                                        \
  extern "C" FRAGSCOPE_VISIBLE __attribute__((symver(#symbol "@libcudart.so.13")))         \
  cudaError_t fs_rt13_##symbol params {                                                    \
    return impl<RuntimeHookId::k_##symbol, cudaError_t(*) params>(kCudart13,               \
                                                                  FRAGSCOPE_UNPAREN args); \
  }                                                                                        \
  extern "C" FRAGSCOPE_VISIBLE cudaError_t fs_rtU_##symbol params {                        \
    return impl<RuntimeHookId::k_##symbol, cudaError_t(*) params>(kCudartUnversioned,      \
                                                                  FRAGSCOPE_UNPAREN args); \
  }                                                                                        \
  FRAGSCOPE_EXPORT_AS("fs_rtU_" #symbol, #symbol);

FRAGSCOPE_RUNTIME_WRAPPER(cudaMalloc, Malloc, (void** ptr, size_t size), (ptr, size))
FRAGSCOPE_RUNTIME_WRAPPER(cudaFree, Release, (void* ptr), (ptr))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocAsync, AcquireHook,
                          (void** ptr, size_t size, cudaStream_t stream), (ptr, size, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocAsync_ptsz, AcquireHook,
                          (void** ptr, size_t size, cudaStream_t stream), (ptr, size, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaFreeAsync, Release, (void* ptr, cudaStream_t stream), (ptr, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaFreeAsync_ptsz, Release, (void* ptr, cudaStream_t stream),
                          (ptr, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocFromPoolAsync, AcquireHook,
                          (void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream),
                          (ptr, size, pool, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocFromPoolAsync_ptsz, AcquireHook,
                          (void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream),
                          (ptr, size, pool, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocPitch, AcquireHook,
                          (void** ptr, size_t* pitch, size_t width, size_t height),
                          (ptr, pitch, width, height))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMalloc3D, AcquireHook, (cudaPitchedPtr * pitched, cudaExtent extent),
                          (pitched, extent))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocManaged, AcquireHook,
                          (void** ptr, size_t size, unsigned int flags), (ptr, size, flags))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMemPoolTrimTo, Trim, (cudaMemPool_t pool, size_t keep), (pool, keep))
FRAGSCOPE_RUNTIME_WRAPPER(cudaGetDriverEntryPoint, GetDriverEntryPoint,
                          (const char* symbol, void** fn, unsigned long long flags,
                           cudaDriverEntryPointQueryResult* status),
                          (symbol, fn, flags, status))
FRAGSCOPE_RUNTIME_WRAPPER(cudaGetDriverEntryPoint_ptsz, GetDriverEntryPoint,
                          (const char* symbol, void** fn, unsigned long long flags,
                           cudaDriverEntryPointQueryResult* status),
                          (symbol, fn, flags, status))
FRAGSCOPE_RUNTIME_WRAPPER(cudaGetDriverEntryPointByVersion, GetDriverEntryPointByVersion,
                          (const char* symbol, void** fn, unsigned int version,
                           unsigned long long flags, cudaDriverEntryPointQueryResult* status),
                          (symbol, fn, version, flags, status))
FRAGSCOPE_RUNTIME_WRAPPER(cudaGetDriverEntryPointByVersion_ptsz, GetDriverEntryPointByVersion,
                          (const char* symbol, void** fn, unsigned int version,
                           unsigned long long flags, cudaDriverEntryPointQueryResult* status),
                          (symbol, fn, version, flags, status))

}  // namespace fragscope::agent
