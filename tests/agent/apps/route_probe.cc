// Checks, inside a process running with the agent preloaded, that every wrapped function is
// reachable by every route: the exported symbol, dlsym on the libcuda handle, cuGetProcAddress
// for each (name, version, flags) that means that ABI, and cudaGetDriverEntryPointByVersion;
// and that each runtime function is exported for libcudart.so.12, .13 and unversioned.
// Prints one line per entry; tests/agent/route_test.cc reads them.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct DriverHook {
  const char* symbol;
  const char* base;
};
const DriverHook kDriverHooks[] = {
#define FRAGSCOPE_DRIVER_HOOK(symbol, base, api, kind) {#symbol, #base},
#include "hooks/driver_hook_list.inc"
#undef FRAGSCOPE_DRIVER_HOOK
};

const char* const kRuntimeHooks[] = {
#define FRAGSCOPE_RUNTIME_HOOK(symbol, api, kind) #symbol,
#include "hooks/runtime_hook_list.inc"
#undef FRAGSCOPE_RUNTIME_HOOK
};

struct VersionLine {
  const char* base;
  int version;
  int per_thread;
  const char* symbol;
};
const VersionLine kVersionLines[] = {
#define FRAGSCOPE_DRIVER_SYMBOL(base, version, per_thread, symbol) \
  {base, version, per_thread, symbol},
#include <fragscope/driver_symbols.inc>
#undef FRAGSCOPE_DRIVER_SYMBOL
};

bool InAgent(void* p) {
  Dl_info info{};
  return p != nullptr && dladdr(p, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libfragscope") != nullptr;
}

}  // namespace

int main() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return 2;
  cudaFree(nullptr);  // the runtime is initialized (and has looked up its driver functions)
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) return 2;
  for (const DriverHook& hook : kDriverHooks) {
    void* ours = dlsym(RTLD_DEFAULT, hook.symbol);
    bool direct = InAgent(ours);
    bool by_dlsym = dlsym(lib, hook.symbol) == ours;
    int gpa_ok = 0, entry_ok = 0, lines = 0;
    for (const VersionLine& line : kVersionLines) {
      if (std::strcmp(line.symbol, hook.symbol) != 0) continue;
      ++lines;
      cuuint64_t flags = line.per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
      void* p = nullptr;
      CUdriverProcAddressQueryResult status;
      if (gpa(line.base, &p, line.version, flags, &status) == CUDA_SUCCESS && p == ours) ++gpa_ok;
      void* q = nullptr;
      cudaDriverEntryPointQueryResult rt_status;
      if (cudaGetDriverEntryPointByVersion(line.base, &q, static_cast<unsigned>(line.version),
                                           flags, &rt_status) == cudaSuccess &&
          q == ours) {
        ++entry_ok;
      }
    }
    std::printf("driver %s direct=%d dlsym=%d gpa=%d/%d entry=%d/%d\n", hook.symbol, direct,
                by_dlsym, gpa_ok, lines, entry_ok, lines);
  }
  for (const char* symbol : kRuntimeHooks) {
    bool v12 = InAgent(dlvsym(RTLD_DEFAULT, symbol, "libcudart.so.12"));
    bool v13 = InAgent(dlvsym(RTLD_DEFAULT, symbol, "libcudart.so.13"));
    bool plain = InAgent(dlsym(RTLD_DEFAULT, symbol));
    std::printf("runtime %s v12=%d v13=%d plain=%d\n", symbol, v12, v13, plain);
  }
  return 0;
}
