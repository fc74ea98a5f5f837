// Opens the CUDA runtime with dlopen(RTLD_LOCAL), allocates, frees, closes it, and repeats: the
// agent must not keep pointers into a runtime that went away. Not linked with the runtime, so
// dlclose really unloads it. Prints "events N" (successful allocations + frees).
//
//   dlcycle_app ROUNDS
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

namespace {

using MallocFn = cudaError_t (*)(void**, size_t);
using FreeFn = cudaError_t (*)(void*);

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20;
  unsigned long long events = 0, failures = 0, unloaded = 0;
  for (int r = 0; r < rounds; ++r) {
    void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      std::printf("dlopen: %s\n", dlerror());
      return 2;
    }
    auto cuda_malloc = reinterpret_cast<MallocFn>(dlsym(h, "cudaMalloc"));
    auto cuda_free = reinterpret_cast<FreeFn>(dlsym(h, "cudaFree"));
    if (cuda_malloc == nullptr || cuda_free == nullptr) return 3;
    for (size_t size : {size_t{1} << 20, size_t{4096}, size_t{3} << 21}) {
      void* p = nullptr;
      if (cuda_malloc(&p, size) == cudaSuccess && p != nullptr) {
        ++events;
        if (cuda_free(p) == cudaSuccess) ++events;
      } else {
        ++failures;
      }
    }
    if (dlclose(h) != 0) return 4;
    // Whether the runtime really went away (it does unless something pinned it).
    void* again = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (again == nullptr) {
      ++unloaded;
    } else {
      dlclose(again);
    }
  }
  std::printf("rounds %d unloaded %llu\n", rounds, unloaded);
  std::printf("events %llu failures %llu\n", events, failures);
  return failures == 0 ? 0 : 1;
}
