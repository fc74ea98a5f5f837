// Wrappers of the failure-only driver functions (driver_hook_list.inc, kind kFailureOnly):
// kernel launches, module/library loads, graph instantiation/upload and context creation can
// fail with CUDA_ERROR_OUT_OF_MEMORY too. Only a failed call is recorded (FailedAlloc, size 0);
// a successful one costs one comparison. Each one's description (call_description.h) says so.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "hooks/call_description.h"
#include "hooks/hook_exports.h"
#include "hooks/hook_table.h"
#include "recording/recorder.h"

namespace fragscope::agent {

#define FRAGSCOPE_FAILURE_ONLY_HOOK(symbol, params, args)                                          \
  static_assert(DescribeCall(HookApi(DriverHookId::k_##symbol)).event == CallEvent::kFailureOnly); \
  FRAGSCOPE_DRIVER_WRAPPER_NAMED(fs_drv_##symbol, "fs_drv_" #symbol, #symbol, params) {            \
    HookCall hook;                                                                                 \
    auto real = reinterpret_cast<CUresult(*) params>(DriverReal(DriverHookId::k_##symbol));        \
    if (real == nullptr) return CUDA_ERROR_NOT_FOUND;                                              \
    CUresult r = real args;                                                                        \
    hook.Returned(r, r != CUDA_SUCCESS);                                                           \
    if (r != CUDA_SUCCESS && hook.record()) {                                                      \
      RecordFailure(FailureInfo{HookApi(DriverHookId::k_##symbol), r});                            \
    }                                                                                              \
    return r;                                                                                      \
  }

#define FRAGSCOPE_LAUNCH_PARAMS                                                                 \
  (CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,                 \
   unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, \
   CUstream stream, void** kernel_params, void** extra)
#define FRAGSCOPE_LAUNCH_ARGS \
  (f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, kernel_params, extra)
FRAGSCOPE_FAILURE_ONLY_HOOK(cuLaunchKernel, FRAGSCOPE_LAUNCH_PARAMS, FRAGSCOPE_LAUNCH_ARGS)
FRAGSCOPE_FAILURE_ONLY_HOOK(cuLaunchKernel_ptsz, FRAGSCOPE_LAUNCH_PARAMS, FRAGSCOPE_LAUNCH_ARGS)

FRAGSCOPE_FAILURE_ONLY_HOOK(cuModuleLoad, (CUmodule * module, const char* fname), (module, fname))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuModuleLoadData, (CUmodule * module, const void* image),
                            (module, image))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuModuleLoadDataEx,
                            (CUmodule * module, const void* image, unsigned int num_options,
                             CUjit_option* options, void** option_values),
                            (module, image, num_options, options, option_values))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuModuleLoadFatBinary, (CUmodule * module, const void* fat_cubin),
                            (module, fat_cubin))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuLibraryLoadData,
                            (CUlibrary * library, const void* code, CUjit_option* jit_options,
                             void** jit_option_values, unsigned int num_jit_options,
                             CUlibraryOption* library_options, void** library_option_values,
                             unsigned int num_library_options),
                            (library, code, jit_options, jit_option_values, num_jit_options,
                             library_options, library_option_values, num_library_options))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuLibraryLoadFromFile,
                            (CUlibrary * library, const char* file_name, CUjit_option* jit_options,
                             void** jit_option_values, unsigned int num_jit_options,
                             CUlibraryOption* library_options, void** library_option_values,
                             unsigned int num_library_options),
                            (library, file_name, jit_options, jit_option_values, num_jit_options,
                             library_options, library_option_values, num_library_options))

// cuGraphInstantiate and _v2 share the CUDA 10/11 five-argument ABI.
#define FRAGSCOPE_GRAPH_INSTANTIATE_PARAMS                                        \
  (CUgraphExec * exec, CUgraph graph, CUgraphNode * error_node, char* log_buffer, \
   size_t buffer_size)
#define FRAGSCOPE_GRAPH_INSTANTIATE_ARGS (exec, graph, error_node, log_buffer, buffer_size)
FRAGSCOPE_FAILURE_ONLY_HOOK(cuGraphInstantiate, FRAGSCOPE_GRAPH_INSTANTIATE_PARAMS,
                            FRAGSCOPE_GRAPH_INSTANTIATE_ARGS)
FRAGSCOPE_FAILURE_ONLY_HOOK(cuGraphInstantiate_v2, FRAGSCOPE_GRAPH_INSTANTIATE_PARAMS,
                            FRAGSCOPE_GRAPH_INSTANTIATE_ARGS)
FRAGSCOPE_FAILURE_ONLY_HOOK(cuGraphInstantiateWithFlags,
                            (CUgraphExec * exec, CUgraph graph, unsigned long long flags),
                            (exec, graph, flags))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuGraphInstantiateWithParams,
                            (CUgraphExec * exec, CUgraph graph,
                             CUDA_GRAPH_INSTANTIATE_PARAMS* params),
                            (exec, graph, params))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuGraphInstantiateWithParams_ptsz,
                            (CUgraphExec * exec, CUgraph graph,
                             CUDA_GRAPH_INSTANTIATE_PARAMS* params),
                            (exec, graph, params))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuGraphUpload, (CUgraphExec exec, CUstream stream), (exec, stream))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuGraphUpload_ptsz, (CUgraphExec exec, CUstream stream), (exec, stream))

// cuCtxCreate: v1 and v2 share one ABI, v3 adds affinity parameters, v4 creation parameters.
FRAGSCOPE_FAILURE_ONLY_HOOK(cuCtxCreate, (CUcontext * ctx, unsigned int flags, CUdevice dev),
                            (ctx, flags, dev))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuCtxCreate_v2, (CUcontext * ctx, unsigned int flags, CUdevice dev),
                            (ctx, flags, dev))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuCtxCreate_v3,
                            (CUcontext * ctx, CUexecAffinityParam* params, int num_params,
                             unsigned int flags, CUdevice dev),
                            (ctx, params, num_params, flags, dev))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuCtxCreate_v4,
                            (CUcontext * ctx, CUctxCreateParams* params, unsigned int flags,
                             CUdevice dev),
                            (ctx, params, flags, dev))
FRAGSCOPE_FAILURE_ONLY_HOOK(cuDevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev), (ctx, dev))

}  // namespace fragscope::agent
