// Virtual memory management and IPC on the fake driver.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "driver_fixture.h"

namespace fakecuda_test {
namespace {

class VmmTest : public DriverTest {
 protected:
  CUmemAllocationProp Prop(bool exportable = false) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
  }
  void Access(CUdeviceptr ptr, size_t size) {
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = 0;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_EQ(cuMemSetAccess(ptr, size, &desc, 1), CUDA_SUCCESS);
  }
};

TEST_F(VmmTest, GranularityIsTwoMiB) {
  CUmemAllocationProp prop = Prop();
  size_t granularity = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(granularity, kPage);
}

TEST_F(VmmTest, PhysicalMemoryFreedOnlyAfterReleaseAndLastUnmap) {
  const uint64_t used = fakecuda_used_bytes(0);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 8 * kPage, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used);  // a reservation costs no physical memory
  CUmemAllocationProp prop = Prop();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, kPage + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemCreate(&h, 2 * kPage, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + 2 * kPage);
  // The same handle mapped twice counts once.
  ASSERT_EQ(cuMemMap(va, 2 * kPage, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va + 4 * kPage, 2 * kPage, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va + kPage, 2 * kPage, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // overlap
  EXPECT_EQ(fakecuda_used_bytes(0), used + 2 * kPage);
  Access(va, 2 * kPage);
  Access(va + 4 * kPage, 2 * kPage);
  // Both mappings show the same bytes.
  const char text[] = "shared physical page";
  ASSERT_EQ(cuMemcpyHtoD(va + 100, text, sizeof text), CUDA_SUCCESS);
  char back[sizeof text] = {};
  ASSERT_EQ(cuMemcpyDtoH(back, va + 4 * kPage + 100, sizeof back), CUDA_SUCCESS);
  EXPECT_STREQ(back, text);

  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + 2 * kPage);  // still mapped
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemUnmap(va, 2 * kPage), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + 2 * kPage);
  EXPECT_EQ(cuMemAddressFree(va, 8 * kPage), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(cuMemUnmap(va + 4 * kPage, 2 * kPage), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
  EXPECT_EQ(cuMemAddressFree(va, 8 * kPage), CUDA_SUCCESS);
}

TEST_F(VmmTest, RetainedHandleKeepsMemoryAfterUnmap) {
  const uint64_t used = fakecuda_used_bytes(0);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, kPage, 0, 0, 0), CUDA_SUCCESS);
  CUmemAllocationProp prop = Prop();
  CUmemGenericAllocationHandle h = 0, again = 0;
  ASSERT_EQ(cuMemCreate(&h, kPage, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, kPage, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va)), CUDA_SUCCESS);
  EXPECT_EQ(again, h);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va, kPage), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + kPage);  // the retain still holds it
  ASSERT_EQ(cuMemRelease(again), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
  ASSERT_EQ(cuMemAddressFree(va, kPage), CUDA_SUCCESS);
}

TEST_F(VmmTest, UnsupportedHandleTypesAndOomDoNotLeak) {
  const uint64_t used = fakecuda_used_bytes(0);
  CUmemAllocationProp prop = Prop();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, kPage, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
  prop = Prop();
  EXPECT_EQ(cuMemCreate(&h, 2ull << 30, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(fakecuda_used_bytes(0), used);
}

TEST_F(VmmTest, ExportedHandleImportsAsTheSamePhysicalMemory) {
  const uint64_t used = fakecuda_used_bytes(0);
  CUmemAllocationProp prop = Prop(true);
  CUmemGenericAllocationHandle h = 0, imported = 0;
  ASSERT_EQ(cuMemCreate(&h, kPage, &prop, 0), CUDA_SUCCESS);
  int fd = -1;
  ASSERT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(intptr_t{fd}),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  close(fd);
  EXPECT_NE(imported, h);
  EXPECT_EQ(fakecuda_used_bytes(0), used + kPage);  // counted once
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used + kPage);  // the import keeps it alive
  ASSERT_EQ(cuMemRelease(imported), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), used);

  CUmemAllocationProp plain = Prop(false);
  ASSERT_EQ(cuMemCreate(&h, kPage, &plain, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(VmmTest, IpcHandlesOpenInAnotherProcessOnly) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, 3 * kMiB), CUDA_SUCCESS);
  CUipcMemHandle handle;
  ASSERT_EQ(cuIpcGetMemHandle(&handle, p), CUDA_SUCCESS);
  EXPECT_EQ(cuIpcGetMemHandle(&handle, p + 1), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr opened = 0;
  EXPECT_EQ(cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            CUDA_ERROR_INVALID_CONTEXT);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child is "another process": it may open the handle; the mapping is not charged.
    uint64_t used = fakecuda_used_bytes(0);
    int code = 0;
    if (cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
      code |= 1;
    if (fakecuda_used_bytes(0) != used) code |= 2;
    fakecuda_live_entry entries[8];
    size_t n = fakecuda_live_list(entries, 8);
    bool found = false;
    for (size_t i = 0; i < n && i < 8; ++i) {
      found |= entries[i].kind == FAKECUDA_KIND_IPC && entries[i].address == opened &&
               entries[i].size == 3 * kMiB;
    }
    if (!found) code |= 4;
    if (cuIpcCloseMemHandle(opened) != CUDA_SUCCESS) code |= 8;
    if (cuIpcCloseMemHandle(opened) != CUDA_ERROR_INVALID_VALUE) code |= 16;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

}  // namespace
}  // namespace fakecuda_test
