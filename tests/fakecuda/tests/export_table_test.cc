// cuGetExportTable: the private tables NVIDIA's runtime needs, the keyed hash of its integrity
// check, context-local storage whose destructors run when a context goes away, and the
// primary context that the runtime makes current before it retains it.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "driver_fixture.h"
#include "hmac_md2.h"

namespace fakecuda_test {
namespace {

CUuuid Uuid(const char* hex) {
  CUuuid id{};
  for (int i = 0; i < 16; ++i) {
    unsigned byte = 0;
    std::sscanf(hex + 2 * i, "%2x", &byte);
    id.bytes[i] = static_cast<char>(byte);
  }
  return id;
}

const CUuuid kRuntimeInterface = Uuid("6bd5fb6c5bf4e74a8987d93912fd9df9");
const CUuuid kLocalStorage = Uuid("c693336e1121df11a8c368f355d89593");
const CUuuid kIntegrity = Uuid("d4082055bde6704b8d34ba123c66e1f2");
const CUuuid kToolsContext = Uuid("21318c60971432488ca641ff7324c8f2");
const CUuuid kToolsTls = Uuid("42d85a8123f6cb478298f6e78a3aecdc");
const CUuuid kCluster = Uuid("1734dc26800d47458726c0f1e7dd8bca");

void* const* Table(const CUuuid& id) {
  const void* table = nullptr;
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_SUCCESS);
  return static_cast<void* const*>(table);
}

using GetPrimaryFn = CUresult (*)(CUcontext*, CUdevice);
using StoragePutFn = CUresult (*)(CUcontext, void*, void*, void (*)(CUcontext, void*, void*));
using StorageDeleteFn = CUresult (*)(CUcontext, void*);
using StorageGetFn = CUresult (*)(void**, CUcontext, void*);
using IntegrityFn = CUresult (*)(uint32_t, uint64_t, uint64_t*);
using ContextIdFn = CUresult (*)(CUcontext, uint64_t*);
using CurrentContextFn = CUresult (*)(CUcontext*);
using ClusterListFn = CUresult (*)(uint8_t**, void**);

std::string Hex(const uint8_t* bytes, size_t n) {
  std::string out;
  char two[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(two, sizeof two, "%02x", bytes[i]);
    out += two;
  }
  return out;
}

std::string Md2Hex(const std::string& text) {
  uint8_t digest[16];
  fakecuda::Md2(reinterpret_cast<const uint8_t*>(text.data()), text.size(), digest);
  return Hex(digest, 16);
}

TEST(HmacMd2Test, Rfc1319TestSuite) {
  EXPECT_EQ(Md2Hex(""), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(Md2Hex("a"), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(Md2Hex("abc"), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(Md2Hex("message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(
      Md2Hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
      "d5976f79d83d3a0dc9806c3c66f3efd8");
}

// The sample the ZLUDA project publishes for this hash (its anti_zluda_hash_impl_sample test):
// driver 12020, runtime 0x2b4a, pid 0x4d08, thread 0x2b78, three table addresses, a time and
// one device (UUID, PCI domain 0, bus 4, device 0).
TEST(HmacMd2Test, IntegrityCheckSample) {
  std::vector<uint8_t> message;
  auto put = [&](uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) message.push_back(static_cast<uint8_t>(value >> (8 * i)));
  };
  put(12020, 4);
  put(0x2B4A, 4);
  put(0x4D08, 4);
  put(0x2B78, 4);
  put(0x00007FF8C80717F0, 8);
  put(0x00007FF8C825E4B0, 8);
  put(0x00007FF8C7DD0AD0, 8);
  put(0x64A365EE, 8);
  for (uint8_t b : {0x67, 0x22, 0xCB, 0xCF, 0xC6, 0x61, 0xF2, 0x92, 0x74, 0xD6, 0xED, 0x23, 0x2A,
                    0x32, 0x13, 0x1C}) {
    message.push_back(b);
  }
  put(0, 4);
  put(4, 4);
  put(0, 4);
  const uint8_t key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                           0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
  uint8_t mac[16];
  fakecuda::HmacMd2(key, message.data(), message.size(), mac);
  // The expected value as a little-endian 128-bit number: 0xEAF1313342BFCD84A7C34628F214707A.
  EXPECT_EQ(Hex(mac, 16), "7a7014f22846c3a784cdbf423331f1ea");
}

class ExportTableTest : public DriverTest {
 protected:
  std::string log_path_;

  void SetUp() override {
    DriverTest::SetUp();
    char path[] = "/tmp/fakecuda-export-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    log_path_ = path;
    setenv("FAKECUDA_LOOKUP_LOG", path, 1);
  }
  void TearDown() override {
    unsetenv("FAKECUDA_LOOKUP_LOG");
    unlink(log_path_.c_str());
    DriverTest::TearDown();
  }
  std::string Log() {
    std::ifstream in(log_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(ExportTableTest, KnownTablesAndTheirSizes) {
  struct Known {
    const char* uuid;
    size_t slots;  // 0: no size header
  };
  for (const Known& k :
       {Known{"6bd5fb6c5bf4e74a8987d93912fd9df9", 13}, Known{"a094798c2e742e7493f20800200c0a66", 7},
        Known{"42d85a8123f6cb478298f6e78a3aecdc", 4}, Known{"c693336e1121df11a8c368f355d89593", 0},
        Known{"263e88607cd2614392f6bbd5006dfa7e", 4}, Known{"d4082055bde6704b8d34ba123c66e1f2", 3},
        Known{"21318c60971432488ca641ff7324c8f2", 96},
        Known{"1734dc26800d47458726c0f1e7dd8bca", 16}}) {
    void* const* table = Table(Uuid(k.uuid));
    ASSERT_NE(table, nullptr) << k.uuid;
    if (k.slots) {
      EXPECT_EQ(reinterpret_cast<size_t>(table[0]), k.slots * sizeof(void*)) << k.uuid;
      for (size_t i = 1; i < k.slots; ++i) EXPECT_NE(table[i], nullptr) << k.uuid << " " << i;
    }
  }
  EXPECT_EQ(Log(), "");
}

TEST_F(ExportTableTest, UnknownTablesAreRefusedAndLogged) {
  const void* table = reinterpret_cast<const void*>(1);
  CUuuid unknown = Uuid("00112233445566778899aabbccddeeff");
  EXPECT_EQ(cuGetExportTable(&table, &unknown), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(table, nullptr);
  // The log-sink table is refused too, on purpose and without a line: every runtime goes on.
  CUuuid log_sink = Uuid("f8cff95121468b4eb9e2fb469e7c0dd9");
  EXPECT_EQ(cuGetExportTable(&table, &log_sink), CUDA_ERROR_NOT_SUPPORTED);
  // So is cuDNN's nvrtc compute-cache table: cuDNN then disables that cache.
  CUuuid compute_cache = Uuid("da9151d33ae6cc41a5c04f26d533e328");
  EXPECT_EQ(cuGetExportTable(&table, &compute_cache), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(table, nullptr);
  EXPECT_EQ(cuGetExportTable(nullptr, &unknown), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetExportTable(&table, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Log(), "cuGetExportTable 00112233445566778899aabbccddeeff unknown table\n");
  // A slot nobody was seen calling answers not-supported and names itself.
  using Unserved = CUresult (*)();
  EXPECT_EQ(reinterpret_cast<Unserved>(Table(kIntegrity)[2])(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(Log().find("cuGetExportTable d4082055bde6704b8d34ba123c66e1f2 slot 2 unserved slot "
                       "called\n"),
            std::string::npos);
}

std::vector<std::string>* destructor_calls = nullptr;

void RecordDestructor(CUcontext ctx, void* key, void* value) {
  // The runtime's destructor frees what it made through the driver: the context still works.
  CUcontext current = nullptr;
  cuCtxGetCurrent(&current);
  CUdeviceptr p = 0;
  CUresult r = cuCtxPushCurrent(ctx);
  if (r == CUDA_SUCCESS) r = cuMemAlloc(&p, 4096);
  if (r == CUDA_SUCCESS) r = cuMemFree(p);
  cuCtxPopCurrent(nullptr);
  destructor_calls->push_back(std::string(static_cast<const char*>(key)) + "=" +
                              static_cast<const char*>(value) + (r == CUDA_SUCCESS ? "" : " !"));
}

TEST_F(ExportTableTest, LocalStoragePutGetDelete) {
  void* const* t = Table(kLocalStorage);
  auto put = reinterpret_cast<StoragePutFn>(t[0]);
  auto erase = reinterpret_cast<StorageDeleteFn>(t[1]);
  auto get = reinterpret_cast<StorageGetFn>(t[2]);
  char key[] = "k", other[] = "o", value[] = "v";
  void* out = nullptr;
  EXPECT_EQ(get(&out, nullptr, key), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(put(nullptr, key, value, nullptr), CUDA_SUCCESS);  // NULL: the current context
  ASSERT_EQ(get(&out, nullptr, key), CUDA_SUCCESS);
  EXPECT_EQ(out, value);
  ASSERT_EQ(get(&out, primary_, key), CUDA_SUCCESS);
  EXPECT_EQ(out, value);
  EXPECT_EQ(get(&out, primary_, other), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(erase(primary_, key), CUDA_SUCCESS);
  EXPECT_EQ(erase(primary_, key), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(get(&out, nullptr, key), CUDA_ERROR_INVALID_HANDLE);
  // Without a current context (the runtime's first probe) the NULL context fails.
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(get(&out, nullptr, key), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(ExportTableTest, LocalStorageDestructorsRunWhenTheContextGoesAway) {
  std::vector<std::string> calls;
  destructor_calls = &calls;
  auto put = reinterpret_cast<StoragePutFn>(Table(kLocalStorage)[0]);
  auto get = reinterpret_cast<StorageGetFn>(Table(kLocalStorage)[2]);
  char key[] = "rt", value[] = "state";
  void* out = nullptr;

  // Primary reset (cudaDeviceReset): once, with the context still usable; the entry is gone.
  ASSERT_EQ(put(primary_, key, value, &RecordDestructor), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  EXPECT_EQ(calls, std::vector<std::string>{"rt=state"});
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, 0), CUDA_SUCCESS);
  EXPECT_EQ(get(&out, primary_, key), CUDA_ERROR_INVALID_HANDLE);

  // Release: only the last one destroys the context.
  ASSERT_EQ(put(primary_, key, value, &RecordDestructor), CUDA_SUCCESS);
  CUcontext again = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(calls.size(), 1u);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls.back(), "rt=state");

  // A created context: on destroy.
  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate(&created, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(put(nullptr, key, value, &RecordDestructor), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy(created), CUDA_SUCCESS);
  EXPECT_EQ(calls, (std::vector<std::string>{"rt=state", "rt=state", "rt=state"}));
  destructor_calls = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, 0), CUDA_SUCCESS);  // for TearDown
}

TEST_F(ExportTableTest, PrimaryContextMadeCurrentBeforeItIsRetained) {
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  const uint64_t idle = fakecuda_used_bytes(0);
  EXPECT_EQ(idle, 0u);
  // The runtime interface hands out the handle; no context exists yet, none is charged.
  CUcontext handle = nullptr;
  ASSERT_EQ(reinterpret_cast<GetPrimaryFn>(Table(kRuntimeInterface)[2])(&handle, 0), CUDA_SUCCESS);
  EXPECT_EQ(handle, primary_);
  unsigned flags = 0;
  int active = 1;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(fakecuda_used_bytes(0), 0u);
  // Made current, it exists (overhead charged) and works before any retain.
  ASSERT_EQ(cuCtxSetCurrent(handle), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), 10 * kMiB);
  CUdevice dev = -1;
  EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  // The retain that follows does not charge it twice; the release at exit frees it.
  CUcontext retained = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&retained, 0), CUDA_SUCCESS);
  EXPECT_EQ(retained, handle);
  EXPECT_EQ(fakecuda_used_bytes(0), 10 * kMiB);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_used_bytes(0), 0u);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, 0), CUDA_SUCCESS);  // for TearDown
}

TEST_F(ExportTableTest, IntegrityCheckAnswers) {
  auto check = reinterpret_cast<IntegrityFn>(Table(kIntegrity)[1]);
  uint64_t out[2] = {};
  ASSERT_EQ(check(13000, 1700000000, out), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0x3341181C03CB675Cull);
  EXPECT_EQ(out[1], 0x8ED383AA1F4CD1E8ull);
  ASSERT_EQ(check(13001, 1700000000, out), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0x1841181C03CB675Cull);
  EXPECT_EQ(out[1], 0x8ED383AA1F4CD1E8ull);
  // Versions ending in 2: a hash that depends on the time passed (and the process, thread and
  // devices), the same for the same inputs.
  uint64_t a[2], b[2], c[2];
  ASSERT_EQ(check(13002, 1700000000, a), CUDA_SUCCESS);
  ASSERT_EQ(check(13002, 1700000000, b), CUDA_SUCCESS);
  ASSERT_EQ(check(13002, 1700000001, c), CUDA_SUCCESS);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_EQ(a[1], b[1]);
  EXPECT_NE(a[0], c[0]);
  EXPECT_EQ(check(13002, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ExportTableTest, ToolsContextIdsAreUniquePerContext) {
  auto id_of = reinterpret_cast<ContextIdFn>(Table(kToolsContext)[4]);
  uint64_t primary_id = 0, created_id = 0;
  ASSERT_EQ(id_of(primary_, &primary_id), CUDA_SUCCESS);
  unsigned long long driver_id = 0;
  ASSERT_EQ(cuCtxGetId(primary_, &driver_id), CUDA_SUCCESS);
  EXPECT_EQ(primary_id, driver_id);
  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate(&created, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(id_of(nullptr, &created_id), CUDA_SUCCESS);
  EXPECT_NE(created_id, primary_id);
  ASSERT_EQ(cuCtxDestroy(created), CUDA_SUCCESS);
  EXPECT_EQ(id_of(created, &created_id), CUDA_ERROR_INVALID_CONTEXT);
}

// cuBLASLt asks tools TLS slot 2 for the thread's current context and passes it on to table 8
// slot 4 to key its per-context state; a context left unwritten made that lookup fail.
TEST_F(ExportTableTest, ToolsTlsGivesTheCurrentContextForItsId) {
  auto current = reinterpret_cast<CurrentContextFn>(Table(kToolsTls)[2]);
  auto id_of = reinterpret_cast<ContextIdFn>(Table(kToolsContext)[4]);
  CUcontext ctx = reinterpret_cast<CUcontext>(1);  // stack garbage in cuBLASLt's frame
  ASSERT_EQ(current(&ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, primary_);
  uint64_t id = 0;
  unsigned long long driver_id = 0;
  ASSERT_EQ(id_of(ctx, &id), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetId(primary_, &driver_id), CUDA_SUCCESS);
  EXPECT_EQ(id, driver_id);

  // A pushed context is the current one; with none current the answer is NULL.
  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate(&created, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(current(&ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, created);
  ASSERT_EQ(cuCtxDestroy(created), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  ctx = reinterpret_cast<CUcontext>(1);
  ASSERT_EQ(current(&ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_EQ(current(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Log(), "");
}

// The cluster table exists (cuBLASLt calls slot 4 without a check) and slot 4 refuses, quietly,
// with the list cleared, so cuBLASLt takes its own path for a driver that cannot say.
TEST_F(ExportTableTest, ClusterTableRefusesItsSmListQuietly) {
  void* const* table = Table(kCluster);
  ASSERT_NE(table, nullptr);
  EXPECT_GT(reinterpret_cast<size_t>(table[0]), size_t{0x68});  // cuDNN's minimum
  auto list_of = reinterpret_cast<ClusterListFn>(table[4]);
  uint8_t byte = 7;
  uint8_t* list = &byte;
  void* handle = &byte;
  EXPECT_EQ(list_of(&list, &handle), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(list, nullptr);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(Log(), "");
  // The slot that would give the list back was never seen called: it names itself.
  using Unserved = CUresult (*)();
  EXPECT_EQ(reinterpret_cast<Unserved>(table[13])(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Log(),
            "cuGetExportTable 1734dc26800d47458726c0f1e7dd8bca slot 13 unserved slot called\n");
}

}  // namespace
}  // namespace fakecuda_test
