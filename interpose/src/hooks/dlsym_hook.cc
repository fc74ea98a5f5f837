// The decision half of the dlsym interposer; the other half is the assembly trampoline
// (dlsym_trampoline_<arch>.S) that exports `dlsym`, calls this function with the original
// arguments and the caller's return address, and then either returns our answer or jumps
// (a true tail call) to libc's dlsym, so that glibc still sees the original caller and
// RTLD_NEXT keeps meaning "next after the caller".
//
// Only a lookup on a handle of libcuda, of the exact exported name of a wrapped driver function,
// made by code outside libcuda, is answered: with our wrapper of that ABI.
#include <dlfcn.h>

#include "hooks/driver_api.h"
#include "hooks/hook_table.h"
#include "recording/recorder.h"

namespace fragscope::agent {

// Returns our answer, or nullptr to pass the lookup through unchanged. Called with the
// arguments of dlsym; never fails, never allocates, and makes sure the real dlsym is resolved
// before the trampoline jumps to it.
extern "C" __attribute__((visibility("hidden"))) void* fragscope_dlsym_decide(void* handle,
                                                                              const char* name,
                                                                              void* caller) {
  RealDlsym();
  if (handle == RTLD_DEFAULT || handle == RTLD_NEXT || name == nullptr) return nullptr;
  const DriverHook* hook = FindDriverHookBySymbol(name);
  if (hook == nullptr) return nullptr;
  if (CurrentThread().guard > 0) return nullptr;  // the agent's own lookups
  if (!IsLibcudaHandle(handle)) return nullptr;
  if (AddressInLibcuda(caller)) return nullptr;  // the driver resolving itself
  void* real = RealDlsym()(handle, name);
  if (real == nullptr || IsAgentWrapper(real)) return nullptr;
  SetDriverReal(static_cast<DriverHookId>(hook - &GetDriverHook(static_cast<DriverHookId>(0))),
                real);
  return hook->wrapper;
}

}  // namespace fragscope::agent
