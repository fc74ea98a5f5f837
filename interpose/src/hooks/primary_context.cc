#include "hooks/primary_context.h"

#include "hooks/driver_api.h"
#include "hooks/hook_table.h"

namespace fragscope::agent {

PrimaryContextScope::PrimaryContextScope(int32_t device) {
  const DriverCalls& d = Driver();
  auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(
      DriverReal(DriverHookId::k_cuDevicePrimaryCtxRetain));
  if (device < 0 || d.device_get == nullptr || d.primary_ctx_get_state == nullptr ||
      d.primary_ctx_release == nullptr || d.ctx_set_current == nullptr || retain == nullptr) {
    return;
  }
  unsigned int flags = 0;
  int active = 0;
  CUcontext context = nullptr;
  if (d.device_get(&device_, device) != CUDA_SUCCESS ||
      d.primary_ctx_get_state(device_, &flags, &active) != CUDA_SUCCESS || active == 0 ||
      retain(&context, device_) != CUDA_SUCCESS) {
    return;
  }
  retained_ = true;
  current_ = d.ctx_set_current(context) == CUDA_SUCCESS;
}

PrimaryContextScope::~PrimaryContextScope() {
  const DriverCalls& d = Driver();
  if (current_) d.ctx_set_current(nullptr);
  if (retained_) d.primary_ctx_release(device_);
}

}  // namespace fragscope::agent
