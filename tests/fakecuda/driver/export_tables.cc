// cuGetExportTable: the private tables NVIDIA's runtime (libcudart, and the copies linked
// statically into cuBLAS, cuBLASLt and cuDNN) asks the driver for before any other work.
//
// What each table is for, which slots the runtime calls and what it must get back was measured
// by running NVIDIA's runtime 13.0 and 12.9 and PyTorch's wheels over this fake; the layouts and
// slot meanings agree with the public ZLUDA project (github.com/vosen/ZLUDA, dark_api), which
// also documents the integrity check's keyed hash. tests/fakecuda/README.md lists the tables.
//
// Every slot of a served table is a callable function: the slots nobody was seen calling answer
// CUDA_ERROR_NOT_SUPPORTED and say so in FAKECUDA_LOOKUP_LOG, so a runtime that starts calling
// one shows up in the log instead of jumping through a null pointer.
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "gpu_state.h"
#include "hmac_md2.h"
#include "lookup_log.h"

using namespace fakecuda;

namespace {

using Lock = std::lock_guard<std::mutex>;

// --- the log of what the fake does not serve ------------------------------------------------

void LogExportTableLine(const char* what, const CUuuid* id, int slot) {
  char line[128];
  int n = std::snprintf(line, sizeof line, "cuGetExportTable ");
  for (int i = 0; i < 16; ++i) {
    n += std::snprintf(line + n, sizeof line - n, "%02x", static_cast<unsigned char>(id->bytes[i]));
  }
  if (slot >= 0) n += std::snprintf(line + n, sizeof line - n, " slot %d", slot);
  std::snprintf(line + n, sizeof line - n, " %s", what);
  AppendToLookupLog(line);
}

// --- table identities -----------------------------------------------------------------------

constexpr CUuuid MakeUuid(const char (&hex)[33]) {
  CUuuid id{};
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (int i = 0; i < 16; ++i) {
    id.bytes[i] = static_cast<char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return id;
}

// UUID bytes in the order cuGetExportTable receives them.
constexpr CUuuid kLogSinkId = MakeUuid("f8cff95121468b4eb9e2fb469e7c0dd9");
constexpr CUuuid kRuntimeInterfaceId = MakeUuid("6bd5fb6c5bf4e74a8987d93912fd9df9");
constexpr CUuuid kCallbackHooksId = MakeUuid("a094798c2e742e7493f20800200c0a66");
constexpr CUuuid kToolsTlsId = MakeUuid("42d85a8123f6cb478298f6e78a3aecdc");
constexpr CUuuid kLocalStorageId = MakeUuid("c693336e1121df11a8c368f355d89593");
constexpr CUuuid kContextCheckId = MakeUuid("263e88607cd2614392f6bbd5006dfa7e");
constexpr CUuuid kIntegrityId = MakeUuid("d4082055bde6704b8d34ba123c66e1f2");
constexpr CUuuid kToolsContextId = MakeUuid("21318c60971432488ca641ff7324c8f2");
constexpr CUuuid kClusterId = MakeUuid("1734dc26800d47458726c0f1e7dd8bca");
constexpr CUuuid kComputeCacheId = MakeUuid("da9151d33ae6cc41a5c04f26d533e328");

bool SameUuid(const CUuuid& a, const CUuuid& b) { return std::memcmp(a.bytes, b.bytes, 16) == 0; }

// --- slots nobody was seen calling ----------------------------------------------------------

template <const CUuuid* Id, int Slot>
CUresult UnservedSlot() {
  LogExportTableLine("unserved slot called", Id, Slot);
  return CUDA_ERROR_NOT_SUPPORTED;
}

// A table of `N` slots: slot 0 holds the table's size in bytes when `sized`, every other slot
// an UnservedSlot until the table's builder puts a real function there.
template <const CUuuid* Id, size_t N>
std::array<void*, N> MakeTable(bool sized) {
  std::array<void*, N> table{};
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((table[I] = reinterpret_cast<void*>(&UnservedSlot<Id, static_cast<int>(I)>)), ...);
  }
  (std::make_index_sequence<N>{});
  if (sized) table[0] = reinterpret_cast<void*>(N * sizeof(void*));
  return table;
}

// --- table 2: the runtime interface ---------------------------------------------------------

// Slot 2, once per device at start-up: the device's primary context handle. It is not
// activated here; NVIDIA's runtime makes it current (cuCtxSetCurrent activates it) and then
// retains it.
CUresult GetPrimaryContext(CUcontext* pctx, CUdevice dev) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = reinterpret_cast<CUcontext>(&s.devices[dev].primary);
  return CUDA_SUCCESS;
}

// Slot 12, once at start-up by PyTorch's runtime; what it reports is not known. Success
// was enough.
CUresult RuntimeInterfaceSlot12() { return CUDA_SUCCESS; }

// --- table 3: tools callback hooks ----------------------------------------------------------

// Slots 2 and 6 hand the runtime buffers of the driver's for its tools callbacks.
void CallbackHooksSlot2(void** buffer, size_t* size) {
  alignas(64) static unsigned char space[1024 * sizeof(void*)];
  *buffer = space;
  *size = 1024;
}

void CallbackHooksSlot6(void** buffer, size_t* size) {
  alignas(64) static unsigned char space[64];
  *buffer = space;
  *size = 14;
}

// --- table 5: context-local storage ---------------------------------------------------------

// Resolves ctx NULL to the current context; nullptr when there is none or it is dead.
Context* StorageContextLocked(State& s, CUcontext handle) {
  Context* ctx = handle ? reinterpret_cast<Context*>(handle) : CurrentContext();
  return IsLiveContextLocked(s, ctx) ? ctx : nullptr;
}

CUresult StoragePut(CUcontext handle, void* key, void* value, LocalStorageDestructor destructor) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = StorageContextLocked(s, handle);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  ctx->local_storage[key] = LocalStorageEntry{value, destructor};
  return CUDA_SUCCESS;
}

CUresult StorageDelete(CUcontext handle, void* key) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = StorageContextLocked(s, handle);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  return ctx->local_storage.erase(key) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult StorageGet(void** value, CUcontext handle, void* key) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = StorageContextLocked(s, handle);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  auto it = ctx->local_storage.find(key);
  if (it == ctx->local_storage.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = it->second.value;
  return CUDA_SUCCESS;
}

// --- table 6: context checks ----------------------------------------------------------------

// Slot 2 at context set-up and reset: the flag the runtime reads stays 0 (a context of its
// own, not one wrapped by another layer).
CUresult ContextCheckSlot2(CUcontext, uint32_t* flag, void**) {
  if (flag) *flag = 0;
  return CUDA_SUCCESS;
}

CUresult ContextCheckSlot3() { return CUDA_SUCCESS; }

// --- table 7: integrity check ---------------------------------------------------------------

std::array<void*, 3>& IntegrityTable();
std::array<void*, 13>& RuntimeInterfaceTable();

// The key of the keyed hash (HMAC-MD2), as ZLUDA derives it from the driver's tables.
constexpr uint8_t kIntegrityKey[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                       0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

// Slot 1, three times per runtime: versions ending in 0 and 1 get fixed answers; the one ending
// in 2 a keyed hash of the driver and runtime versions, this process and thread, where the
// tables live, the time the runtime passes and every device's identity.
CUresult IntegrityCheck(uint32_t runtime_version, uint64_t unix_seconds, uint64_t out[2]) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  constexpr uint64_t kFixedLow = 0x3341181C03CB675Cull;
  constexpr uint64_t kFixedHigh = 0x8ED383AA1F4CD1E8ull;
  if (runtime_version % 10 < 2) {
    out[0] = kFixedLow;
    out[1] = kFixedHigh;
    if (runtime_version % 10 == 1) {  // byte 7 of the little-endian answer is 24
      out[0] = (out[0] & ~(0xffull << 56)) | (24ull << 56);
    }
    return CUDA_SUCCESS;
  }
  int driver_version = 0;
  cuDriverGetVersion(&driver_version);
  std::vector<uint8_t> message;
  auto put = [&message](const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    message.insert(message.end(), bytes, bytes + size);
  };
  const uint32_t header[4] = {static_cast<uint32_t>(driver_version), runtime_version,
                              static_cast<uint32_t>(getpid()),
                              static_cast<uint32_t>(pthread_self())};
  put(header, sizeof header);
  const void* addresses[3] = {RuntimeInterfaceTable().data(), IntegrityTable().data(),
                              reinterpret_cast<void*>(&IntegrityCheck)};
  put(addresses, sizeof addresses);
  put(&unix_seconds, sizeof unix_seconds);
  int count = 0;
  if (cuDeviceGetCount(&count) != CUDA_SUCCESS) return CUDA_ERROR_NOT_INITIALIZED;
  for (CUdevice dev = 0; dev < count; ++dev) {
    CUuuid uuid{};
    int pci[3] = {};  // domain, bus, device
    if (cuDeviceGetUuid_v2(&uuid, dev) != CUDA_SUCCESS ||
        cuDeviceGetAttribute(&pci[0], CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev) != CUDA_SUCCESS ||
        cuDeviceGetAttribute(&pci[1], CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev) != CUDA_SUCCESS ||
        cuDeviceGetAttribute(&pci[2], CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev) != CUDA_SUCCESS) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    put(uuid.bytes, sizeof uuid.bytes);
    put(pci, sizeof pci);
  }
  uint8_t mac[16];
  HmacMd2(kIntegrityKey, message.data(), message.size(), mac);
  std::memcpy(out, mac, sizeof mac);
  return CUDA_SUCCESS;
}

// --- table 8: tools context table -----------------------------------------------------------

// Slot 4, by cuBLASLt and cuDNN: a unique id of the context (like cuCtxGetId).
CUresult ToolsContextId(CUcontext handle, uint64_t* id) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = StorageContextLocked(s, handle);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  *id = ctx->id;
  return CUDA_SUCCESS;
}

// --- the tables -----------------------------------------------------------------------------

template <typename F>
void* Fn(F* function) {
  return reinterpret_cast<void*>(function);
}

std::array<void*, 13>& RuntimeInterfaceTable() {
  static std::array<void*, 13> table = [] {
    auto t = MakeTable<&kRuntimeInterfaceId, 13>(true);
    t[2] = Fn(&GetPrimaryContext);
    t[12] = Fn(&RuntimeInterfaceSlot12);
    return t;
  }();
  return table;
}

std::array<void*, 7>& CallbackHooksTable() {
  static std::array<void*, 7> table = [] {
    auto t = MakeTable<&kCallbackHooksId, 7>(true);
    t[2] = Fn(&CallbackHooksSlot2);
    t[6] = Fn(&CallbackHooksSlot6);
    return t;
  }();
  return table;
}

// --- table 4: tools thread-local storage ----------------------------------------------------

// Slot 2: the calling thread's current context (NULL when there is none), like
// cuCtxGetCurrent. cuBLASLt calls it on every heuristic query and matmul and hands the
// answer to table 8 slot 4 to key its per-context state by context id; left unwritten, the id
// lookup got stack garbage for a context and failed, and cuBLASLt answered
// CUBLAS_STATUS_NOT_SUPPORTED (in cublasLtMatmul always, in its heuristics depending on the
// stack).
CUresult ToolsCurrentContext(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(CurrentContext());
  return CUDA_SUCCESS;
}

std::array<void*, 4>& ToolsTlsTable() {
  static std::array<void*, 4> table = [] {
    auto t = MakeTable<&kToolsTlsId, 4>(true);
    t[2] = Fn(&ToolsCurrentContext);
    return t;
  }();
  return table;
}

std::array<void*, 4>& LocalStorageTable() {  // no size header
  static std::array<void*, 4> table = [] {
    auto t = MakeTable<&kLocalStorageId, 4>(false);
    t[0] = Fn(&StoragePut);
    t[1] = Fn(&StorageDelete);
    t[2] = Fn(&StorageGet);
    return t;
  }();
  return table;
}

std::array<void*, 4>& ContextCheckTable() {
  static std::array<void*, 4> table = [] {
    auto t = MakeTable<&kContextCheckId, 4>(true);
    t[2] = Fn(&ContextCheckSlot2);
    t[3] = Fn(&ContextCheckSlot3);
    return t;
  }();
  return table;
}

std::array<void*, 3>& IntegrityTable() {
  static std::array<void*, 3> table = [] {
    auto t = MakeTable<&kIntegrityId, 3>(true);
    t[1] = Fn(&IntegrityCheck);
    return t;
  }();
  return table;
}

std::array<void*, 96>& ToolsContextTable() {  // size header and 95 slots
  static std::array<void*, 96> table = [] {
    auto t = MakeTable<&kToolsContextId, 96>(true);
    t[4] = Fn(&ToolsContextId);
    return t;
  }();
  return table;
}

// --- table 9: the cluster table -------------------------------------------------------------

// cuBLASLt 13.4 fetches it the first time its heuristics look at a half-precision matmul and
// calls slot 4 without checking that the table exists, so a refused table crashes it (a null
// dereference in cublasLtMatmulAlgoGetHeuristic); cuDNN's nvrtc cache calls it "the cuda cluster
// export table" and wants more than 13 slots. Slot 4 `(uint8_t** list, void** handle)` hands
// out a byte list that cuBLASLt histograms (it looks like a GPC id per TPC) and slot 13
// `(list, handle)` gives it back. cuBLASLt has its own answer for a driver that cannot say: on
// an error it caches an empty list and picks its kernels without one, so slot 4 answers
// CUDA_ERROR_NOT_SUPPORTED, deliberately and without a log line. 16 slots: 13 is the highest
// seen called, the real size is not known.
CUresult ClusterSmList(uint8_t** list, void** handle) {
  if (list) *list = nullptr;
  if (handle) *handle = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

std::array<void*, 16>& ClusterTable() {
  static std::array<void*, 16> table = [] {
    auto t = MakeTable<&kClusterId, 16>(true);
    t[4] = Fn(&ClusterSmList);
    return t;
  }();
  return table;
}

const void* FindTable(const CUuuid& id) {
  if (SameUuid(id, kRuntimeInterfaceId)) return RuntimeInterfaceTable().data();
  if (SameUuid(id, kCallbackHooksId)) return CallbackHooksTable().data();
  if (SameUuid(id, kToolsTlsId)) return ToolsTlsTable().data();
  if (SameUuid(id, kLocalStorageId)) return LocalStorageTable().data();
  if (SameUuid(id, kContextCheckId)) return ContextCheckTable().data();
  if (SameUuid(id, kIntegrityId)) return IntegrityTable().data();
  if (SameUuid(id, kToolsContextId)) return ToolsContextTable().data();
  if (SameUuid(id, kClusterId)) return ClusterTable().data();
  return nullptr;
}

}  // namespace

CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = nullptr;
  if (const void* table = FindTable(*pExportTableId)) {
    *ppExportTable = table;
    return CUDA_SUCCESS;
  }
  // Refused on purpose, without a log line: table 1 (a log sink; every runtime seen goes on
  // without it) and cuDNN's nvrtc compute cache table (cuDNN then disables that cache and
  // compiles as before).
  if (!SameUuid(*pExportTableId, kLogSinkId) && !SameUuid(*pExportTableId, kComputeCacheId)) {
    LogExportTableLine("unknown table", pExportTableId, -1);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}
