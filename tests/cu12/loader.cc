// Links no CUDA library: dlopen()s each plugin given (plugin.cc, one linked against each
// runtime) with RTLD_LOCAL, as Python loads extension modules, and runs it once, so one process
// holds both runtimes outside the global scope (a cu12 PyTorch next to a cu13 CuPy).
//   cu12_loader PLUGIN SIZE [PLUGIN SIZE...]
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 3 || argc % 2 != 1) {
    std::fprintf(stderr, "usage: %s PLUGIN SIZE [PLUGIN SIZE...]\n", argv[0]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    void* handle = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      std::fprintf(stderr, "dlopen %s: %s\n", argv[i], dlerror());
      return 1;
    }
    using RunFn = int (*)(size_t);
    auto run = reinterpret_cast<RunFn>(dlsym(handle, "plugin_run"));
    if (!run || run(std::strtoull(argv[i + 1], nullptr, 10)) != 0) return 1;
  }
  return 0;
}
