// cuInit, versions, device queries, primary and created contexts.
#include <cstdio>
#include <cstring>

#include "gpu_state.h"

using namespace fakecuda;

namespace {

using Lock = std::lock_guard<std::mutex>;

// Context destroy and primary reset/release run NVIDIA's runtime's context-local-storage
// destructors first, while the context is still usable (they free the runtime's own resources
// through the driver), with the state lock released; `lock` is held again on return.
void RunLocalStorageDestructorsUnlocked(std::unique_lock<std::mutex>& lock, Context* ctx) {
  std::vector<LocalStorageRelease> releases = TakeLocalStorageLocked(ctx);
  if (releases.empty()) return;
  lock.unlock();
  RunLocalStorageDestructors(releases);
  lock.lock();
}

CUresult CheckDevice(State& s, CUdevice dev) {
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

int AttributeValue(const State& s, CUdevice_attribute attrib, CUdevice dev) {
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      return 49152;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      return 233472;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      return 1980000;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      return 52428800;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      return 512;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      return 32;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      return 132;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      return 2048;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      return 0x10 + s.devices[dev].physical;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    // Hopper features NVIDIA's libraries test before choosing sm_90 kernels.
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
      return 2;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
      return 82837504;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
      return 134213632;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
      return 4;
    default:
      return 0;
  }
}

CUresult CreateContext(CUcontext* pctx, unsigned flags, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (CountApiCallLocked(s, "cuCtxCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
  Context* ctx = new Context();
  ctx->device = dev;
  ctx->flags = flags;
  if (CUresult r = ActivateContextLocked(s, ctx); r != CUDA_SUCCESS) {
    delete ctx;
    return r;
  }
  s.contexts.insert(ctx);
  ContextStack().push_back(ctx);
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

CUresult DestroyContext(CUcontext handle) {
  State& s = GetState();
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = reinterpret_cast<Context*>(handle);
  if (!ctx || !s.contexts.count(ctx) || !ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
  RunLocalStorageDestructorsUnlocked(lock, ctx);
  if (!ctx->alive) return CUDA_SUCCESS;  // destroyed by another thread meanwhile
  DeactivateContextLocked(s, ctx);
  auto& stack = ContextStack();
  for (auto& entry : stack) {
    if (entry == ctx) entry = nullptr;
  }
  std::erase(stack, nullptr);
  return CUDA_SUCCESS;
}

CUresult PrimaryRelease(CUdevice dev) {
  State& s = GetState();
  std::unique_lock<std::mutex> lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  Context& primary = s.devices[dev].primary;
  if (primary.primary_refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (primary.primary_refs == 1) RunLocalStorageDestructorsUnlocked(lock, &primary);
  if (primary.primary_refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;  // released meanwhile
  if (--primary.primary_refs == 0) DeactivateContextLocked(s, &primary);
  return CUDA_SUCCESS;
}

CUresult PrimaryReset(CUdevice dev) {
  State& s = GetState();
  std::unique_lock<std::mutex> lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  Context& primary = s.devices[dev].primary;
  if (primary.alive) RunLocalStorageDestructorsUnlocked(lock, &primary);
  if (primary.alive) DeactivateContextLocked(s, &primary);
  primary.flags = 0;
  return CUDA_SUCCESS;
}

CUresult PrimarySetFlags(CUdevice dev, unsigned flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (flags & ~0x1fu) return CUDA_ERROR_INVALID_VALUE;
  s.devices[dev].primary.flags = flags;
  return CUDA_SUCCESS;
}

CUresult PopCurrent(CUcontext* pctx) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  auto& stack = ContextStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult PushCurrent(CUcontext handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = reinterpret_cast<Context*>(handle);
  if (!IsLiveContextLocked(s, ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  ContextStack().push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult SynchronizeContext(Context* ctx) {
  State& s = GetState();
  if (UnsafeDuringCaptureLocked(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  SynchronizeContextLocked(s, ctx);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cuInit(unsigned int Flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!s.initialized) {
    // A failure armed through fakecuda_fail_nth_allocation() before cuInit stays armed.
    std::vector<uint64_t> armed = s.fail_at;
    s.config = ReadConfigFromEnvironment();
    ConfigureDevicesLocked(s);
    if (!armed.empty()) s.fail_at = armed;
    s.initialized = true;
    WatchExitLocked(s);
  }
  return s.device_count == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = 13000;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = s.device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "fakecuda GPU %d", s.devices[dev].physical);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  // Deterministic per physical ordinal, so CUDA_VISIBLE_DEVICES renumbering keeps identities.
  int physical = s.devices[dev].physical;
  static const unsigned char kPrefix[8] = {0xfa, 0xce, 0xc0, 0xda, 0x00, 0x13, 0x40, 0x00};
  for (int i = 0; i < 16; ++i) {
    uuid->bytes[i] = static_cast<char>(i < 8 ? kPrefix[i] : (physical * 37 + i * 11) & 0xff);
  }
  uuid->bytes[15] = static_cast<char>(physical);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = s.config.capacity_bytes;
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t total = 0;
  CUresult r = cuDeviceTotalMem_v2(&total, dev);
  if (r == CUDA_SUCCESS && bytes) *bytes = total > 0xffffffffu ? 0xffffffffu : unsigned(total);
  return bytes ? r : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (!pi || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  *pi = AttributeValue(s, attrib, dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0",
                0x10 + s.devices[dev].physical);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!dev || !pciBusId) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < s.device_count; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "0000:%02x:00.0", 0x10 + s.devices[i].physical);
    if (strcasecmp(id, pciBusId) == 0) {
      *dev = i;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckDevice(s, peerDev); r != CUDA_SUCCESS) return r;
  if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
  *canAccessPeer = dev != peerDev;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  Context& primary = s.devices[dev].primary;
  if (!primary.alive) {
    if (CountApiCallLocked(s, "cuDevicePrimaryCtxRetain")) return CUDA_ERROR_OUT_OF_MEMORY;
    if (CUresult r = ActivateContextLocked(s, &primary); r != CUDA_SUCCESS) return r;
  }
  ++primary.primary_refs;
  *pctx = reinterpret_cast<CUcontext>(&primary);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return PrimaryRelease(dev); }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return PrimaryRelease(dev); }
CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return PrimaryReset(dev); }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return PrimaryReset(dev); }
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return PrimarySetFlags(dev, flags);
}
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return PrimarySetFlags(dev, flags);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = CheckDevice(s, dev); r != CUDA_SUCCESS) return r;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  *flags = s.devices[dev].primary.flags;
  *active = s.devices[dev].primary.alive ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam*, int numParams, unsigned int flags,
                        CUdevice dev) {
  if (numParams < 0) return CUDA_ERROR_INVALID_VALUE;
  return CreateContext(pctx, flags, dev);
}
CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
CUresult cuCtxDestroy(CUcontext ctx) { return DestroyContext(ctx); }
CUresult cuCtxDestroy_v2(CUcontext ctx) { return DestroyContext(ctx); }
CUresult cuCtxPopCurrent(CUcontext* pctx) { return PopCurrent(pctx); }
CUresult cuCtxPopCurrent_v2(CUcontext* pctx) { return PopCurrent(pctx); }
CUresult cuCtxPushCurrent(CUcontext ctx) { return PushCurrent(ctx); }
CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return PushCurrent(ctx); }

CUresult cuCtxSetCurrent(CUcontext handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = reinterpret_cast<Context*>(handle);
  if (ctx && !ctx->alive && IsPrimaryContextLocked(s, ctx)) {
    // NVIDIA's runtime makes the primary context current before it retains it (export table 2
    // hands it the handle); the real driver initializes the context on that first use, so the
    // context overhead is charged here, not before.
    if (CUresult r = ActivateContextLocked(s, ctx); r != CUDA_SUCCESS) return r;
  }
  if (ctx && !IsLiveContextLocked(s, ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  SetCurrentContext(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(CurrentContext());
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext handle) {
  if (!handle) return cuCtxGetDevice(device);
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = reinterpret_cast<Context*>(handle);
  if (!IsLiveContextLocked(s, ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetFlags(unsigned int* flags) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext, unsigned int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

// Limits per context: the defaults of an H100 (cuBLAS refuses a device whose limits it cannot
// read with CUBLAS_STATUS_ARCH_MISMATCH).
size_t DefaultLimit(CUlimit limit) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
      return 1024;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
      return 1 << 20;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      return 8 << 20;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
      return 2;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      return 2048;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
      return 64;
    case CU_LIMIT_SHMEM_SIZE:
      return 232448;
    default:
      return 0;
  }
}

CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!pvalue || limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  auto it = ctx->limits.find(limit);
  *pvalue = it != ctx->limits.end() ? it->second : DefaultLimit(limit);
  return CUDA_SUCCESS;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (limit < 0 || limit >= CU_LIMIT_MAX || limit == CU_LIMIT_SHMEM_SIZE ||
      limit == CU_LIMIT_CIG_ENABLED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ctx->limits[limit] = value;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext handle, unsigned long long* ctxId) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = handle ? reinterpret_cast<Context*>(handle) : CurrentContext();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (!IsLiveContextLocked(s, ctx)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (!ctxId) return CUDA_ERROR_INVALID_VALUE;
  *ctxId = ctx->id;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  return SynchronizeContext(ctx);
}

CUresult cuCtxSynchronize_v2(CUcontext handle) {
  if (!handle) return cuCtxSynchronize();
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = reinterpret_cast<Context*>(handle);
  if (!IsLiveContextLocked(s, ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  return SynchronizeContext(ctx);
}
