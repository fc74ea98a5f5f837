// Wrappers of the runtime API (runtime_hook_list.inc). Each function is exported three times:
// symbol@libcudart.so.12, symbol@libcudart.so.13 and unversioned, and each copy forwards to the
// same version of the next definition, so a process holding two runtimes stays correct. The
// runtime reaches the driver through our wrapped pointers; those inner calls only report their
// result here (one event, named after the runtime API, with the driver's result).
#include <cuda.h>
#include <cuda_runtime_api.h>

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

Api ApiOf(RuntimeHookId id) { return HookApi(id); }

uint64_t Address(const void* p) { return reinterpret_cast<uint64_t>(p); }

[[gnu::always_inline]] inline void OnAcquire(const HookCall& hook, RuntimeHookId id, cudaError_t r,
                                             uint64_t address, uint64_t size, MemoryKind kind,
                                             uint64_t stream = 0, uint64_t pool = 0,
                                             uint64_t pitch = 0, bool in_capture = false) {
  AllocInfo info{ApiOf(id), address, size, kind};
  info.stream = stream;
  info.pool = pool;
  info.pitch = pitch;
  info.in_capture = in_capture;
  RecordAcquire(info, hook.Reported(r));
}

[[gnu::noinline]] cudaError_t MallocHook(RuntimeHookId id, int abi, void** ptr, size_t size) {
  HookCall hook;
  auto real = Real<cudaError_t (*)(void**, size_t)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(ptr, size);
  hook.Returned(r, false);
  if (hook.record()) {
    OnAcquire(hook, id, r, r == cudaSuccess && ptr ? Address(*ptr) : 0, size, MemoryKind::kDevice);
  }
  return r;
}

// The dormant fast path (recorder.h, DormantFastPathOpen). Its own function, like the general
// hook's: the wrapper that picks one then keeps no frame and tail-calls it.
[[gnu::noinline]] cudaError_t MallocDormant(RuntimeHookId id, int abi, void** ptr, size_t size) {
  void* real = RuntimeRealIfKnown(id, abi);
  // No real function yet (MallocHook resolves it) or no log yet (RecordAlloc takes one).
  if (real == nullptr || !AllocationLogs::ThreadHasUsableLog()) {
    return MallocHook(id, abi, ptr, size);
  }
  DormantCall call;
  const cudaError_t r = reinterpret_cast<cudaError_t (*)(void**, size_t)>(real)(ptr, size);
  const uint64_t address = r == cudaSuccess && ptr != nullptr ? Address(*ptr) : 0;
  if (__builtin_expect(address != 0, 1) &&
      LogDormantAlloc(ApiOf(id), address, size, MemoryKind::kDevice)) {
    return r;
  }
  FinishDormantAcquire(AllocInfo{ApiOf(id), address, size, MemoryKind::kDevice}, call.Reported(r));
  return r;
}

cudaError_t Malloc(RuntimeHookId id, int abi, void** ptr, size_t size) {
  if (DormantFastPathOpen()) return MallocDormant(id, abi, ptr, size);
  return MallocHook(id, abi, ptr, size);
}

cudaError_t MallocManaged(RuntimeHookId id, int abi, void** ptr, size_t size, unsigned flags) {
  HookCall hook;
  auto real = Real<cudaError_t (*)(void**, size_t, unsigned)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(ptr, size, flags);
  hook.Returned(r, false);
  if (hook.record()) {
    OnAcquire(hook, id, r, r == cudaSuccess && ptr ? Address(*ptr) : 0, size, MemoryKind::kManaged);
  }
  return r;
}

cudaError_t MallocPitch(RuntimeHookId id, int abi, void** ptr, size_t* pitch, size_t width,
                        size_t height) {
  HookCall hook;
  auto real = Real<cudaError_t (*)(void**, size_t*, size_t, size_t)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(ptr, pitch, width, height);
  hook.Returned(r, false);
  if (hook.record()) {
    bool ok = r == cudaSuccess && ptr != nullptr && pitch != nullptr;
    uint64_t p = ok ? *pitch : 0;
    OnAcquire(hook, id, r, ok ? Address(*ptr) : 0, ok ? p * height : width * height,
              MemoryKind::kPitched, 0, 0, p);
  }
  return r;
}

cudaError_t Malloc3D(RuntimeHookId id, int abi, cudaPitchedPtr* pitched, cudaExtent extent) {
  HookCall hook;
  auto real = Real<cudaError_t (*)(cudaPitchedPtr*, cudaExtent)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(pitched, extent);
  hook.Returned(r, false);
  if (hook.record()) {
    bool ok = r == cudaSuccess && pitched != nullptr;
    uint64_t p = ok ? pitched->pitch : 0;
    uint64_t rows = uint64_t{extent.height} * extent.depth;
    OnAcquire(hook, id, r, ok ? Address(pitched->ptr) : 0, ok ? p * rows : extent.width * rows,
              MemoryKind::kPitched, 0, 0, p);
  }
  return r;
}

cudaError_t MallocAsync(RuntimeHookId id, int abi, void** ptr, size_t size, cudaStream_t stream) {
  HookCall hook;
  auto real = Real<cudaError_t (*)(void**, size_t, cudaStream_t)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(ptr, size, stream);
  hook.Returned(r, false);
  if (hook.record()) {
    const bool capture = StreamCapturing(stream, id == RuntimeHookId::k_cudaMallocAsync_ptsz);
    OnAcquire(hook, id, r, r == cudaSuccess && ptr ? Address(*ptr) : 0, size,
              capture ? MemoryKind::kGraph : MemoryKind::kPool, Address(stream),
              CurrentPoolUnlessDormant(), 0, capture);
  }
  return r;
}

cudaError_t MallocFromPoolAsync(RuntimeHookId id, int abi, void** ptr, size_t size,
                                cudaMemPool_t pool, cudaStream_t stream) {
  HookCall hook;
  auto real = Real<cudaError_t (*)(void**, size_t, cudaMemPool_t, cudaStream_t)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(ptr, size, pool, stream);
  hook.Returned(r, false);
  if (hook.record()) {
    const bool capture =
        StreamCapturing(stream, id == RuntimeHookId::k_cudaMallocFromPoolAsync_ptsz);
    OnAcquire(hook, id, r, r == cudaSuccess && ptr ? Address(*ptr) : 0, size,
              capture ? MemoryKind::kGraph : MemoryKind::kPool, Address(stream), Address(pool), 0,
              capture);
  }
  return r;
}

// cudaFree (kAsync false) and cudaFreeAsync (true) through the real function `real`.
template <bool kAsync>
cudaError_t CallRelease(void* real, void* ptr, uint64_t stream) {
  if constexpr (kAsync) {
    return reinterpret_cast<cudaError_t (*)(void*, cudaStream_t)>(real)(
        ptr, reinterpret_cast<cudaStream_t>(stream));
  } else {
    return reinterpret_cast<cudaError_t (*)(void*)>(real)(ptr);
  }
}

// cudaFree / cudaFreeAsync: the live entry goes (and seq is taken) before the real call.
// `log_searched`: see PendingRelease.
template <bool kAsync>
[[gnu::noinline]] cudaError_t ReleaseHook(RuntimeHookId id, int abi, void* ptr, uint64_t stream,
                                          bool log_searched = false) {
  void* real = RuntimeReal(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  HookCall hook;
  if (!hook.record() || ptr == nullptr) {  // cudaFree(nullptr) only initializes the runtime
    cudaError_t r = CallRelease<kAsync>(real, ptr, stream);
    hook.Returned(r, false);
    return r;
  }
  PendingRelease release(Address(ptr), ApiOf(id), stream, log_searched);
  cudaError_t r = CallRelease<kAsync>(real, ptr, stream);
  hook.Returned(r, false);
  release.EndFree(ApiOf(id), hook.Reported(r), stream);
  return r;
}

// The dormant fast path (recorder.h): the release of an allocation still in this thread's
// allocation log takes it out there, before the real call as PendingRelease does.
template <bool kAsync>
[[gnu::noinline]] cudaError_t ReleaseDormant(RuntimeHookId id, int abi, void* ptr,
                                             uint64_t stream) {
  void* real = RuntimeRealIfKnown(id, abi);
  if (real == nullptr) return ReleaseHook<kAsync>(id, abi, ptr, stream);  // resolves it
  LoggedAllocation logged;
  if (!Agent().logs.TryCancel(Address(ptr), &logged)) {
    return ReleaseHook<kAsync>(id, abi, ptr, stream, /*log_searched=*/true);
  }
  DormantCall dormant;
  const cudaError_t r = CallRelease<kAsync>(real, ptr, stream);
  if (__builtin_expect(r != cudaSuccess, 0)) RestoreDormantRelease(logged, dormant.Reported(r));
  return r;
}

template <bool kAsync>
cudaError_t Release(RuntimeHookId id, int abi, void* ptr, uint64_t stream) {
  if (ptr != nullptr && DormantFastPathOpen()) {
    return ReleaseDormant<kAsync>(id, abi, ptr, stream);
  }
  return ReleaseHook<kAsync>(id, abi, ptr, stream);
}

cudaError_t Free(RuntimeHookId id, int abi, void* ptr) { return Release<false>(id, abi, ptr, 0); }

cudaError_t FreeAsync(RuntimeHookId id, int abi, void* ptr, cudaStream_t stream) {
  return Release<true>(id, abi, ptr, Address(stream));
}

cudaError_t MemPoolTrimTo(RuntimeHookId id, int abi, cudaMemPool_t pool, size_t keep) {
  HookCall hook;
  auto real = Real<cudaError_t (*)(cudaMemPool_t, size_t)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(pool, keep);
  hook.Returned(r, false);
  if (hook.record() && r == cudaSuccess) SamplePool(CurrentDevice(), Address(pool));
  return r;
}

// The CUDA version a cudaGetDriverEntryPoint of runtime ABI `abi` asks the driver for.
int RuntimeCudaVersion(int abi) { return abi == kCudart12 ? 12000 : 13000; }

cudaError_t GetDriverEntryPoint(RuntimeHookId id, int abi, const char* symbol, void** fn,
                                unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  HookCall hook(/*keep_errno=*/true);  // wrapping the answer may call dlsym
  auto real = Real<cudaError_t (*)(const char*, void**, unsigned long long,
                                   cudaDriverEntryPointQueryResult*)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(symbol, fn, flags, status);
  hook.Returned(r, false);
  if (r == cudaSuccess && fn != nullptr && *fn != nullptr && symbol != nullptr) {
    *fn = WrapDriverLookup(symbol, RuntimeCudaVersion(abi), flags, *fn);
  }
  return r;
}

cudaError_t GetDriverEntryPointByVersion(RuntimeHookId id, int abi, const char* symbol, void** fn,
                                         unsigned int version, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* status) {
  HookCall hook(/*keep_errno=*/true);  // wrapping the answer may call dlsym
  auto real = Real<cudaError_t (*)(const char*, void**, unsigned int, unsigned long long,
                                   cudaDriverEntryPointQueryResult*)>(id, abi);
  if (real == nullptr) return cudaErrorSymbolNotFound;
  cudaError_t r = real(symbol, fn, version, flags, status);
  hook.Returned(r, false);
  if (r == cudaSuccess && fn != nullptr && *fn != nullptr && symbol != nullptr) {
    *fn = WrapDriverLookup(symbol, static_cast<int>(version), flags, *fn);
  }
  return r;
}

}  // namespace

// The three exports of `symbol`, all calling `impl(id, abi, args...)`. The fs_rt* names are
// made local by the version script (exports.map); only the CUDA names stay visible.
#define FRAGSCOPE_RUNTIME_WRAPPER(symbol, impl, params, args)                           \
  extern "C" FRAGSCOPE_VISIBLE __attribute__((symver(#symbol "@libcudart.so.12")))      \
  cudaError_t fs_rt12_##symbol params {                                                 \
    return impl(RuntimeHookId::k_##symbol, kCudart12, FRAGSCOPE_UNPAREN args);          \
  }                                                                                     \
  extern "C" FRAGSCOPE_VISIBLE __attribute__((symver(#symbol "@libcudart.so.13")))      \
  cudaError_t fs_rt13_##symbol params {                                                 \
    return impl(RuntimeHookId::k_##symbol, kCudart13, FRAGSCOPE_UNPAREN args);          \
  }                                                                                     \
  extern "C" FRAGSCOPE_VISIBLE cudaError_t fs_rtU_##symbol params {                     \
    return impl(RuntimeHookId::k_##symbol, kCudartUnversioned, FRAGSCOPE_UNPAREN args); \
  }                                                                                     \
  FRAGSCOPE_EXPORT_AS("fs_rtU_" #symbol, #symbol);

FRAGSCOPE_RUNTIME_WRAPPER(cudaMalloc, Malloc, (void** ptr, size_t size), (ptr, size))
FRAGSCOPE_RUNTIME_WRAPPER(cudaFree, Free, (void* ptr), (ptr))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocAsync, MallocAsync,
                          (void** ptr, size_t size, cudaStream_t stream), (ptr, size, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocAsync_ptsz, MallocAsync,
                          (void** ptr, size_t size, cudaStream_t stream), (ptr, size, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaFreeAsync, FreeAsync, (void* ptr, cudaStream_t stream), (ptr, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaFreeAsync_ptsz, FreeAsync, (void* ptr, cudaStream_t stream),
                          (ptr, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocFromPoolAsync, MallocFromPoolAsync,
                          (void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream),
                          (ptr, size, pool, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocFromPoolAsync_ptsz, MallocFromPoolAsync,
                          (void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream),
                          (ptr, size, pool, stream))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocPitch, MallocPitch,
                          (void** ptr, size_t* pitch, size_t width, size_t height),
                          (ptr, pitch, width, height))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMalloc3D, Malloc3D, (cudaPitchedPtr * pitched, cudaExtent extent),
                          (pitched, extent))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMallocManaged, MallocManaged,
                          (void** ptr, size_t size, unsigned int flags), (ptr, size, flags))
FRAGSCOPE_RUNTIME_WRAPPER(cudaMemPoolTrimTo, MemPoolTrimTo, (cudaMemPool_t pool, size_t keep),
                          (pool, keep))
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
