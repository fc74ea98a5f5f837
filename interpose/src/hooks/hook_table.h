// The table of wrapped functions (from driver_hook_list.inc and runtime_hook_list.inc), the real
// function each wrapper forwards to, and the mapping from a lookup (name + CUDA version + flags)
// to the wrapper of the exact ABI the caller asked for. Every route answers from here.
//
// Thread safety: all functions are thread-safe. Real pointers are resolved lazily and cached
// in atomics; resolution may call dlsym/dlvsym (loader lock), never CUDA.
#ifndef FRAGSCOPE_INTERPOSE_HOOK_TABLE_H_
#define FRAGSCOPE_INTERPOSE_HOOK_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "recording/api.h"

namespace fragscope::agent {

enum class HookKind : uint8_t { kTracked, kFailureOnly, kRoute };

enum class DriverHookId : uint16_t {
// k_ + symbol: token pasting keeps cuda.h's macros (cuMemAlloc -> cuMemAlloc_v2) out.
#define FRAGSCOPE_DRIVER_HOOK(symbol, base, api, kind) k_##symbol,
#include "hooks/driver_hook_list.inc"
#undef FRAGSCOPE_DRIVER_HOOK
  kCount
};
inline constexpr size_t kDriverHookCount = static_cast<size_t>(DriverHookId::kCount);

enum class RuntimeHookId : uint16_t {
#define FRAGSCOPE_RUNTIME_HOOK(symbol, api, kind) k_##symbol,
#include "hooks/runtime_hook_list.inc"
#undef FRAGSCOPE_RUNTIME_HOOK
  kCount
};
inline constexpr size_t kRuntimeHookCount = static_cast<size_t>(RuntimeHookId::kCount);

// The runtime ABIs each runtime function is exported for.
enum RuntimeAbi : int { kCudart12 = 0, kCudart13 = 1, kCudartUnversioned = 2, kRuntimeAbiCount };
// The version node names, nullptr for unversioned.
const char* RuntimeAbiVersion(int abi);

struct DriverHook {
  const char* symbol;  // exported name, one ABI
  const char* base;    // name cuGetProcAddress is asked for
  HookKind kind;
  void* wrapper;  // our function with exactly this ABI
};

struct RuntimeHook {
  const char* symbol;
  HookKind kind;
  void* wrappers[kRuntimeAbiCount];
};

const DriverHook& GetDriverHook(DriverHookId id);
const RuntimeHook& GetRuntimeHook(RuntimeHookId id);

// The Api each hook records, as constants: a wrapper's id is a constant, so its event's Api
// folds to one (kept in DriverHook/RuntimeHook, it took a call to GetDriverHook per event).
inline constexpr Api kDriverHookApi[] = {
#define FRAGSCOPE_DRIVER_HOOK(symbol, base, api, kind) Api::k_##api,
#include "hooks/driver_hook_list.inc"
#undef FRAGSCOPE_DRIVER_HOOK
};
inline constexpr Api kRuntimeHookApi[] = {
#define FRAGSCOPE_RUNTIME_HOOK(symbol, api, kind) Api::k_##api,
#include "hooks/runtime_hook_list.inc"
#undef FRAGSCOPE_RUNTIME_HOOK
};
static_assert(sizeof(kDriverHookApi) / sizeof(kDriverHookApi[0]) == kDriverHookCount);
static_assert(sizeof(kRuntimeHookApi) / sizeof(kRuntimeHookApi[0]) == kRuntimeHookCount);
constexpr Api HookApi(DriverHookId id) { return kDriverHookApi[static_cast<size_t>(id)]; }
constexpr Api HookApi(RuntimeHookId id) { return kRuntimeHookApi[static_cast<size_t>(id)]; }

// The driver hook exported as `symbol`, or nullptr. Fast for names not starting with "cu".
const DriverHook* FindDriverHookBySymbol(const char* symbol);

// The hook whose wrapper should stand in for `real`, which a lookup of `base` at `version` with
// `flags` returned: first the tracked ABI whose exported symbol in libcuda is `real` itself,
// else the version map's answer. nullptr when `base` is not wrapped.
const DriverHook* DriverHookForLookup(const char* base, int version, uint64_t flags, void* real);

// The resolved real pointers, read by every wrapper call (hook_table.cc). Hidden: a wrapper
// loads its pointer with one PC-relative instruction, no GOT and no call.
extern __attribute__((visibility("hidden"))) constinit std::atomic<void*>
    g_driver_real[kDriverHookCount];
extern __attribute__((visibility("hidden"))) constinit std::atomic<void*>
    g_runtime_real[kRuntimeHookCount][kRuntimeAbiCount];
void* DriverRealSlow(DriverHookId id);
void* RuntimeRealSlow(RuntimeHookId id, int abi);

// Real driver function behind a wrapper: the pointer a lookup returned, else the next
// definition after the agent (RTLD_NEXT), else the symbol in libcuda. nullptr if none.
// Inline: after the first call it is one load (acquire is a plain load on x86-64).
inline void* DriverReal(DriverHookId id) {
  void* real = g_driver_real[static_cast<size_t>(id)].load(std::memory_order_acquire);
  return __builtin_expect(real != nullptr, 1) ? real : DriverRealSlow(id);
}
// Remembers `real` as the function behind hook `id` (first pointer wins; our own ignored).
void SetDriverReal(DriverHookId id, void* real);

// The real pointer if already resolved, else nullptr (one load, never a call).
inline void* DriverRealIfKnown(DriverHookId id) {
  return g_driver_real[static_cast<size_t>(id)].load(std::memory_order_acquire);
}

// Real runtime function behind wrapper (`id`, `abi`); nullptr when the process has no runtime
// with that version. Inline like DriverReal.
inline void* RuntimeReal(RuntimeHookId id, int abi) {
  void* real = g_runtime_real[static_cast<size_t>(id)][abi].load(std::memory_order_acquire);
  return __builtin_expect(real != nullptr, 1) ? real : RuntimeRealSlow(id, abi);
}

// The same without resolving: nullptr until the first call through RuntimeReal found it.
inline void* RuntimeRealIfKnown(RuntimeHookId id, int abi) {
  return g_runtime_real[static_cast<size_t>(id)][abi].load(std::memory_order_acquire);
}

// The agent's own code range (set at initialization); speeds up IsAgentWrapper.
void SetAgentTextRange(uintptr_t begin, uintptr_t end);

// True if `p` is one of our wrappers (an answer must never be wrapped twice).
bool IsAgentWrapper(void* p);

// Lookup result wrapping shared by cuGetProcAddress and cudaGetDriverEntryPoint: returns the
// wrapper to hand out instead of `real` (and records `real`), or `real` itself.
void* WrapDriverLookup(const char* base, int version, uint64_t flags, void* real);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_HOOK_TABLE_H_
