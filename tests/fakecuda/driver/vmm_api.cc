// Virtual memory management (reserve / create / map / access / release, shareable handles)
// and CUDA IPC. Physical memory behind a handle is freed only when the handle has been
// released AND its last mapping is gone; an in-process import of an exported handle shares
// the same physical memory (counted once).
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "gpu_state.h"

using namespace fakecuda;

namespace {

using Lock = std::lock_guard<std::mutex>;

constexpr uint64_t kNullVmmBase = 0x400000000000ull;
constexpr uint32_t kIpcMagic = 0x50494b46;  // "FKIP"

struct IpcPayload {
  uint32_t magic;
  int32_t pid;
  int32_t device;
  int32_t reserved;
  uint64_t address;
  uint64_t size;
};
static_assert(sizeof(IpcPayload) <= sizeof(CUipcMemHandle));

bool EnsureVmmWindowLocked(State& s) {
  if (s.vmm_va.size() != 0) return true;
  uint64_t bytes =
      std::max<uint64_t>(256ull << 30, RoundUp(8 * s.config.capacity_bytes, kPageBytes));
  if (s.config.null_mode) {
    s.vmm_va.Reset(kNullVmmBase, bytes);
    return true;
  }
  void* raw = mmap(nullptr, bytes + kPageBytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return false;
  s.vmm_va.Reset(RoundUp(reinterpret_cast<uint64_t>(raw), kPageBytes), bytes);
  return true;
}

CUresult CheckProp(State& s, const CUmemAllocationProp* prop) {
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.id < 0 || prop->location.id >= s.device_count) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  return CUDA_SUCCESS;
}

void RestoreReservation(const State& s, uint64_t address, uint64_t size) {
  if (s.config.null_mode) return;
  mmap(reinterpret_cast<void*>(address), size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

// The reservation containing [address, address + size), or reservations.end().
std::map<uint64_t, uint64_t>::iterator FindReservation(State& s, uint64_t address, uint64_t size) {
  auto it = s.reservations.upper_bound(address);
  if (it == s.reservations.begin()) return s.reservations.end();
  --it;
  if (address + size > it->first + it->second || address + size < address) {
    return s.reservations.end();
  }
  return it;
}

CUresult OpenIpc(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!pdptr || (flags & ~unsigned{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS})) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  IpcPayload payload;
  std::memcpy(&payload, handle.reserved, sizeof payload);
  if (payload.magic != kIpcMagic || payload.size == 0) return CUDA_ERROR_INVALID_VALUE;
  // The real driver refuses handles exported by the calling process.
  if (payload.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  // Another process's memory: mapped here, charged to the exporter, not to us. The bytes are
  // not shared with the exporter (the fake backs device memory with private host pages).
  return AllocateLocked(s, ctx, payload.size, FAKECUDA_KIND_IPC, false, false, pdptr);
}

}  // namespace

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = CheckProp(s, prop); r != CUDA_SUCCESS) return r;
  *granularity = kPageBytes;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ptr || size == 0 || size % kPageBytes != 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  if (!EnsureVmmWindowLocked(s)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t align = std::max<uint64_t>(alignment, kPageBytes);
  uint64_t address = 0;
  // The requested address is a hint, as documented: used when free, ignored otherwise.
  if (addr && addr % align == 0 && s.vmm_va.AllocateAt(addr, size)) address = addr;
  if (!address) address = s.vmm_va.Allocate(size, align);
  if (!address) return CUDA_ERROR_OUT_OF_MEMORY;
  s.reservations[address] = size;
  *ptr = address;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  auto it = s.reservations.find(ptr);
  if (it == s.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto mapped = s.mappings.lower_bound(ptr);
  if (mapped != s.mappings.end() && mapped->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  s.vmm_va.Free(ptr, size);
  s.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!handle || size == 0 || size % kPageBytes != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = CheckProp(s, prop); r != CUDA_SUCCESS) return r;
  // Only POSIX file descriptors can be exported on this (Linux, no fabric) machine.
  if (prop->requestedHandleTypes & ~unsigned{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR}) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (CountAllocationCallLocked(s)) return CUDA_ERROR_OUT_OF_MEMORY;
  Device& d = s.devices[prop->location.id];
  uint64_t pages = size / kPageBytes;
  if (!ChargePagesLocked(d, pages)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* memory = new PhysicalMemory();
  memory->device = prop->location.id;
  memory->size = size;
  memory->pages = pages;
  memory->handles = 1;
  if (!s.config.null_mode) {
    memory->memfd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
    if (memory->memfd < 0 || ftruncate(memory->memfd, static_cast<off_t>(size)) != 0) {
      if (memory->memfd >= 0) close(memory->memfd);
      ReleasePagesLocked(d, pages);
      delete memory;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  VmmHandle h;
  h.id = s.next_handle++;
  h.memory = memory;
  h.prop = *prop;
  h.refs = 1;
  s.handles[h.id] = h;
  *handle = h.id;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.refs;
  DropHandleIfUnusedLocked(s, handle);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (size == 0 || flags != 0 || ptr % kPageBytes || size % kPageBytes || offset % kPageBytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto h = s.handles.find(handle);
  if (h == s.handles.end() || h->second.refs <= 0) return CUDA_ERROR_INVALID_HANDLE;
  if (offset + size > h->second.memory->size) return CUDA_ERROR_INVALID_VALUE;
  if (FindReservation(s, ptr, size) == s.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
  auto next = s.mappings.lower_bound(ptr);
  if (next != s.mappings.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != s.mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!s.config.null_mode && h->second.memory->memfd >= 0) {
    void* at = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                    h->second.memory->memfd, static_cast<off_t>(offset));
    if (at == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ++h->second.maps;
  s.mappings[ptr] = VmmMapping{ptr, size, offset, handle, false};
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  // The range must consist of whole mappings, back to back.
  std::vector<uint64_t> covered;
  uint64_t cursor = ptr;
  while (cursor < ptr + size) {
    auto it = s.mappings.find(cursor);
    if (it == s.mappings.end() || cursor + it->second.size > ptr + size) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    covered.push_back(cursor);
    cursor += it->second.size;
  }
  for (uint64_t address : covered) {
    VmmMapping mapping = s.mappings[address];
    s.mappings.erase(address);
    RestoreReservation(s, mapping.address, mapping.size);
    --s.handles[mapping.handle].maps;
    DropHandleIfUnusedLocked(s, mapping.handle);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  bool readable = false;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
        desc[i].location.id >= s.device_count) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    readable |= desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  std::vector<VmmMapping*> covered;
  uint64_t cursor = ptr;
  while (cursor < ptr + size) {
    auto it = s.mappings.upper_bound(cursor);
    if (it == s.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    if (cursor >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
    covered.push_back(&it->second);
    cursor = it->first + it->second.size;
  }
  for (VmmMapping* mapping : covered) mapping->accessible = readable;
  if (!s.config.null_mode) {
    mprotect(reinterpret_cast<void*>(ptr), size, readable ? PROT_READ | PROT_WRITE : PROT_NONE);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  auto it = s.mappings.upper_bound(ptr);
  if (it == s.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (ptr >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  *flags =
      it->second.accessible ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  uint64_t address = reinterpret_cast<uint64_t>(addr);
  auto it = s.mappings.find(address);  // must be the start of a mapping
  if (it == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  ++s.handles[it->second.handle].refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  State& s = GetState();
  Lock lock(s.mu);
  auto it = s.handles.find(handle);
  if (!prop || it == s.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second.prop;
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  auto it = s.handles.find(handle);
  if (!shareableHandle || flags != 0 || it == s.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  if (!(it->second.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return CUDA_ERROR_INVALID_VALUE;  // not created exportable
  }
  int fd = it->second.memory->memfd >= 0 ? dup(it->second.memory->memfd) : -1;
  if (fd < 0) return CUDA_ERROR_NOT_SUPPORTED;  // null mode has no backing to share
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  PhysicalMemory* shared = nullptr;
  for (auto& [id, existing] : s.handles) {
    struct stat mine;
    if (existing.memory->memfd >= 0 && fstat(existing.memory->memfd, &mine) == 0 &&
        mine.st_ino == st.st_ino && mine.st_dev == st.st_dev) {
      shared = existing.memory;
      break;
    }
  }
  VmmHandle h;
  h.id = s.next_handle++;
  h.refs = 1;
  h.imported = true;
  h.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  h.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  h.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  if (shared) {
    ++shared->handles;  // same physical memory, counted once
    h.memory = shared;
  } else {
    // Exported by another process: its memory, charged there.
    h.memory = new PhysicalMemory();
    h.memory->size = static_cast<uint64_t>(st.st_size);
    h.memory->memfd = dup(fd);
    h.memory->handles = 1;
    Context* ctx = CurrentContext();
    h.memory->device = ctx && IsLiveContextLocked(s, ctx) ? ctx->device : 0;
  }
  h.prop.location.id = h.memory->device;
  s.handles[h.id] = h;
  *handle = h.id;
  return CUDA_SUCCESS;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  auto it = s.allocations.find(dptr);
  if (it == s.allocations.end() ||
      (it->second.kind != FAKECUDA_KIND_DEVICE && it->second.kind != FAKECUDA_KIND_PITCH)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  IpcPayload payload{kIpcMagic, getpid(),           it->second.device,
                     0,         it->second.address, it->second.size};
  std::memset(pHandle, 0, sizeof *pHandle);
  std::memcpy(pHandle->reserved, &payload, sizeof payload);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return OpenIpc(pdptr, handle, Flags);
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return OpenIpc(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  auto it = s.allocations.find(dptr);
  if (it == s.allocations.end() || it->second.kind != FAKECUDA_KIND_IPC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ReleaseAllocationLocked(s, it);
  return CUDA_SUCCESS;
}
