// The agent's copies of the proto enums it writes (fragscope.proto: Api, MemoryKind and the Op
// enums). The agent cannot include the generated protobuf code (no protobuf runtime inside the
// traced process), so the numbers are repeated here; tests/agent/wire_encoder_test.cc checks
// every one of them against the proto descriptor by name.
#ifndef FRAGSCOPE_INTERPOSE_API_H_
#define FRAGSCOPE_INTERPOSE_API_H_

#include <cstdint>

namespace fragscope::agent {

// X-macro of fragscope.v1.Api: (name after the API_ prefix, number).
#define FRAGSCOPE_API_LIST(X)           \
  X(UNKNOWN, 0)                         \
  X(cudaMalloc, 1)                      \
  X(cudaFree, 2)                        \
  X(cudaMallocAsync, 3)                 \
  X(cudaFreeAsync, 4)                   \
  X(cudaMallocFromPoolAsync, 5)         \
  X(cudaMallocPitch, 6)                 \
  X(cudaMalloc3D, 7)                    \
  X(cudaMallocManaged, 8)               \
  X(cudaMemPoolTrimTo, 9)               \
  X(cuMemAlloc, 20)                     \
  X(cuMemAlloc_v2, 21)                  \
  X(cuMemFree, 22)                      \
  X(cuMemFree_v2, 23)                   \
  X(cuMemAllocPitch, 24)                \
  X(cuMemAllocPitch_v2, 25)             \
  X(cuMemAllocManaged, 26)              \
  X(cuMemAllocAsync, 27)                \
  X(cuMemFreeAsync, 28)                 \
  X(cuMemAllocFromPoolAsync, 29)        \
  X(cuMemAllocAsync_ptsz, 30)           \
  X(cuMemFreeAsync_ptsz, 31)            \
  X(cuMemAllocFromPoolAsync_ptsz, 32)   \
  X(cuMemPoolTrimTo, 33)                \
  X(cuMemAddressReserve, 40)            \
  X(cuMemAddressFree, 41)               \
  X(cuMemCreate, 42)                    \
  X(cuMemRelease, 43)                   \
  X(cuMemMap, 44)                       \
  X(cuMemUnmap, 45)                     \
  X(cuMemRetainAllocationHandle, 46)    \
  X(cuMemExportToShareableHandle, 47)   \
  X(cuMemImportFromShareableHandle, 48) \
  X(cuIpcOpenMemHandle, 49)             \
  X(cuIpcCloseMemHandle, 50)            \
  X(cuMemPoolImportPointer, 51)         \
  X(cuLaunchKernel, 60)                 \
  X(cuModuleLoad, 61)                   \
  X(cuModuleLoadData, 62)               \
  X(cuModuleLoadDataEx, 63)             \
  X(cuModuleLoadFatBinary, 64)          \
  X(cuLibraryLoadData, 65)              \
  X(cuLibraryLoadFromFile, 66)          \
  X(cuGraphInstantiate, 67)             \
  X(cuGraphInstantiateWithFlags, 68)    \
  X(cuGraphUpload, 69)                  \
  X(cuCtxCreate, 70)                    \
  X(cuDevicePrimaryCtxRetain, 71)       \
  X(cuGraphInstantiateWithParams, 72)   \
  X(fragscope_block_alloc, 90)          \
  X(fragscope_block_free, 91)           \
  X(fragscope_alloc_failed, 92)         \
  X(fragscope_mark, 93)                 \
  X(torch_snapshot, 94)

enum class Api : uint16_t {
#define FRAGSCOPE_API_ENUM(name, number) k_##name = number,
  FRAGSCOPE_API_LIST(FRAGSCOPE_API_ENUM)
#undef FRAGSCOPE_API_ENUM
};

// fragscope.v1.MemoryKind.
enum class MemoryKind : uint8_t {
  kUnspecified = 0,
  kDevice = 1,
  kPitched = 2,
  kManaged = 3,
  kPool = 4,
  kGraph = 5,
  kIpcImport = 6,
};

// MapEvent.Op.
enum class MapOp : uint8_t { kUnspecified = 0, kReserve = 1, kFreeRange = 2, kMap = 3, kUnmap = 4 };
// HandleEvent.Op.
enum class HandleOp : uint8_t {
  kUnspecified = 0,
  kCreate = 1,
  kRelease = 2,
  kRetain = 3,
  kExport = 4,
  kImport = 5,
};
// BlockEvent.Op.
// kSite: BlockEvent.OP_SITE, the block's allocation site learned after the fact (stack_id);
// kSiteFreed: OP_SITE_FREED, the same for a block already freed.
enum class BlockOp : uint8_t {
  kUnspecified = 0,
  kAlloc = 1,
  kFree = 2,
  kFreePending = 3,
  kSite = 4,
  kSiteFreed = 5
};
// Drops.Reason.
enum class DropReason : uint8_t {
  kUnspecified = 0,
  kRingFull = 1,
  kDisconnected = 2,
  kWriteFailed = 3
};
// Snapshot.Reason.
enum class SnapshotReason : uint8_t {
  kUnspecified = 0,
  kStreamStart = 1,
  kResync = 2,
  kPeriodic = 3,
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_API_H_
