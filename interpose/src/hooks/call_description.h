// What each tracked CUDA call means, in one table that both ways of seeing a call read: the
// preload wrappers (driver_hooks.cc, runtime_hooks.cc, failure_hooks.cc) and the CUPTI
// translation (cupti/translate.cc). A description says which event the call makes, of which
// memory kind, and which parameter is the address, the size, the stream, the pool, the handle.
// Parameters are named by position: CUPTI's generated *_params structs hold a function's
// parameters as members in the same order, so the position that a wrapper reads from its
// argument list is the member the translation reads (call_arguments.h does both).
//
// Keyed by Api: every ABI of one function (cuIpcOpenMemHandle and _v2, the _ptsz variants of the
// runtime) records the same Api and takes the same parameters. Failure-only functions read none,
// so their ABIs may differ. tests/cupti/call_description_test.cc checks that every wrapped and
// every CUPTI-tracked function has a description and that both name it by the same Api.
//
// Guarantees: constexpr data only (no code runs at load); DescribeCall of an Api without a
// description does not compile (or, outside a constant expression, does not link).
#ifndef FRAGSCOPE_INTERPOSE_CALL_DESCRIPTION_H_
#define FRAGSCOPE_INTERPOSE_CALL_DESCRIPTION_H_

#include <cstddef>
#include <cstdint>

#include "recording/api.h"

namespace fragscope::agent {

// The event a call makes. "Fails as FailedAlloc": a failed call is a FailedAlloc frame.
enum class CallEvent : uint8_t {
  kAcquire,        // AllocEvent; fails as FailedAlloc
  kRelease,        // FreeEvent of an allocation, its seq taken before the real call
  kReserve,        // MapEvent OP_RESERVE; fails as FailedAlloc
  kFreeRange,      // MapEvent OP_FREE_RANGE, seq before the call
  kMap,            // MapEvent OP_MAP; fails as FailedAlloc
  kUnmap,          // MapEvent OP_UNMAP, seq before the call
  kCreateHandle,   // HandleEvent OP_CREATE; fails as FailedAlloc
  kReleaseHandle,  // HandleEvent OP_RELEASE, seq before the call
  kRetainHandle,   // HandleEvent OP_RETAIN with its result: a failed retain is a probe
  kExportHandle,   // HandleEvent OP_EXPORT with its result
  kImportHandle,   // HandleEvent OP_IMPORT; fails as FailedAlloc
  kTrimPool,       // after a successful trim, a MemInfo sample of the pool
  kFailureOnly,    // only a failure is an event (FailedAlloc, size 0)
};

// Events whose seq is taken before the real call (the memory may be reused the moment it
// returns, by another thread).
constexpr bool IsRelease(CallEvent e) {
  return e == CallEvent::kRelease || e == CallEvent::kFreeRange || e == CallEvent::kUnmap ||
         e == CallEvent::kReleaseHandle;
}

// How an acquire's size is found.
enum class SizeRule : uint8_t {
  kArgument,        // the `size` parameter
  kPitchTimesRows,  // success: *pitch × rows; failure: size (the row's width in bytes) × rows
  kExtent3D,        // address is a cudaPitchedPtr*, size a cudaExtent: pitch × height × depth
  kAddressRange,    // no size parameter: the driver's range of the returned address
};

inline constexpr int8_t kNoArg = -1;

// The position (0-based) of the parameter playing each role, kNoArg where none does.
// Out-parameters (a pointer the call writes) are read only after a successful call: an
// acquire's or reservation's address and its pitch, the handle of a create, import or retain.
struct CallArgs {
  int8_t address = kNoArg;      // acquire/reserve: out; release, map, unmap, retain: in
  int8_t size = kNoArg;         // bytes (kPitchTimesRows: the width in bytes)
  int8_t stream = kNoArg;       // stream-ordered calls
  int8_t pool = kNoArg;         // an explicit CUmemoryPool / cudaMemPool_t
  int8_t handle = kNoArg;       // CUmemGenericAllocationHandle (out for create/import/retain)
  int8_t pitch = kNoArg;        // out: bytes per row
  int8_t rows = kNoArg;         // rows of a pitched allocation
  int8_t offset = kNoArg;       // map: offset into the handle
  int8_t alignment = kNoArg;    // reserve
  int8_t handle_type = kNoArg;  // export/import: CUmemAllocationHandleType
  int8_t prop = kNoArg;         // create: const CUmemAllocationProp* (device, handle types)
};

struct CallDescription {
  Api api;
  CallEvent event;
  // Acquires: the memory's kind. A stream-ordered acquire (kPool) made during stream capture is
  // recorded as kGraph by the wrapper (the CUPTI backend cannot ask).
  MemoryKind kind;
  SizeRule size_rule;
  // The function's parameter count, checked against each wrapper's parameter list and each
  // CUPTI *_params struct; 0 for failure-only functions, which read none.
  uint8_t arity;
  CallArgs args;
};

// clang-format off
inline constexpr CallDescription kCallDescriptions[] = {
  // --- plain allocation (driver) ---
  {Api::k_cuMemAlloc, CallEvent::kAcquire, MemoryKind::kDevice, SizeRule::kArgument, 2,
   {.address = 0, .size = 1}},
  {Api::k_cuMemAlloc_v2, CallEvent::kAcquire, MemoryKind::kDevice, SizeRule::kArgument, 2,
   {.address = 0, .size = 1}},
  {Api::k_cuMemAllocPitch, CallEvent::kAcquire, MemoryKind::kPitched, SizeRule::kPitchTimesRows, 5,
   {.address = 0, .size = 2, .pitch = 1, .rows = 3}},
  {Api::k_cuMemAllocPitch_v2, CallEvent::kAcquire, MemoryKind::kPitched,
   SizeRule::kPitchTimesRows, 5, {.address = 0, .size = 2, .pitch = 1, .rows = 3}},
  {Api::k_cuMemAllocManaged, CallEvent::kAcquire, MemoryKind::kManaged, SizeRule::kArgument, 3,
   {.address = 0, .size = 1}},
  {Api::k_cuMemFree, CallEvent::kRelease, MemoryKind::kUnspecified, SizeRule::kArgument, 1,
   {.address = 0}},
  {Api::k_cuMemFree_v2, CallEvent::kRelease, MemoryKind::kUnspecified, SizeRule::kArgument, 1,
   {.address = 0}},
  // --- stream-ordered (driver) ---
  {Api::k_cuMemAllocAsync, CallEvent::kAcquire, MemoryKind::kPool, SizeRule::kArgument, 3,
   {.address = 0, .size = 1, .stream = 2}},
  {Api::k_cuMemAllocAsync_ptsz, CallEvent::kAcquire, MemoryKind::kPool, SizeRule::kArgument, 3,
   {.address = 0, .size = 1, .stream = 2}},
  {Api::k_cuMemAllocFromPoolAsync, CallEvent::kAcquire, MemoryKind::kPool, SizeRule::kArgument, 4,
   {.address = 0, .size = 1, .stream = 3, .pool = 2}},
  {Api::k_cuMemAllocFromPoolAsync_ptsz, CallEvent::kAcquire, MemoryKind::kPool,
   SizeRule::kArgument, 4, {.address = 0, .size = 1, .stream = 3, .pool = 2}},
  {Api::k_cuMemFreeAsync, CallEvent::kRelease, MemoryKind::kUnspecified, SizeRule::kArgument, 2,
   {.address = 0, .stream = 1}},
  {Api::k_cuMemFreeAsync_ptsz, CallEvent::kRelease, MemoryKind::kUnspecified, SizeRule::kArgument,
   2, {.address = 0, .stream = 1}},
  {Api::k_cuMemPoolTrimTo, CallEvent::kTrimPool, MemoryKind::kUnspecified, SizeRule::kArgument, 2,
   {.pool = 0}},
  // --- virtual memory management ---
  {Api::k_cuMemAddressReserve, CallEvent::kReserve, MemoryKind::kUnspecified, SizeRule::kArgument,
   5, {.address = 0, .size = 1, .alignment = 2}},
  {Api::k_cuMemAddressFree, CallEvent::kFreeRange, MemoryKind::kUnspecified, SizeRule::kArgument,
   2, {.address = 0, .size = 1}},
  {Api::k_cuMemCreate, CallEvent::kCreateHandle, MemoryKind::kUnspecified, SizeRule::kArgument, 4,
   {.size = 1, .handle = 0, .prop = 2}},
  {Api::k_cuMemRelease, CallEvent::kReleaseHandle, MemoryKind::kUnspecified, SizeRule::kArgument,
   1, {.handle = 0}},
  {Api::k_cuMemMap, CallEvent::kMap, MemoryKind::kUnspecified, SizeRule::kArgument, 5,
   {.address = 0, .size = 1, .handle = 3, .offset = 2}},
  {Api::k_cuMemUnmap, CallEvent::kUnmap, MemoryKind::kUnspecified, SizeRule::kArgument, 2,
   {.address = 0, .size = 1}},
  {Api::k_cuMemRetainAllocationHandle, CallEvent::kRetainHandle, MemoryKind::kUnspecified,
   SizeRule::kArgument, 2, {.address = 1, .handle = 0}},
  {Api::k_cuMemExportToShareableHandle, CallEvent::kExportHandle, MemoryKind::kUnspecified,
   SizeRule::kArgument, 4, {.handle = 1, .handle_type = 2}},
  {Api::k_cuMemImportFromShareableHandle, CallEvent::kImportHandle, MemoryKind::kUnspecified,
   SizeRule::kArgument, 3, {.handle = 0, .handle_type = 2}},
  // --- imports of another process's memory ---
  {Api::k_cuIpcOpenMemHandle, CallEvent::kAcquire, MemoryKind::kIpcImport,
   SizeRule::kAddressRange, 3, {.address = 0}},
  {Api::k_cuIpcCloseMemHandle, CallEvent::kRelease, MemoryKind::kUnspecified,
   SizeRule::kArgument, 1, {.address = 0}},
  {Api::k_cuMemPoolImportPointer, CallEvent::kAcquire, MemoryKind::kIpcImport,
   SizeRule::kAddressRange, 3, {.address = 0, .pool = 1}},
  // --- failure-only (any ABI: no parameter is read) ---
  {Api::k_cuLaunchKernel, CallEvent::kFailureOnly, MemoryKind::kUnspecified, SizeRule::kArgument,
   0, {}},
  {Api::k_cuModuleLoad, CallEvent::kFailureOnly, MemoryKind::kUnspecified, SizeRule::kArgument, 0,
   {}},
  {Api::k_cuModuleLoadData, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  {Api::k_cuModuleLoadDataEx, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  {Api::k_cuModuleLoadFatBinary, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  {Api::k_cuLibraryLoadData, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  {Api::k_cuLibraryLoadFromFile, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  {Api::k_cuGraphInstantiate, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  {Api::k_cuGraphInstantiateWithFlags, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  {Api::k_cuGraphInstantiateWithParams, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  {Api::k_cuGraphUpload, CallEvent::kFailureOnly, MemoryKind::kUnspecified, SizeRule::kArgument,
   0, {}},
  {Api::k_cuCtxCreate, CallEvent::kFailureOnly, MemoryKind::kUnspecified, SizeRule::kArgument, 0,
   {}},
  {Api::k_cuDevicePrimaryCtxRetain, CallEvent::kFailureOnly, MemoryKind::kUnspecified,
   SizeRule::kArgument, 0, {}},
  // --- runtime ---
  {Api::k_cudaMalloc, CallEvent::kAcquire, MemoryKind::kDevice, SizeRule::kArgument, 2,
   {.address = 0, .size = 1}},
  {Api::k_cudaMallocPitch, CallEvent::kAcquire, MemoryKind::kPitched, SizeRule::kPitchTimesRows, 4,
   {.address = 0, .size = 2, .pitch = 1, .rows = 3}},
  {Api::k_cudaMalloc3D, CallEvent::kAcquire, MemoryKind::kPitched, SizeRule::kExtent3D, 2,
   {.address = 0, .size = 1}},
  {Api::k_cudaMallocManaged, CallEvent::kAcquire, MemoryKind::kManaged, SizeRule::kArgument, 3,
   {.address = 0, .size = 1}},
  {Api::k_cudaMallocAsync, CallEvent::kAcquire, MemoryKind::kPool, SizeRule::kArgument, 3,
   {.address = 0, .size = 1, .stream = 2}},
  {Api::k_cudaMallocFromPoolAsync, CallEvent::kAcquire, MemoryKind::kPool, SizeRule::kArgument, 4,
   {.address = 0, .size = 1, .stream = 3, .pool = 2}},
  {Api::k_cudaFree, CallEvent::kRelease, MemoryKind::kUnspecified, SizeRule::kArgument, 1,
   {.address = 0}},
  {Api::k_cudaFreeAsync, CallEvent::kRelease, MemoryKind::kUnspecified, SizeRule::kArgument, 2,
   {.address = 0, .stream = 1}},
  {Api::k_cudaMemPoolTrimTo, CallEvent::kTrimPool, MemoryKind::kUnspecified, SizeRule::kArgument,
   2, {.pool = 0}},
};
// clang-format on

// The description of `api`, or nullptr.
constexpr const CallDescription* FindCallDescription(Api api) {
  for (const CallDescription& d : kCallDescriptions) {
    if (d.api == api) return &d;
  }
  return nullptr;
}

// Not constexpr, never defined: DescribeCall of an Api without a description calls it and so
// does not compile.
void NoCallDescriptionFor(Api api);

// The description of `api`, at compile time (what the wrappers and the translation use; every
// use is constant-evaluated). constexpr, not consteval: clang 14 rejects a consteval call whose
// argument depends on a template parameter.
constexpr const CallDescription& DescribeCall(Api api) {
  const CallDescription* d = FindCallDescription(api);
  if (d == nullptr) NoCallDescriptionFor(api);
  return *d;
}

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_CALL_DESCRIPTION_H_
