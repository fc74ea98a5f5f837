// A device's primary context made current on an agent thread that has none (the injected
// import's helper thread, the drain thread at a wake), for the driver calls that need one
// (cuMemGetAddressRange, cuMemGetInfo).
//
// Only a primary context the program has active already (PyTorch's and the runtime's):
// retaining an inactive one would create it, taking device memory the program never asked
// for. The retain goes through the real function (in an injected agent the exported one is
// patched and would be recorded).
//
// Thread safety: one object per thread, on its stack; the destructor clears the thread's
// current context and releases the retain.
#ifndef FRAGSCOPE_INTERPOSE_PRIMARY_CONTEXT_H_
#define FRAGSCOPE_INTERPOSE_PRIMARY_CONTEXT_H_

#include <cuda.h>

#include <cstdint>

namespace fragscope::agent {

class PrimaryContextScope {
 public:
  explicit PrimaryContextScope(int32_t device);
  ~PrimaryContextScope();
  PrimaryContextScope(const PrimaryContextScope&) = delete;
  PrimaryContextScope& operator=(const PrimaryContextScope&) = delete;

  // Whether the device's primary context is current on this thread now.
  bool ok() const { return current_; }

 private:
  CUdevice device_ = 0;
  bool retained_ = false;
  bool current_ = false;
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_PRIMARY_CONTEXT_H_
