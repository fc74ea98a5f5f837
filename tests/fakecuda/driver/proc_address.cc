// cuGetProcAddress(_v2) and the error-string functions.
//
// A lookup (base name, requested cudaVersion, flags) is answered like the real driver: the
// newest ABI variant whose version is <= the request, as cudaTypedefs.h's PFN_<name>_v<N>
// typedefs define them (fragscope/driver_symbols.inc); flag
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM picks the _ptsz/_ptds variant when there is one.
// Every variant has a definition: the implemented ones, and for the rest a generated stub
// (unsupported_api.cc, from scripts/gen_unsupported_api.py) that answers
// CUDA_ERROR_NOT_SUPPORTED and logs "unsupported NAME" in FAKECUDA_LOOKUP_LOG when called.
// The returned pointer is the library's own definition (linked with -Bsymbolic-functions, so
// preloaded interposers never replace it).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "gpu_state.h"
#include "lookup_log.h"

extern "C" {
struct fakecuda_unsupported_entry {
  const char* name;
  void* function;
};
extern const fakecuda_unsupported_entry fakecuda_unsupported_table[];
extern const size_t fakecuda_unsupported_count;
}

namespace {

struct Variant {
  const char* name;
  int version;
  int per_thread;
  const char* symbol;
};

constexpr Variant kVariants[] = {
#define FRAGSCOPE_DRIVER_SYMBOL(name, version, per_thread, symbol) \
  {name, version, per_thread, symbol},
#include <fragscope/driver_symbols.inc>
#undef FRAGSCOPE_DRIVER_SYMBOL
};

struct Export {
  const char* name;
  void* function;
};

const Export kExports[] = {
#define FAKECUDA_EXPORT(fn) {#fn, reinterpret_cast<void*>(&fn)},
#include "driver_export_table.inc"
#undef FAKECUDA_EXPORT
};

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};

const ErrorText kErrors[] = {
#define FAKECUDA_DRIVER_ERROR(code, name, text) {code, name, text},
#include "error_tables.inc"
};

template <typename Entry>
void* FindIn(const Entry* first, const Entry* last, const char* symbol) {
  auto it = std::lower_bound(first, last, symbol, [](const Entry& e, const char* s) {
    return std::strcmp(e.name, s) < 0;
  });
  return it != last && std::strcmp(it->name, symbol) == 0 ? it->function : nullptr;
}

void* FindExport(const char* symbol) {
  if (void* f = FindIn(std::begin(kExports), std::end(kExports), symbol)) return f;
  return FindIn(fakecuda_unsupported_table, fakecuda_unsupported_table + fakecuda_unsupported_count,
                symbol);
}

void LogLookup(const char* symbol, int version, cuuint64_t flags) {
  char line[512];
  std::snprintf(line, sizeof line, "%s %d %llu", symbol, version,
                static_cast<unsigned long long>(flags));
  fakecuda::AppendToLookupLog(line);
}

CUresult Lookup(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol) LogLookup(symbol, cudaVersion, flags);
  if (pfn) *pfn = nullptr;
  if (!symbol || !pfn || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto first =
      std::lower_bound(std::begin(kVariants), std::end(kVariants), symbol,
                       [](const Variant& v, const char* s) { return std::strcmp(v.name, s) < 0; });
  const Variant* plain = nullptr;
  const Variant* per_thread = nullptr;
  bool known = false;
  for (auto it = first; it != std::end(kVariants) && std::strcmp(it->name, symbol) == 0; ++it) {
    known = true;
    if (it->version > cudaVersion) continue;
    (it->per_thread ? per_thread : plain) = it;  // sorted by version: the last one is newest
  }
  const Variant* chosen = plain;
  if (flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM && per_thread) chosen = per_thread;
  void* function = chosen ? FindExport(chosen->symbol) : nullptr;
  if (!function) {
    if (status) {
      *status = known && !chosen ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                 : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  *pfn = function;
  return CUDA_SUCCESS;
}

const ErrorText* FindError(CUresult error) {
  for (const ErrorText& e : kErrors) {
    if (e.code == static_cast<int>(error)) return &e;
  }
  return nullptr;
}

}  // namespace

void fakecuda::AppendToLookupLog(const char* line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const char* path = std::getenv("FAKECUDA_LOOKUP_LOG");
  if (!path || !*path) return;
  if (FILE* log = std::fopen(path, "ae")) {
    std::fprintf(log, "%s\n", line);
    std::fclose(log);
  }
}

// Called by every generated stub (unsupported_api.cc).
extern "C" int fakecuda_unsupported_call(const char* name) {
  char line[256];
  std::snprintf(line, sizeof line, "unsupported %s called", name);
  fakecuda::AppendToLookupLog(line);
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return Lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return Lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = FindError(error);
  *pStr = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = FindError(error);
  *pStr = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
