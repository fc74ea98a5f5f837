#include "hooks/hook_table.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>

#include <atomic>
#include <cstring>

#include "hooks/driver_api.h"
#include "hooks/driver_symbol_map.h"

// Wrapper addresses. Each wrapper is defined (with its real signature) in driver_hooks.cc,
// failure_hooks.cc, proc_address_hooks.cc or runtime_hooks.cc under a hidden name and exported
// under the CUDA name; only the address is needed here.
#define FRAGSCOPE_DRIVER_HOOK(symbol, base, api, kind) \
  extern "C" __attribute__((visibility("hidden"))) void fs_drv_##symbol();
#include "hooks/driver_hook_list.inc"
#undef FRAGSCOPE_DRIVER_HOOK
#define FRAGSCOPE_RUNTIME_HOOK(symbol, api, kind) \
  extern "C" void fs_rt12_##symbol();             \
  extern "C" void fs_rt13_##symbol();             \
  extern "C" void fs_rtU_##symbol();
#include "hooks/runtime_hook_list.inc"
#undef FRAGSCOPE_RUNTIME_HOOK

namespace fragscope::agent {

constinit std::atomic<void*> g_driver_real[kDriverHookCount];
constinit std::atomic<void*> g_runtime_real[kRuntimeHookCount][kRuntimeAbiCount];

namespace {

const DriverHook kDriverHooks[] = {
#define FRAGSCOPE_DRIVER_HOOK(symbol, base, api, kind) \
  {#symbol, #base, HookKind::kind, reinterpret_cast<void*>(&fs_drv_##symbol)},
#include "hooks/driver_hook_list.inc"
#undef FRAGSCOPE_DRIVER_HOOK
};
static_assert(sizeof(kDriverHooks) / sizeof(kDriverHooks[0]) == kDriverHookCount);

const RuntimeHook kRuntimeHooks[] = {
#define FRAGSCOPE_RUNTIME_HOOK(symbol, api, kind)                                           \
  {#symbol,                                                                                 \
   HookKind::kind,                                                                          \
   {reinterpret_cast<void*>(&fs_rt12_##symbol), reinterpret_cast<void*>(&fs_rt13_##symbol), \
    reinterpret_cast<void*>(&fs_rtU_##symbol)}},
#include "hooks/runtime_hook_list.inc"
#undef FRAGSCOPE_RUNTIME_HOOK
};
static_assert(sizeof(kRuntimeHooks) / sizeof(kRuntimeHooks[0]) == kRuntimeHookCount);

// Driver hook ids sorted by symbol, computed at compile time, for binary search.
constexpr const char* kDriverSymbols[] = {
#define FRAGSCOPE_DRIVER_HOOK(symbol, base, api, kind) #symbol,
#include "hooks/driver_hook_list.inc"
#undef FRAGSCOPE_DRIVER_HOOK
};
constexpr int ConstexprCompare(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return static_cast<unsigned char>(*a) - static_cast<unsigned char>(*b);
}
struct SortedIds {
  uint16_t ids[kDriverHookCount];
};
constexpr SortedIds SortDriverSymbols() {
  SortedIds sorted{};
  for (size_t i = 0; i < kDriverHookCount; ++i) sorted.ids[i] = static_cast<uint16_t>(i);
  for (size_t i = 1; i < kDriverHookCount; ++i) {
    uint16_t v = sorted.ids[i];
    size_t j = i;
    while (j > 0 && ConstexprCompare(kDriverSymbols[sorted.ids[j - 1]], kDriverSymbols[v]) > 0) {
      sorted.ids[j] = sorted.ids[j - 1];
      --j;
    }
    sorted.ids[j] = v;
  }
  return sorted;
}
constexpr SortedIds kSortedDriverIds = SortDriverSymbols();

bool BaseIsWrapped(const char* base) {
  for (const DriverHook& h : kDriverHooks) {
    if (strcmp(h.base, base) == 0) return true;
  }
  return false;
}

constinit uintptr_t g_text_begin = 0;
constinit uintptr_t g_text_end = 0;

}  // namespace

const char* RuntimeAbiVersion(int abi) {
  switch (abi) {
    case kCudart12:
      return "libcudart.so.12";
    case kCudart13:
      return "libcudart.so.13";
    default:
      return nullptr;
  }
}

const DriverHook& GetDriverHook(DriverHookId id) { return kDriverHooks[static_cast<size_t>(id)]; }
const RuntimeHook& GetRuntimeHook(RuntimeHookId id) {
  return kRuntimeHooks[static_cast<size_t>(id)];
}

const DriverHook* FindDriverHookBySymbol(const char* symbol) {
  if (symbol == nullptr || symbol[0] != 'c' || symbol[1] != 'u') return nullptr;
  const SortedIds& sorted = kSortedDriverIds;
  size_t lo = 0, hi = kDriverHookCount;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(kDriverHooks[sorted.ids[mid]].symbol, symbol);
    if (c == 0) return &kDriverHooks[sorted.ids[mid]];
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return nullptr;
}

const DriverHook* DriverHookForLookup(const char* base, int version, uint64_t flags, void* real) {
  if (base == nullptr || !BaseIsWrapped(base)) return nullptr;
  // The pointer itself says which ABI it is when it is one of libcuda's exports; this also
  // covers a driver newer than the headers we were built with.
  if (void* lib = LibcudaHandle(); lib != nullptr && real != nullptr) {
    for (const DriverHook& h : kDriverHooks) {
      if (strcmp(h.base, base) == 0 && RealDlsym()(lib, h.symbol) == real) return &h;
    }
  }
  const char* symbol = DriverSymbolForVersion(base, version, flags);
  return symbol != nullptr ? FindDriverHookBySymbol(symbol) : nullptr;
}

void SetDriverReal(DriverHookId id, void* real) {
  if (real == nullptr || IsAgentWrapper(real)) return;
  void* expected = nullptr;
  g_driver_real[static_cast<size_t>(id)].compare_exchange_strong(expected, real);
}

void* DriverRealSlow(DriverHookId id) {
  std::atomic<void*>& slot = g_driver_real[static_cast<size_t>(id)];
  void* real = slot.load(std::memory_order_acquire);
  if (real != nullptr) return real;
  // dlsym may set errno; a hook that records nothing does not save and restore it.
  const int saved_errno = errno;
  const char* symbol = kDriverHooks[static_cast<size_t>(id)].symbol;
  real = RealDlsym()(RTLD_NEXT, symbol);
  if (real == nullptr || IsAgentWrapper(real)) {
    void* lib = LibcudaHandle();
    real = lib != nullptr ? RealDlsym()(lib, symbol) : nullptr;
  }
  SetDriverReal(id, real);
  errno = saved_errno;
  return slot.load(std::memory_order_acquire);
}

namespace {

// A runtime that a library loaded with RTLD_LOCAL brought in (Python extension modules, CuPy)
// is not in the global scope, so RTLD_NEXT cannot see it although the library's references
// bind to our exported wrappers. Find it among the loaded objects by file name instead.
void* FindInLocalRuntime(const char* symbol, const char* version) {
  struct Search {
    const char* prefix;  // "libcudart.so.13", or "libcudart.so" for the unversioned ABI
    char path[4096];
  } search{version != nullptr ? version : "libcudart.so", {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        const char* name = info->dlpi_name;
        if (name == nullptr || name[0] == '\0') return 0;
        const char* base = std::strrchr(name, '/');
        base = base != nullptr ? base + 1 : name;
        if (std::strncmp(base, s->prefix, std::strlen(s->prefix)) != 0) return 0;
        std::strncpy(s->path, name, sizeof(s->path) - 1);
        return 1;
      },
      &search);
  if (search.path[0] == '\0') return nullptr;
  // RTLD_NOLOAD: only a handle to what is already there, never a new load from a hook.
  void* handle = dlopen(search.path, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  void* real = version != nullptr ? dlvsym(handle, symbol, version) : RealDlsym()(handle, symbol);
  dlclose(handle);  // drops only the reference NOLOAD took; the library stays loaded
  return real;
}

}  // namespace

void* RuntimeRealSlow(RuntimeHookId id, int abi) {
  std::atomic<void*>& slot = g_runtime_real[static_cast<size_t>(id)][abi];
  void* real = slot.load(std::memory_order_acquire);
  if (real != nullptr) return real;
  // dlvsym/dlopen may set errno; a hook that records nothing does not save and restore it.
  const int saved_errno = errno;
  const char* symbol = kRuntimeHooks[static_cast<size_t>(id)].symbol;
  const char* version = RuntimeAbiVersion(abi);
  real = version != nullptr ? dlvsym(RTLD_NEXT, symbol, version) : RealDlsym()(RTLD_NEXT, symbol);
  if (real == nullptr || IsAgentWrapper(real)) real = FindInLocalRuntime(symbol, version);
  errno = saved_errno;
  if (real == nullptr || IsAgentWrapper(real)) return nullptr;
  slot.store(real, std::memory_order_release);
  return real;
}

void SetAgentTextRange(uintptr_t begin, uintptr_t end) {
  g_text_begin = begin;
  g_text_end = end;
}

bool IsAgentWrapper(void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (g_text_end != 0) return a >= g_text_begin && a < g_text_end;
  for (const DriverHook& h : kDriverHooks) {
    if (h.wrapper == p) return true;
  }
  return false;
}

void* WrapDriverLookup(const char* base, int version, uint64_t flags, void* real) {
  if (real == nullptr || IsAgentWrapper(real)) return real;
  const DriverHook* hook = DriverHookForLookup(base, version, flags, real);
  if (hook == nullptr) return real;
  SetDriverReal(static_cast<DriverHookId>(hook - kDriverHooks), real);
  return hook->wrapper;
}

}  // namespace fragscope::agent
