// cuGetProcAddress(_v2): versions map to the ABI variants of cudaTypedefs.h, per-thread
// variants on request, documented failures; the legacy cuMemAlloc ABI really is 32-bit.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "driver_fixture.h"

namespace fakecuda_test {
namespace {

using ProcAddressTest = DriverTest;

void* Exported(const char* name) {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return handle ? dlsym(handle, name) : nullptr;
}

void* Lookup(const char* name, int version, cuuint64_t flags,
             CUdriverProcAddressQueryResult* status = nullptr) {
  void* pfn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult local;
  CUresult r = cuGetProcAddress(name, &pfn, version, flags, status ? status : &local);
  if (r != CUDA_SUCCESS) {
    EXPECT_EQ(pfn, nullptr);
  }
  return r == CUDA_SUCCESS ? pfn : nullptr;
}

TEST_F(ProcAddressTest, VersionsSelectTheMatchingAbi) {
  ASSERT_NE(Exported("cuMemAlloc"), nullptr);
  EXPECT_EQ(Lookup("cuMemAlloc", 2000, 0), Exported("cuMemAlloc"));
  EXPECT_EQ(Lookup("cuMemAlloc", 3020, 0), Exported("cuMemAlloc_v2"));
  EXPECT_EQ(Lookup("cuMemAlloc", 13000, 0), Exported("cuMemAlloc_v2"));
  EXPECT_EQ(Lookup("cuCtxCreate", 12000, 0), Exported("cuCtxCreate_v3"));
  EXPECT_EQ(Lookup("cuGetProcAddress", 11030, 0), Exported("cuGetProcAddress"));
  EXPECT_EQ(Lookup("cuGetProcAddress", 12000, 0), Exported("cuGetProcAddress_v2"));
  EXPECT_EQ(Lookup("cuIpcOpenMemHandle", 11000, 0), Exported("cuIpcOpenMemHandle_v2"));
}

TEST_F(ProcAddressTest, PerThreadFlagSelectsPtszVariants) {
  EXPECT_EQ(Lookup("cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            Exported("cuMemAllocAsync_ptsz"));
  EXPECT_EQ(Lookup("cuMemAllocAsync", 11020, 0), Exported("cuMemAllocAsync"));
  EXPECT_EQ(Lookup("cuMemcpyHtoD", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            Exported("cuMemcpyHtoD_v2_ptds"));
  // No per-thread variant: the plain one.
  EXPECT_EQ(Lookup("cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            Exported("cuMemAlloc_v2"));
}

TEST_F(ProcAddressTest, DocumentedFailures) {
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(Lookup("cuMemAllocAsync", 11000, 0, &status), nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(Lookup("cuNoSuchFunction", 13000, 0, &status), nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  void* pfn = nullptr;
  EXPECT_EQ(cuGetProcAddress(nullptr, &pfn, 13000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress("cuInit", &pfn, 13000, 7, nullptr), CUDA_ERROR_INVALID_VALUE);
}

// NVIDIA's libraries look up (and dlsym) driver names they never call, and give up when one is
// missing: every name the real driver has resolves, and the ones the fake does not implement
// answer CUDA_ERROR_NOT_SUPPORTED and say so in the lookup log.
TEST_F(ProcAddressTest, UnimplementedFunctionsResolveAndRefuse) {
  char log_path[] = "/tmp/fakecuda-unsupported-XXXXXX";
  int fd = mkstemp(log_path);
  ASSERT_GE(fd, 0);
  close(fd);
  setenv("FAKECUDA_LOOKUP_LOG", log_path, 1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  void* looked_up = Lookup("cuArrayCreate", 13000, 0, &status);
  ASSERT_NE(looked_up, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(looked_up, Exported("cuArrayCreate_v2"));
  for (const char* name : {"cuMulticastCreate", "cuGreenCtxCreate", "cuTensorMapEncodeTiled",
                           "cuStreamBatchMemOp_v2", "cuMemcpy2DAsync_v2", "cuLinkCreate_v2"}) {
    EXPECT_NE(Exported(name), nullptr) << name;
  }
  using ArrayCreate = CUresult (*)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
  CUarray array = nullptr;
  CUDA_ARRAY_DESCRIPTOR descriptor{};
  EXPECT_EQ(reinterpret_cast<ArrayCreate>(looked_up)(&array, &descriptor),
            CUDA_ERROR_NOT_SUPPORTED);
  unsetenv("FAKECUDA_LOOKUP_LOG");
  FILE* log = fopen(log_path, "r");
  ASSERT_NE(log, nullptr);
  char line[256];
  bool logged = false;
  while (fgets(line, sizeof line, log)) {
    logged |= std::string(line) == "unsupported cuArrayCreate_v2 called\n";
  }
  fclose(log);
  unlink(log_path);
  EXPECT_TRUE(logged);
}

TEST_F(ProcAddressTest, LegacyAbiReturns32BitAddresses) {
  using LegacyAlloc = CUresult (*)(unsigned int*, unsigned int);
  using LegacyFree = CUresult (*)(unsigned int);
  auto alloc = reinterpret_cast<LegacyAlloc>(Lookup("cuMemAlloc", 2000, 0));
  auto release = reinterpret_cast<LegacyFree>(Lookup("cuMemFree", 2000, 0));
  ASSERT_NE(alloc, nullptr);
  ASSERT_NE(release, nullptr);
  unsigned int p = 0;
  ASSERT_EQ(alloc(&p, 4096), CUDA_SUCCESS);
  EXPECT_NE(p, 0u);
  std::vector<fakecuda_live_entry> live(fakecuda_live_list(nullptr, 0));
  fakecuda_live_list(live.data(), live.size());
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].kind, FAKECUDA_KIND_LEGACY);
  EXPECT_EQ(live[0].address, p);
  // Host-backed like every allocation.
  const int value = 42;
  ASSERT_EQ(cuMemcpyHtoD(CUdeviceptr{p}, &value, sizeof value), CUDA_SUCCESS);
  EXPECT_EQ(release(p), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_count(0), 0u);
}

TEST_F(ProcAddressTest, ErrorNamesAndStrings) {
  const char* text = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_NE(std::string(text).find("memory"), std::string::npos);
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(123456), &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
}

}  // namespace
}  // namespace fakecuda_test
