// Which exported driver symbol (one ABI) a lookup by base name, CUDA version and flags means,
// per the PFN_<name>_v<version> typedefs of cudaTypedefs.h (generated into
// <fragscope/driver_symbols.inc> by scripts/gen-driver-symbols.py).
//
// Thread safety: pure functions over constant data.
#ifndef FRAGSCOPE_INTERPOSE_DRIVER_SYMBOL_MAP_H_
#define FRAGSCOPE_INTERPOSE_DRIVER_SYMBOL_MAP_H_

#include <cstddef>
#include <cstdint>

namespace fragscope::agent {

// cuGetProcAddress flag CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
inline constexpr uint64_t kPerThreadDefaultStream = 2;

// The exported symbol cuGetProcAddress(base, version, flags) returns: the newest ABI whose
// version is <= `version` (cuMemAlloc @3020 -> cuMemAlloc_v2, @2000 -> cuMemAlloc), its
// per-thread export when flags has kPerThreadDefaultStream and one exists. nullptr if the
// header knows no ABI of `base` that old.
const char* DriverSymbolForVersion(const char* base, int version, uint64_t flags);

// One line of the generated map.
struct VersionedDriverSymbol {
  const char* base;
  int version;
  int per_thread;
  const char* symbol;
};
// All lines, sorted by (base, version, per_thread).
const VersionedDriverSymbol* VersionedDriverSymbols(size_t* count);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_DRIVER_SYMBOL_MAP_H_
