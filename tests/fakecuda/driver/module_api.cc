// Modules, libraries, functions and kernels: loaded, looked up and queried, never compiled or
// run. Code images are not parsed: any non-null image loads, any name resolves, and the
// answers about a function (attributes, occupancy) are those of a small kernel on an H100-like
// device, plausible enough for NVIDIA's runtime, cuBLAS and cuDNN to pick a launch
// configuration. Globals are zeroed host memory that the copy functions accept as device
// memory and that is never charged to a device.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "gpu_state.h"

using namespace fakecuda;

namespace {

using Lock = std::lock_guard<std::mutex>;

// What a module global is given when the image is not parsed: enough for the constant banks
// and the small device variables libraries keep (cuBLAS asks for its `deviceConstants`).
constexpr size_t kGlobalBytes = 64 << 10;
constexpr int kSharedPerBlockOptin = 232448;  // bytes, as CU_DEVICE_ATTRIBUTE_..._OPTIN
constexpr int kMaxThreadsPerSm = 2048;

CUresult LoadModule(CUmodule* module, bool valid_input) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!module || !valid_input) return CUDA_ERROR_INVALID_VALUE;
  if (CountApiCallLocked(s, "cuModuleLoad")) return CUDA_ERROR_OUT_OF_MEMORY;
  *module = reinterpret_cast<CUmodule>(NewObjectLocked(s, HandleObject::kModule));
  return CUDA_SUCCESS;
}

CUresult LoadLibrary(CUlibrary* library, bool valid_input) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!library || !valid_input) return CUDA_ERROR_INVALID_VALUE;
  if (CountApiCallLocked(s, "cuLibraryLoad")) return CUDA_ERROR_OUT_OF_MEMORY;
  *library = reinterpret_cast<CUlibrary>(NewObjectLocked(s, HandleObject::kLibrary));
  return CUDA_SUCCESS;
}

bool FileExists(const char* path) {
  struct stat st;
  return path && stat(path, &st) == 0;
}

CUresult Unload(void* handle, HandleObject::Type type) {
  State& s = GetState();
  Lock lock(s.mu);
  HandleObject* object = LiveObjectLocked(s, handle, type);
  if (!object) return CUDA_ERROR_INVALID_HANDLE;
  object->alive = false;
  return CUDA_SUCCESS;
}

// The same (module or library, name) always gives the same zeroed range.
CUresult GetGlobal(CUdeviceptr* dptr, size_t* bytes, void* owner_handle, HandleObject::Type type,
                   const char* name) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!name || (!dptr && !bytes)) return CUDA_ERROR_INVALID_VALUE;
  HandleObject* owner = LiveObjectLocked(s, owner_handle, type);
  if (!owner) return CUDA_ERROR_INVALID_HANDLE;
  auto [it, inserted] = s.global_addresses.try_emplace({owner, name}, 0);
  if (inserted) {
    void* memory = std::calloc(1, kGlobalBytes);  // lives as long as the process
    if (!memory) return CUDA_ERROR_OUT_OF_MEMORY;
    it->second = reinterpret_cast<uint64_t>(memory);
    s.globals[it->second] = kGlobalBytes;
  }
  if (dptr) *dptr = it->second;
  if (bytes) *bytes = kGlobalBytes;
  return CUDA_SUCCESS;
}

// A function or a kernel (NVIDIA's runtime passes kernel handles where functions are asked).
HandleObject* CallableLocked(State& s, void* handle) {
  if (HandleObject* f = LiveObjectLocked(s, handle, HandleObject::kFunction)) return f;
  return LiveObjectLocked(s, handle, HandleObject::kKernel);
}

int DefaultAttribute(int attribute) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      return 1024;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      return 32;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      return 90;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      return 49152;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return -1;
    default:
      return 0;
  }
}

CUresult GetAttribute(int* value, CUfunction_attribute attribute, void* handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!value || attribute < 0 || attribute >= CU_FUNC_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  HandleObject* f = CallableLocked(s, handle);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  auto it = f->attributes.find(attribute);
  *value = it != f->attributes.end() ? it->second : DefaultAttribute(attribute);
  return CUDA_SUCCESS;
}

CUresult SetAttribute(void* handle, CUfunction_attribute attribute, int value) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  HandleObject* f = CallableLocked(s, handle);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (value < 0 || value > kSharedPerBlockOptin) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;  // the rest are read-only
  }
  f->attributes[attribute] = value;
  return CUDA_SUCCESS;
}

CUresult CheckCallable(void* handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return CallableLocked(s, handle) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// Blocks of `threads` threads with `dynamic_smem` bytes of dynamic shared memory that fit on one
// SM: threads, blocks and shared memory bound them (registers never do for the fake kernel).
int BlocksPerSm(uint64_t threads, uint64_t dynamic_smem) {
  constexpr uint64_t kSharedPerSm = 233472, kReservedPerBlock = 1024, kMaxBlocksPerSm = 32;
  if (threads == 0 || threads > 1024) return 0;
  uint64_t blocks = std::min<uint64_t>(kMaxBlocksPerSm, kMaxThreadsPerSm / threads);
  return static_cast<int>(std::min(blocks, kSharedPerSm / (dynamic_smem + kReservedPerBlock)));
}

// SMs per GPC of an H100 SXM (132 SMs); a thread block cluster runs inside one GPC, so how many
// clusters fit depends on this split, which NVIDIA's libraries probe size by size.
constexpr int kSmsPerGpc[] = {18, 18, 18, 18, 16, 16, 14, 14};
constexpr int kPortableClusterSize = 8, kMaxClusterSize = 16;

CUresult MaxActiveBlocks(int* blocks, CUfunction func, int block_size, size_t dynamic_smem) {
  if (!blocks || block_size <= 0 || block_size > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckCallable(func); r != CUDA_SUCCESS) return r;
  *blocks = BlocksPerSm(block_size, dynamic_smem);
  return CUDA_SUCCESS;
}

CUresult MaxPotentialBlockSize(int* min_grid, int* block_size, CUfunction func,
                               int block_size_limit) {
  if (!min_grid || !block_size) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckCallable(func); r != CUDA_SUCCESS) return r;
  int limit = block_size_limit > 0 ? std::min(block_size_limit, 1024) : 1024;
  *block_size = limit;
  *min_grid = BlocksPerSm(limit, 0) * 132;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  return CUDA_SUCCESS;
}

// The cluster size of a launch (its cluster-dimension attribute, else the kernel's required
// one, else 1) and whether the kernel allows non-portable sizes.
CUresult ClusterOf(void* func, const CUlaunchConfig* config, uint64_t* cluster,
                   bool* non_portable) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  HandleObject* f = CallableLocked(s, func);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  auto attribute = [f](int a) {
    auto it = f->attributes.find(a);
    return it == f->attributes.end() ? 0 : it->second;
  };
  *non_portable = attribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) != 0;
  uint64_t dims[3] = {static_cast<uint64_t>(attribute(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH)),
                      static_cast<uint64_t>(attribute(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT)),
                      static_cast<uint64_t>(attribute(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH))};
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs && config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      dims[0] = config->attrs[i].value.clusterDim.x;
      dims[1] = config->attrs[i].value.clusterDim.y;
      dims[2] = config->attrs[i].value.clusterDim.z;
    }
  }
  *cluster = std::max<uint64_t>(dims[0], 1) * std::max<uint64_t>(dims[1], 1) *
             std::max<uint64_t>(dims[2], 1);
  return CUDA_SUCCESS;
}

}  // namespace

// --- modules ----------------------------------------------------------------------------------

CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  if (fname && !FileExists(fname)) return CUDA_ERROR_FILE_NOT_FOUND;
  return LoadModule(module, fname != nullptr);
}
CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return LoadModule(module, image != nullptr);
}
CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*,
                            void**) {
  return LoadModule(module, image != nullptr);
}
CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return LoadModule(module, fatCubin != nullptr);
}
CUresult cuModuleUnload(CUmodule hmod) { return Unload(hmod, HandleObject::kModule); }

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  HandleObject* module = LiveObjectLocked(s, hmod, HandleObject::kModule);
  if (!module) return CUDA_ERROR_INVALID_HANDLE;
  *hfunc = reinterpret_cast<CUfunction>(NewObjectLocked(s, HandleObject::kFunction, module));
  return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  return GetGlobal(dptr, bytes, hmod, HandleObject::kModule, name);
}

// NVIDIA's runtime asks once at start-up; an error here makes cudaGetDeviceCount fail.
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

// --- libraries and kernels --------------------------------------------------------------------

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**,
                           unsigned int, CUlibraryOption*, void**, unsigned int) {
  return LoadLibrary(library, code != nullptr);
}
CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option*, void**,
                               unsigned int, CUlibraryOption*, void**, unsigned int) {
  if (fileName && !FileExists(fileName)) return CUDA_ERROR_FILE_NOT_FOUND;
  return LoadLibrary(library, fileName != nullptr);
}
CUresult cuLibraryUnload(CUlibrary library) { return Unload(library, HandleObject::kLibrary); }

CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!pKernel || !name) return CUDA_ERROR_INVALID_VALUE;
  HandleObject* owner = LiveObjectLocked(s, library, HandleObject::kLibrary);
  if (!owner) return CUDA_ERROR_INVALID_HANDLE;
  *pKernel = reinterpret_cast<CUkernel>(NewObjectLocked(s, HandleObject::kKernel, owner));
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!pMod) return CUDA_ERROR_INVALID_VALUE;
  if (!LiveObjectLocked(s, library, HandleObject::kLibrary)) return CUDA_ERROR_INVALID_HANDLE;
  *pMod = reinterpret_cast<CUmodule>(NewObjectLocked(s, HandleObject::kModule));
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return GetGlobal(dptr, bytes, library, HandleObject::kLibrary, name);
}

CUresult cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                             const char* name) {
  return GetGlobal(dptr, bytes, library, HandleObject::kLibrary, name);
}

CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
  HandleObject* k = LiveObjectLocked(s, kernel, HandleObject::kKernel);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  HandleObject* f = NewObjectLocked(s, HandleObject::kFunction, k->parent);
  f->attributes = k->attributes;
  *pFunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!pLib) return CUDA_ERROR_INVALID_VALUE;
  HandleObject* k = LiveObjectLocked(s, kernel, HandleObject::kKernel);
  if (!k || !k->parent) return CUDA_ERROR_INVALID_HANDLE;
  *pLib = reinterpret_cast<CUlibrary>(k->parent);
  return CUDA_SUCCESS;
}

CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice) {
  return GetAttribute(pi, attrib, kernel);
}
CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice) {
  return SetAttribute(kernel, attrib, val);
}
CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache, CUdevice) {
  return CheckCallable(kernel);
}

// --- functions --------------------------------------------------------------------------------

CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  return GetAttribute(pi, attrib, hfunc);
}
CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return SetAttribute(hfunc, attrib, value);
}
CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache) { return CheckCallable(hfunc); }

CUresult cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!hmod) return CUDA_ERROR_INVALID_VALUE;
  HandleObject* f = LiveObjectLocked(s, hfunc, HandleObject::kFunction);
  if (!f || !f->parent || f->parent->type != HandleObject::kModule) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *hmod = reinterpret_cast<CUmodule>(f->parent);
  return CUDA_SUCCESS;
}

// --- occupancy --------------------------------------------------------------------------------

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                     size_t dynamicSMemSize) {
  return MaxActiveBlocks(numBlocks, func, blockSize, dynamicSMemSize);
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                              int blockSize, size_t dynamicSMemSize,
                                                              unsigned int) {
  return MaxActiveBlocks(numBlocks, func, blockSize, dynamicSMemSize);
}
CUresult cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                          CUoccupancyB2DSize, size_t, int blockSizeLimit) {
  return MaxPotentialBlockSize(minGridSize, blockSize, func, blockSizeLimit);
}
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize,
                                                   CUfunction func, CUoccupancyB2DSize, size_t,
                                                   int blockSizeLimit, unsigned int) {
  return MaxPotentialBlockSize(minGridSize, blockSize, func, blockSizeLimit);
}
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func,
                                                 int numBlocks, int blockSize) {
  if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckCallable(func); r != CUDA_SUCCESS) return r;
  *dynamicSmemSize = numBlocks <= BlocksPerSm(blockSize, 0)
                         ? std::min<size_t>(kSharedPerBlockOptin, 233472 / numBlocks - 1024)
                         : 0;
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func,
                                      const CUlaunchConfig* config) {
  if (!numClusters || !config) return CUDA_ERROR_INVALID_VALUE;
  uint64_t cluster = 0;
  bool non_portable = false;
  if (CUresult r = ClusterOf(func, config, &cluster, &non_portable); r != CUDA_SUCCESS) return r;
  if (cluster > kMaxClusterSize || (cluster > kPortableClusterSize && !non_portable)) {
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  const uint64_t threads = uint64_t{config->blockDimX} * config->blockDimY * config->blockDimZ;
  const int per_sm = BlocksPerSm(threads, config->sharedMemBytes);
  int clusters = 0;
  for (int sms : kSmsPerGpc) clusters += static_cast<int>(sms * per_sm / cluster);
  *numClusters = clusters;
  return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction func,
                                            const CUlaunchConfig* config) {
  if (!clusterSize || !config) return CUDA_ERROR_INVALID_VALUE;
  uint64_t cluster = 0;
  bool non_portable = false;
  if (CUresult r = ClusterOf(func, config, &cluster, &non_portable); r != CUDA_SUCCESS) return r;
  *clusterSize = non_portable ? kMaxClusterSize : kPortableClusterSize;
  return CUDA_SUCCESS;
}
