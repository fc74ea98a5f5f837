#include "hooks/driver_symbol_map.h"

#include <cstring>

namespace fragscope::agent {
namespace {

const VersionedDriverSymbol kVersionedSymbols[] = {
#define FRAGSCOPE_DRIVER_SYMBOL(base, version, per_thread, symbol) \
  {base, version, per_thread, symbol},
#include <fragscope/driver_symbols.inc>
#undef FRAGSCOPE_DRIVER_SYMBOL
};
constexpr size_t kCount = sizeof(kVersionedSymbols) / sizeof(kVersionedSymbols[0]);

}  // namespace

const VersionedDriverSymbol* VersionedDriverSymbols(size_t* count) {
  *count = kCount;
  return kVersionedSymbols;
}

const char* DriverSymbolForVersion(const char* base, int version, uint64_t flags) {
  const bool per_thread = (flags & kPerThreadDefaultStream) != 0;
  const VersionedDriverSymbol* plain = nullptr;
  const VersionedDriverSymbol* threaded = nullptr;
  for (const VersionedDriverSymbol& v : kVersionedSymbols) {
    if (v.version > version || strcmp(v.base, base) != 0) continue;
    // Sorted by version: the last match is the newest.
    if (v.per_thread == 0) {
      plain = &v;
    } else {
      threaded = &v;
    }
  }
  if (per_thread && threaded != nullptr) return threaded->symbol;
  return plain != nullptr ? plain->symbol : nullptr;
}

}  // namespace fragscope::agent
