// A fake libnvidia-ml.so.1: the few NVML entry points PyTorch resolves (c10/cuda/driver_api.h,
// torch 2.15) and calls without checking that the library loaded. With expandable segments,
// PyTorch asks NVML whether the GPU has fabric memory before its first cuMemCreate and calls a
// null pointer where no NVML exists. The answers are those of a GPU without NVLink or fabric
// memory: every NVLink and fabric query "not supported", no other processes on the device.
// No nvml.h here (the CUDA toolkit packages do not ship it): the C ABI is declared below, and
// only pointers and plain integers cross it.
#include <cstdint>

namespace {

using NvmlReturn = int;  // nvmlReturn_t
constexpr NvmlReturn kSuccess = 0;
constexpr NvmlReturn kInvalidArgument = 2;
constexpr NvmlReturn kNotSupported = 3;

struct FakeDevice {
  int unused = 0;
};
FakeDevice g_device;

}  // namespace

extern "C" {

NvmlReturn nvmlInit_v2() { return kSuccess; }
NvmlReturn nvmlInit() { return kSuccess; }
NvmlReturn nvmlShutdown() { return kSuccess; }

NvmlReturn nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (bus_id == nullptr || device == nullptr) return kInvalidArgument;
  *device = &g_device;
  return kSuccess;
}

NvmlReturn nvmlDeviceGetNvLinkRemoteDeviceType(void*, unsigned int, int*) { return kNotSupported; }
NvmlReturn nvmlDeviceGetNvLinkRemotePciInfo_v2(void*, unsigned int, void*) { return kNotSupported; }

// No process is listed: the fake device's other users are FAKECUDA_OTHER_USED bytes, not PIDs.
NvmlReturn nvmlDeviceGetComputeRunningProcesses(void*, unsigned int* count, void*) {
  if (count == nullptr) return kInvalidArgument;
  *count = 0;
  return kSuccess;
}

NvmlReturn nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (version == nullptr) return kInvalidArgument;
  *version = 13000;  // as the fake driver's cuDriverGetVersion
  return kSuccess;
}

NvmlReturn nvmlDeviceGetGpuFabricInfoV(void*, void*) { return kNotSupported; }

}  // extern "C"
