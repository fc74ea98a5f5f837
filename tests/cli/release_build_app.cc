// A program built the way release builds are (-O2 -fomit-frame-pointer, tests/cli/CMakeLists.txt)
// whose failing cudaMalloc sits four calls below main: the agent's stack of that OOM must reach
// main through frames that keep no frame pointer.
#include <cuda_runtime_api.h>

#include <cstdio>

namespace {

// noinline, and work after each call, so every level is a real frame and no call a tail call.
[[gnu::noinline]] int AllocateWeights(size_t bytes, void** out) {
  const cudaError_t e = cudaMalloc(out, bytes);
  asm volatile("" ::: "memory");
  return static_cast<int>(e);
}

[[gnu::noinline]] int BuildLayer(int layer, void** out) {
  volatile size_t bytes = (size_t{1} << 30) * static_cast<size_t>(layer + 1);
  const int e = AllocateWeights(bytes, out);
  asm volatile("" ::: "memory");
  return e + layer * 0;
}

[[gnu::noinline]] int Train(int layers) {
  void* weights[8] = {};
  int failed = 0;
  for (int i = 0; i < layers && failed == 0; ++i) failed = BuildLayer(i, &weights[i]);
  asm volatile("" : : "r"(weights) : "memory");
  return failed;
}

}  // namespace

int main() {
  const int e = Train(4);
  if (e != 0) {
    std::fprintf(stderr, "release_build_app: out of memory (error %d)\n", e);
    return 1;
  }
  return 0;
}
