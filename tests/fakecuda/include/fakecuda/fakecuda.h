/* Ground truth of the fake CUDA driver (tests/fakecuda), for tests only.
 *
 * These C functions are extra exports of the fake libcuda.so.1. A test links the fake driver
 * (target fakecuda_driver) or looks them up with dlsym in a process running on it, and compares
 * what a tool recorded with what the fake really holds.
 *
 * Thread-safety: every function takes the driver's state lock; call from any thread.
 * Units: addresses and sizes in bytes; devices are the process's ordinals (after
 * CUDA_VISIBLE_DEVICES). Nothing here allocates memory the caller must free.
 */
#ifndef FAKECUDA_FAKECUDA_H_
#define FAKECUDA_FAKECUDA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a live entry is. Names (fakecuda_kind_name) are the words used in FAKECUDA_LIVE_DUMP. */
typedef enum fakecuda_kind {
  FAKECUDA_KIND_DEVICE = 0,  /* "device": cuMemAlloc(_v2) / cudaMalloc */
  FAKECUDA_KIND_PITCH = 1,   /* "pitch": cuMemAllocPitch / cudaMallocPitch / cudaMalloc3D */
  FAKECUDA_KIND_MANAGED = 2, /* "managed": cuMemAllocManaged (not charged to the device) */
  FAKECUDA_KIND_LEGACY = 3,  /* "legacy": 32-bit cuMemAlloc / cuMemAllocPitch (below 4 GiB) */
  FAKECUDA_KIND_ASYNC = 4,   /* "async": a stream-ordered block from a pool */
  FAKECUDA_KIND_ASYNC_PENDING =
      5,                         /* "async_pending": freed with cuMemFreeAsync, stream not synced */
  FAKECUDA_KIND_GRAPH = 6,       /* "graph": cuMemAllocAsync during stream capture */
  FAKECUDA_KIND_VMM_RESERVE = 7, /* "vmm_reserve": cuMemAddressReserve range */
  FAKECUDA_KIND_VMM_HANDLE = 8,  /* "vmm_handle": cuMemCreate/import handle; address is 0 */
  FAKECUDA_KIND_VMM_MAP = 9,     /* "vmm_map": a cuMemMap'ped range; handle says of what */
  FAKECUDA_KIND_IPC = 10,        /* "ipc": a cuIpcOpenMemHandle mapping (not charged here) */
  FAKECUDA_KIND_POOL_CHUNK = 11, /* "pool_chunk": physical memory reserved by a memory pool */
  FAKECUDA_KIND_VMM_IMPORT = 12  /* "vmm_import": handle imported from a shareable handle */
} fakecuda_kind;

typedef struct fakecuda_live_entry {
  uint64_t address; /* device virtual address (0 for vmm_handle) */
  uint64_t size;    /* bytes as requested (vmm: as created/reserved/mapped) */
  int32_t device;   /* ordinal; -1 for a VMM reservation (not tied to a device) */
  int32_t kind;     /* fakecuda_kind */
  uint64_t handle;  /* CUmemGenericAllocationHandle for vmm_handle / vmm_map, else 0 */
} fakecuda_live_entry;

/* Live entries on `device` of the kinds a tracer records as allocations: device, pitch,
 * managed, legacy, async (not pending), graph, vmm_handle, vmm_import, ipc. */
size_t fakecuda_live_count(int device);

/* Physical bytes this process holds on `device`: whole 2 MiB pages of allocations, shared
 * small-allocation pages, pool chunks, VMM handles and context overhead. Excludes
 * FAKECUDA_OTHER_USED. cuMemGetInfo's free == total - other - used (in pages). */
uint64_t fakecuda_used_bytes(int device);

/* Copies up to `max` entries (all devices, all kinds, sorted by kind then address) into `out`
 * and returns how many exist in total (call with max 0 to size a buffer). */
size_t fakecuda_live_list(fakecuda_live_entry* out, size_t max);

/* "device", "pitch", ... ; "unknown" for other values. Static storage. */
const char* fakecuda_kind_name(int kind);

/* Frees everything (allocations, pools, streams, VMM, non-primary contexts), re-reads the
 * FAKECUDA_* environment and zeroes the allocation-call counter. Active primary contexts stay
 * active (their overhead is charged again) so a runtime bound to them keeps working. */
void fakecuda_reset(void);

/* Makes the n-th allocation call from now (1-based) fail with CUDA_ERROR_OUT_OF_MEMORY, like
 * FAKECUDA_FAIL_AT; 0 cancels. Allocation calls: cuMemAlloc*, cuMemAllocPitch*,
 * cuMemAllocManaged, cuMemAllocAsync*, cuMemAllocFromPoolAsync*, cuMemCreate. */
void fakecuda_fail_nth_allocation(uint64_t n);

/* Number of allocation calls made since start or the last reset. */
uint64_t fakecuda_allocation_calls(void);

/* Pool chunk granularity and the physical page size, for tests computing expected layouts. */
#define FAKECUDA_PAGE_BYTES (2ull << 20)
#define FAKECUDA_SMALL_ALIGNMENT 512ull
#define FAKECUDA_POOL_CHUNK_BYTES (32ull << 20)

#ifdef __cplusplus
}
#endif

#endif /* FAKECUDA_FAKECUDA_H_ */
