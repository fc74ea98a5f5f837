// Wrappers of the tracked driver functions (driver_hook_list.inc, kind kTracked): plain and
// stream-ordered allocation, VMM, IPC and pool imports. Each calls the real function and, when
// it is the outermost hook on its thread, records one event (see recorder.h). What a call
// records, and which parameter is its address, size, stream, pool or handle, is its description
// (call_description.h): the bodies below are generic over it, so a wrapper only names its ABI.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "hooks/call_arguments.h"
#include "hooks/call_description.h"
#include "hooks/driver_api.h"
#include "hooks/hook_exports.h"
#include "hooks/hook_table.h"
#include "recording/recorder.h"
#include "recording/vmm_recorder.h"

namespace fragscope::agent {
namespace {

// The legacy (CUDA 2.x) ABIs with 32-bit device pointers and sizes; cudaTypedefs.h only
// declares them for the driver's own build.
using DevicePtr32 = unsigned int;
using LegacyMemAlloc = CUresult (*)(DevicePtr32*, unsigned int);
using LegacyMemFree = CUresult (*)(DevicePtr32);
using LegacyMemAllocPitch = CUresult (*)(DevicePtr32*, unsigned int*, unsigned int, unsigned int,
                                         unsigned int);

template <typename Fn>
Fn Real(DriverHookId id) {
  return reinterpret_cast<Fn>(DriverReal(id));
}

// Whether a wrapper of hook `kId` taking `Args` has the parameters its description counts (and
// so reads each role from the parameter the CUPTI translation reads it from).
template <DriverHookId kId, typename... Args>
constexpr bool TakesDescribedParameters() {
  return sizeof...(Args) == DescribeCall(HookApi(kId)).arity;
}

// The per-thread default stream ABIs (_ptsz): their null stream is the calling thread's.
constexpr bool PerThreadStream(DriverHookId id) {
  return id == DriverHookId::k_cuMemAllocAsync_ptsz ||
         id == DriverHookId::k_cuMemAllocFromPoolAsync_ptsz;
}

// The size of the allocation at `address` as the driver has it (an import names no size).
uint64_t AddressRangeSize(uint64_t address) {
  CUdeviceptr base = 0;
  size_t size = 0;
  const DriverCalls& d = Driver();
  if (address != 0 && d.mem_get_address_range != nullptr && AgentMayCallDriver()) {
    d.mem_get_address_range(&base, &size, address);
  }
  return size;
}

// An acquire's AllocInfo: the parameters its description names, and what only the driver can
// add: stream capture (the allocation is then a graph's), the current pool of a stream-ordered
// allocation without a pool parameter, an import's size.
template <DriverHookId kId, typename A>
AllocInfo AcquireInfo(const A& args, CUresult r) {
  constexpr Api kApi = HookApi(kId);
  constexpr const CallDescription& d = DescribeCall(kApi);
  AllocInfo info = AcquireOf<kApi>(args, r);
  if constexpr (d.kind == MemoryKind::kPool) {
    ResolveStreamOrdered(info, PerThreadStream(kId), d.args.pool != kNoArg);
  }
  if constexpr (d.size_rule == SizeRule::kAddressRange) info.size = AddressRangeSize(info.address);
  return info;
}

// An acquire, outermost or not ready for the inner path: AllocEvent, or FailedAlloc.
template <DriverHookId kId, typename Fn, typename... Args>
[[gnu::noinline]] CUresult Acquire(Args... args) {
  static_assert(TakesDescribedParameters<kId, Args...>());
  HookCall hook;
  auto real = Real<Fn>(kId);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(args...);
  hook.Returned(r);
  if (hook.record()) RecordAcquire(AcquireInfo<kId>(WrapperArgs<Args...>(args...), r), r);
  return r;
}

// A release of an allocation (free, IPC close): its FreeEvent, seq taken before the real call.
template <DriverHookId kId, typename Fn, typename... Args>
[[gnu::noinline]] CUresult ReleaseHook(Fn real, Args... args) {
  constexpr Api kApi = HookApi(kId);
  static_assert(TakesDescribedParameters<kId, Args...>());
  const WrapperArgs<Args...> a(args...);
  const uint64_t key = ReleaseKeyOf<kApi>(a);
  const uint64_t stream = StreamOf<kApi>(a);
  HookCall hook;
  if (!hook.record() || key == 0) {
    CUresult r = real(args...);
    hook.Returned(r);
    return r;
  }
  PendingRelease release(key, kApi, stream);
  CUresult r = real(args...);
  hook.Returned(r);
  release.EndFree(kApi, r, stream);
  return r;
}

// The rest of a release's wrapper. Out of line: the wrappers with an inner-layer fast path keep
// no frame of their own.
template <DriverHookId kId, typename Fn, typename... Args>
[[gnu::noinline]] CUresult Release(Args... args) {
  auto real = Real<Fn>(kId);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (InnerLayer()) return CallInner(real, args...);
  return ReleaseHook<kId>(real, args...);
}

// A pool trim: after a success, a sample of the pool (MemInfo).
template <DriverHookId kId, typename Fn, typename... Args>
CUresult Trim(Args... args) {
  static_assert(TakesDescribedParameters<kId, Args...>());
  HookCall hook;
  auto real = Real<Fn>(kId);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(args...);
  hook.Returned(r);
  if (hook.record() && r == CUDA_SUCCESS) {
    SamplePool(CurrentDevice(), PoolOf<HookApi(kId)>(WrapperArgs<Args...>(args...)));
  }
  return r;
}

// What a VMM release does before its real call (vmm_recorder.h).
template <Api kApi, typename A>
auto BeginVmmRelease(const A& args) {
  constexpr CallEvent kEvent = DescribeCall(kApi).event;
  if constexpr (kEvent == CallEvent::kFreeRange) {
    return PendingAddressFree(MapOf<kApi>(args));
  } else if constexpr (kEvent == CallEvent::kUnmap) {
    return PendingUnmap(MapOf<kApi>(args));
  } else {
    static_assert(kEvent == CallEvent::kReleaseHandle);
    return PendingHandleRelease(HandleOf<kApi>(args, 0));
  }
}

// What any other VMM call records after its real call returned `r`.
template <Api kApi, typename A>
void RecordVmm(const A& args, CUresult r) {
  constexpr CallEvent kEvent = DescribeCall(kApi).event;
  if constexpr (kEvent == CallEvent::kReserve) {
    RecordReserve(MapOf<kApi>(args, r), r);
  } else if constexpr (kEvent == CallEvent::kMap) {
    RecordMap(MapOf<kApi>(args), r);
  } else if constexpr (kEvent == CallEvent::kCreateHandle) {
    RecordHandleCreate(HandleOf<kApi>(args, r), r);
  } else if constexpr (kEvent == CallEvent::kImportHandle) {
    RecordHandleImport(HandleOf<kApi>(args, r), r);
  } else if constexpr (kEvent == CallEvent::kRetainHandle) {
    RecordHandleRetain(HandleOf<kApi>(args, r), r);
  } else {
    static_assert(kEvent == CallEvent::kExportHandle);
    RecordHandleExport(HandleOf<kApi>(args, r), r);
  }
}

// A VMM call (reservations, handles, mappings).
template <DriverHookId kId, typename Fn, typename... Args>
CUresult Vmm(Args... args) {
  constexpr Api kApi = HookApi(kId);
  static_assert(TakesDescribedParameters<kId, Args...>());
  HookCall hook;
  auto real = Real<Fn>(kId);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const WrapperArgs<Args...> a(args...);
  if constexpr (IsRelease(DescribeCall(kApi).event)) {
    if (!hook.record()) {
      CUresult r = real(args...);
      hook.Returned(r);
      return r;
    }
    auto pending = BeginVmmRelease<kApi>(a);
    CUresult r = real(args...);
    hook.Returned(r);
    pending.End(r);
    return r;
  } else {
    CUresult r = real(args...);
    hook.Returned(r);
    if (hook.record()) RecordVmm<kApi>(a, r);
    return r;
  }
}

// First statement of a hot wrapper: the inner layer of a runtime call (recorder.h,
// InnerLayer) returns here. The rest of the wrapper (which records) is a separate noinline
// function, so this path does not pay for that body's frame and saved registers.
#define FRAGSCOPE_INNER_LAYER(id, Fn, ...)                                                    \
  if (InnerLayer()) {                                                                         \
    if (auto inner_real = reinterpret_cast<Fn>(DriverRealIfKnown(id)); inner_real != nullptr) \
      return CallInner(inner_real, __VA_ARGS__);                                              \
  }

}  // namespace

// --- plain allocations ---

FRAGSCOPE_DRIVER_WRAPPER(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAlloc_v2, PFN_cuMemAlloc_v3020, dptr, bytesize)
  return Acquire<DriverHookId::k_cuMemAlloc_v2, PFN_cuMemAlloc_v3020>(dptr, bytesize);
}

// Legacy ABI: 32-bit pointer and size.
FRAGSCOPE_DRIVER_WRAPPER(cuMemAlloc, (DevicePtr32 * dptr, unsigned int bytesize)) {
  if (PassThroughInner()) return Real<LegacyMemAlloc>(DriverHookId::k_cuMemAlloc)(dptr, bytesize);
  return Acquire<DriverHookId::k_cuMemAlloc, LegacyMemAlloc>(dptr, bytesize);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemFree_v2, (CUdeviceptr dptr)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemFree_v2, PFN_cuMemFree_v3020, dptr)
  return Release<DriverHookId::k_cuMemFree_v2, PFN_cuMemFree_v3020>(dptr);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemFree, (DevicePtr32 dptr)) {
  return Release<DriverHookId::k_cuMemFree, LegacyMemFree>(dptr);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocPitch_v2, (CUdeviceptr * dptr, size_t* pitch, size_t width,
                                              size_t height, unsigned int element_size)) {
  return Acquire<DriverHookId::k_cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v3020>(
      dptr, pitch, width, height, element_size);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocPitch,
                         (DevicePtr32 * dptr, unsigned int* pitch, unsigned int width,
                          unsigned int height, unsigned int element_size)) {
  return Acquire<DriverHookId::k_cuMemAllocPitch, LegacyMemAllocPitch>(dptr, pitch, width, height,
                                                                       element_size);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocManaged,
                         (CUdeviceptr * dptr, size_t bytesize, unsigned int flags)) {
  return Acquire<DriverHookId::k_cuMemAllocManaged, PFN_cuMemAllocManaged_v6000>(dptr, bytesize,
                                                                                 flags);
}

// --- stream-ordered ---

FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAllocAsync, PFN_cuMemAllocAsync_v11020, dptr, bytesize,
                        s)
  return Acquire<DriverHookId::k_cuMemAllocAsync, PFN_cuMemAllocAsync_v11020>(dptr, bytesize, s);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020, dptr,
                        bytesize, s)
  return Acquire<DriverHookId::k_cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020>(dptr, bytesize,
                                                                                   s);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocFromPoolAsync,
                         (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020,
                        dptr, bytesize, pool, s)
  return Acquire<DriverHookId::k_cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020>(
      dptr, bytesize, pool, s);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemAllocFromPoolAsync_ptsz,
                         (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemAllocFromPoolAsync_ptsz,
                        PFN_cuMemAllocFromPoolAsync_v11020, dptr, bytesize, pool, s)
  return Acquire<DriverHookId::k_cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020>(
      dptr, bytesize, pool, s);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemFreeAsync, (CUdeviceptr dptr, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemFreeAsync, PFN_cuMemFreeAsync_v11020, dptr, s)
  return Release<DriverHookId::k_cuMemFreeAsync, PFN_cuMemFreeAsync_v11020>(dptr, s);
}
FRAGSCOPE_DRIVER_WRAPPER(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream s)) {
  FRAGSCOPE_INNER_LAYER(DriverHookId::k_cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020, dptr, s)
  return Release<DriverHookId::k_cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020>(dptr, s);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemPoolTrimTo, (CUmemoryPool pool, size_t min_bytes_to_keep)) {
  return Trim<DriverHookId::k_cuMemPoolTrimTo, PFN_cuMemPoolTrimTo_v11020>(pool, min_bytes_to_keep);
}

// --- virtual memory management ---

FRAGSCOPE_DRIVER_WRAPPER(cuMemAddressReserve, (CUdeviceptr * ptr, size_t size, size_t alignment,
                                               CUdeviceptr addr, unsigned long long flags)) {
  return Vmm<DriverHookId::k_cuMemAddressReserve, PFN_cuMemAddressReserve_v10020>(
      ptr, size, alignment, addr, flags);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemAddressFree, (CUdeviceptr ptr, size_t size)) {
  return Vmm<DriverHookId::k_cuMemAddressFree, PFN_cuMemAddressFree_v10020>(ptr, size);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemCreate, (CUmemGenericAllocationHandle * handle, size_t size,
                                       const CUmemAllocationProp* prop, unsigned long long flags)) {
  return Vmm<DriverHookId::k_cuMemCreate, PFN_cuMemCreate_v10020>(handle, size, prop, flags);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemRelease, (CUmemGenericAllocationHandle handle)) {
  return Vmm<DriverHookId::k_cuMemRelease, PFN_cuMemRelease_v10020>(handle);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemMap,
                         (CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)) {
  return Vmm<DriverHookId::k_cuMemMap, PFN_cuMemMap_v10020>(ptr, size, offset, handle, flags);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemUnmap, (CUdeviceptr ptr, size_t size)) {
  return Vmm<DriverHookId::k_cuMemUnmap, PFN_cuMemUnmap_v10020>(ptr, size);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemRetainAllocationHandle,
                         (CUmemGenericAllocationHandle * handle, void* addr)) {
  return Vmm<DriverHookId::k_cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000>(
      handle, addr);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemExportToShareableHandle,
                         (void* shareable_handle, CUmemGenericAllocationHandle handle,
                          CUmemAllocationHandleType handle_type, unsigned long long flags)) {
  return Vmm<DriverHookId::k_cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle_v10020>(
      shareable_handle, handle, handle_type, flags);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemImportFromShareableHandle,
                         (CUmemGenericAllocationHandle * handle, void* os_handle,
                          CUmemAllocationHandleType handle_type)) {
  return Vmm<DriverHookId::k_cuMemImportFromShareableHandle,
             PFN_cuMemImportFromShareableHandle_v10020>(handle, os_handle, handle_type);
}

// --- imports of another process's memory ---

FRAGSCOPE_DRIVER_WRAPPER(cuIpcOpenMemHandle,
                         (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int flags)) {
  return Acquire<DriverHookId::k_cuIpcOpenMemHandle, PFN_cuIpcOpenMemHandle_v11000>(pdptr, handle,
                                                                                    flags);
}
FRAGSCOPE_DRIVER_WRAPPER(cuIpcOpenMemHandle_v2,
                         (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int flags)) {
  return Acquire<DriverHookId::k_cuIpcOpenMemHandle_v2, PFN_cuIpcOpenMemHandle_v11000>(
      pdptr, handle, flags);
}

FRAGSCOPE_DRIVER_WRAPPER(cuIpcCloseMemHandle, (CUdeviceptr dptr)) {
  return Release<DriverHookId::k_cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle_v4010>(dptr);
}

FRAGSCOPE_DRIVER_WRAPPER(cuMemPoolImportPointer, (CUdeviceptr * ptr_out, CUmemoryPool pool,
                                                  CUmemPoolPtrExportData* share_data)) {
  return Acquire<DriverHookId::k_cuMemPoolImportPointer, PFN_cuMemPoolImportPointer_v11020>(
      ptr_out, pool, share_data);
}

}  // namespace fragscope::agent
