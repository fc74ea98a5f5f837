#include "driver_table.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace fakecuda_rt {
namespace {

struct Lookup {
  const char* name;
  int version;
  unsigned flags;
};

// The recorded sequence, in order (generated from data/cudart13-driver-lookups.txt).
constexpr Lookup kSequence[] = {
#define FAKECUDA_LOOKUP(name, version, flags) {name, version, flags},
#include "lookup_sequence.inc"
#undef FAKECUDA_LOOKUP
};

std::string Key(const char* name, int version, unsigned flags) {
  return std::string(name) + "@" + std::to_string(version) + "/" + std::to_string(flags);
}

DriverApi* Load() {
  // RTLD_NOW | RTLD_LOCAL like the real runtime; RUNPATH $ORIGIN finds the fake driver.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    // A dlopen interceptor (sanitizers) makes itself the caller, so our RUNPATH is not
    // searched: try the driver next to this library explicitly.
    Dl_info self;
    if (dladdr(reinterpret_cast<void*>(&LoadDriver), &self) && self.dli_fname) {
      std::string path = self.dli_fname;
      path = path.substr(0, path.rfind('/') + 1) + "libcuda.so.1";
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    }
  }
  if (!handle) return nullptr;
  auto entry = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
  if (!entry) return nullptr;
  // Lines up to and including the "cuGetProcAddress" self-lookups go through the dlsym'd
  // entry; everything after goes through what the @12000 self-lookup returned.
  std::unordered_map<std::string, void*> found;
  PFN_cuGetProcAddress_v12000 through = entry;
  PFN_cuGetProcAddress_v12000 self = nullptr;
  for (const Lookup& lookup : kSequence) {
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status;
    if (through(lookup.name, &pfn, lookup.version, lookup.flags, &status) == CUDA_SUCCESS) {
      found[Key(lookup.name, lookup.version, lookup.flags)] = pfn;
    }
    if (std::strcmp(lookup.name, "cuGetProcAddress") == 0 && lookup.version == 12000) {
      self = reinterpret_cast<PFN_cuGetProcAddress_v12000>(pfn);
      if (!self) return nullptr;
      through = self;
    }
  }
  if (!self) return nullptr;
  auto* api = new DriverApi();
  api->getProcAddress = self;
#define FAKECUDA_FILL(field, name, version, flags, suffix)                            \
  {                                                                                   \
    auto it = found.find(Key(#name, version, flags));                                 \
    api->field = it == found.end()                                                    \
                     ? nullptr                                                        \
                     : reinterpret_cast<PFN_##name##_v##version##suffix>(it->second); \
  }
  FAKECUDA_RUNTIME_DRIVER_FUNCTIONS(FAKECUDA_FILL)
#undef FAKECUDA_FILL
  return api;
}

}  // namespace

const DriverApi* LoadDriver() {
  static std::once_flag once;
  static const DriverApi* api = nullptr;
  std::call_once(once, [] { api = Load(); });
  return api;
}

}  // namespace fakecuda_rt
