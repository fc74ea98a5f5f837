// The lookup routes: cuGetProcAddress (both ABIs, including the runtime's self-lookup of
// "cuGetProcAddress") and cudaGetDriverEntryPoint(ByVersion) (in runtime_hooks.cc) hand out
// our wrapper of the exact ABI the caller asked for (hook_table.h) instead of the driver's
// function, remembering the driver's function as the wrapper's real target.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "hooks/hook_exports.h"
#include "hooks/hook_table.h"
#include "recording/recorder.h"

namespace fragscope::agent {

FRAGSCOPE_DRIVER_WRAPPER(cuGetProcAddress_v2,
                         (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* symbol_status)) {
  HookCall hook(/*keep_errno=*/true);  // wrapping the answer may call dlsym
  auto real = reinterpret_cast<PFN_cuGetProcAddress_v12000>(
      DriverReal(DriverHookId::k_cuGetProcAddress_v2));
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(symbol, pfn, cuda_version, flags, symbol_status);
  hook.Returned(r, false);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr && symbol != nullptr) {
    *pfn = WrapDriverLookup(symbol, cuda_version, flags, *pfn);
  }
  return r;
}

FRAGSCOPE_DRIVER_WRAPPER(cuGetProcAddress,
                         (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags)) {
  HookCall hook(/*keep_errno=*/true);  // wrapping the answer may call dlsym
  auto real =
      reinterpret_cast<PFN_cuGetProcAddress_v11030>(DriverReal(DriverHookId::k_cuGetProcAddress));
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(symbol, pfn, cuda_version, flags);
  hook.Returned(r, false);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr && symbol != nullptr) {
    *pfn = WrapDriverLookup(symbol, cuda_version, flags, *pfn);
  }
  return r;
}

}  // namespace fragscope::agent
