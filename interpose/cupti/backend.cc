// libfragscope_cupti.so: the CUPTI backend. Loaded by the CUDA driver itself when
// CUDA_INJECTION64_PATH names it (the driver calls InitializeInjection during cuInit), it
// subscribes to CUPTI callbacks for the tracked driver and runtime functions and to the MEMORY2
// and MEMORY_POOL activity kinds, and writes the same frames as the preloaded agent
// (Hello.backend = BACKEND_CUPTI) to FRAGSCOPE_OUTPUT / FRAGSCOPE_SOCKET.
//
// Needs a real driver and libcupti (dlopen()ed, so this library loads and does nothing without
// them). CUPTI allows one subscriber per process: with torch.profiler / Kineto or Nsight active,
// cuptiSubscribe fails and the backend says so and stays off. It also stays off when the
// preloaded agent is present (both would record every event).
//
// Differences from the preloaded agent, by design of this first version: frames are encoded and
// written synchronously under one mutex on the calling thread (CUPTI callbacks are already far
// slower than the agent's ring), no stacks (stack_id 0), no snapshots, no fork handling.
// Allocations only the activity records show (graph memory nodes) are stamped when CUPTI
// delivers their buffer, so their order relative to callback events is approximate.
#include <cupti.h>
#include <dlfcn.h>
#include <limits.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "config.h"
#include "recording/event_infos.h"
#include "shipping/frame_encoder.h"
#include "shipping/transport.h"
#include "shipping/wire_encoder.h"
#include "translate.h"

namespace fragscope::cupti {
namespace {

using agent::EventRecord;
using agent::RecordType;

// --- libcupti and libcuda, both dlopen()ed ------------------------------------------------------
struct CuptiApi {
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiActivityEnable) activity_enable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) activity_register = nullptr;
  decltype(&cuptiActivityGetNextRecord) activity_next = nullptr;
  decltype(&cuptiActivityFlushAll) activity_flush = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

struct DriverApi {
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  CUresult (*device_get_mem_pool)(CUmemoryPool*, CUdevice) = nullptr;
  CUresult (*mem_pool_get_attribute)(CUmemoryPool, CUmemPool_attribute, void*) = nullptr;
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*device_total_mem)(size_t*, CUdevice) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
};

template <typename Fn>
void Load(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
}

bool LoadCupti(CuptiApi* api) {
  void* lib = nullptr;
  for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) return false;
  Load(lib, "cuptiSubscribe", &api->subscribe);
  Load(lib, "cuptiEnableCallback", &api->enable_callback);
  Load(lib, "cuptiActivityEnable", &api->activity_enable);
  Load(lib, "cuptiActivityRegisterCallbacks", &api->activity_register);
  Load(lib, "cuptiActivityGetNextRecord", &api->activity_next);
  Load(lib, "cuptiActivityFlushAll", &api->activity_flush);
  Load(lib, "cuptiGetResultString", &api->result_string);
  return api->subscribe != nullptr && api->enable_callback != nullptr;
}

void LoadDriver(DriverApi* d) {
  // The driver is loaded already (it is the one injecting us); never load another.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return;
  Load(lib, "cuCtxGetDevice", &d->ctx_get_device);
  Load(lib, "cuMemGetInfo_v2", &d->mem_get_info);
  Load(lib, "cuDeviceGetMemPool", &d->device_get_mem_pool);
  Load(lib, "cuMemPoolGetAttribute", &d->mem_pool_get_attribute);
  Load(lib, "cuMemGetAddressRange_v2", &d->mem_get_address_range);
  Load(lib, "cuDeviceTotalMem_v2", &d->device_total_mem);
  Load(lib, "cuDeviceGetName", &d->device_get_name);
}

// --- state --------------------------------------------------------------------------------------
struct LiveAlloc {
  uint64_t size;
  int32_t device;
  uint64_t pool;
};

struct Backend {
  agent::Config config;
  CuptiApi cupti;
  DriverApi driver;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> events{0};

  std::mutex mu;  // everything below
  bool stream_started = false;
  bool ended = false;
  agent::Output output;
  uint8_t buffer[1 << 16];
  agent::WireWriter writer{buffer, sizeof(buffer)};
  std::unordered_map<uint64_t, LiveAlloc> allocations;  // address -> allocation
  std::unordered_map<uint64_t, LiveAlloc> handles;      // VMM handle -> physical memory
  bool device_sent[64] = {};
  ActivityCorrelator correlator;
};

Backend& State() {
  static Backend* backend = new Backend();  // never destroyed: callbacks may run during exit
  return *backend;
}

thread_local CallbackNesting t_nesting;
thread_local uint64_t t_release_seq = 0;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t NextSeq() { return State().seq.fetch_add(1, std::memory_order_acq_rel) + 1; }

int32_t CurrentDevice() {
  const DriverApi& d = State().driver;
  CUdevice device = -1;
  if (d.ctx_get_device == nullptr || d.ctx_get_device(&device) != CUDA_SUCCESS) return -1;
  return device;
}

// Writes what the writer holds. Caller holds mu.
void Flush(Backend& b) {
  if (b.writer.size() > 0 && b.output.is_open()) b.output.Write(b.writer.data(), b.writer.size());
  b.writer.Clear();
}

// Appends one frame, flushing first when it does not fit. Caller holds mu.
template <typename Encode>
void Put(Backend& b, Encode encode) {
  size_t mark = b.writer.size();
  if (encode(b.writer)) return;
  b.writer.Truncate(mark);
  Flush(b);
  if (!encode(b.writer)) b.writer.Truncate(0);  // larger than the buffer: cannot happen
}

void StartStream(Backend& b) {
  b.stream_started = true;
  static char path[agent::Config::kPathCapacity];
  if (b.config.socket_path[0] == '\0' &&
      !agent::ExpandPath(b.config.output_path, getpid(), path, sizeof(path))) {
    std::strcpy(path, "/dev/null/fragscope-path-too-long");
  }
  b.output.Open(path, b.config.socket_path);
  uint8_t header[agent::kStreamHeaderSize];
  agent::EncodeStreamHeader(header);
  b.writer.RawBytes(header, sizeof(header));
  static char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  exe[n > 0 ? n : 0] = '\0';
  static char host[256];
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  agent::HelloInfo hello;
  hello.pid = static_cast<uint32_t>(getpid());
  hello.ppid = static_cast<uint32_t>(getppid());
  hello.host = host;
  hello.exe = exe;
  hello.agent_version = FRAGSCOPE_AGENT_VERSION;
  timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  hello.monotonic_at_start_ns = NowNs();
  hello.realtime_at_start_ns =
      static_cast<uint64_t>(rt.tv_sec) * 1000000000ull + static_cast<uint64_t>(rt.tv_nsec);
  hello.backend = agent::HelloBackend::kCupti;
  Put(b, [&](agent::WireWriter& w) { return agent::EncodeHello(w, hello); });
}

void SendDeviceInfo(Backend& b, int32_t device) {
  if (device < 0 || device >= 64 || b.device_sent[device]) return;
  b.device_sent[device] = true;
  agent::DeviceInfoData info;
  info.ordinal = device;
  size_t total = 0;
  if (b.driver.device_total_mem != nullptr) b.driver.device_total_mem(&total, device);
  info.total_bytes = total;
  static char name[64][256];
  if (b.driver.device_get_name != nullptr &&
      b.driver.device_get_name(name[device], sizeof(name[device]), device) == CUDA_SUCCESS) {
    info.name = name[device];
  }
  Put(b, [&](agent::WireWriter& w) { return agent::EncodeDeviceInfo(w, info); });
}

// Stamps and writes one record; keeps the live tables the releases need. Caller holds mu.
void Emit(Backend& b, EventRecord& r) {
  if (b.ended) return;
  if (!b.stream_started) StartStream(b);
  if (r.time_ns == 0) r.time_ns = NowNs();
  if (r.tid == 0) r.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  switch (r.type) {
    case RecordType::kAlloc:
      b.allocations[r.address] = LiveAlloc{r.size, r.device, r.pool};
      break;
    case RecordType::kFree: {
      auto it = b.allocations.find(r.address);
      if (it != b.allocations.end()) {
        if (r.size == 0) r.size = it->second.size;
        if (r.device < 0) r.device = it->second.device;
        if (r.pool == 0) r.pool = it->second.pool;
        if (r.result == 0) b.allocations.erase(it);
      }
      break;
    }
    case RecordType::kHandle: {
      auto op = static_cast<agent::HandleOp>(r.op);
      if (op == agent::HandleOp::kCreate && r.result == 0) {
        b.handles[r.pool] = LiveAlloc{r.size, r.device, 0};
      } else if (auto it = b.handles.find(r.pool); it != b.handles.end()) {
        if (r.size == 0) r.size = it->second.size;
        if (r.device < 0) r.device = it->second.device;
      }
      break;
    }
    default:
      break;
  }
  SendDeviceInfo(b, r.device);
  b.events.fetch_add(1, std::memory_order_relaxed);
  Put(b, [&](agent::WireWriter& w) { return agent::EncodeRecord(w, r); });
  // Failures must reach the reader even if the program dies of them next.
  if (r.type == RecordType::kFailed) Flush(b);
}

void SampleMemInfo(EventRecord& r) {
  const DriverApi& d = State().driver;
  size_t free_bytes = 0, total_bytes = 0;
  if (d.mem_get_info != nullptr && d.mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
    agent::SetFailureMemInfo(r, free_bytes, total_bytes);
  }
}

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* cbdata) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API && domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto& data = *static_cast<const CUpti_CallbackData*>(cbdata);
  CallbackTranslation t = TranslateCallback(domain, cbid, data, t_nesting);
  if (t.action == CallbackAction::kNone) return;
  if (t.action == CallbackAction::kTakeSeq) {
    t_release_seq = NextSeq();
    return;
  }
  Backend& b = State();
  EventRecord& r = t.record;
  if (r.device < 0) r.device = CurrentDevice();
  if (t.action == CallbackAction::kSamplePool) {
    const DriverApi& d = b.driver;
    cuuint64_t reserved = 0, used = 0;
    auto pool = reinterpret_cast<CUmemoryPool>(r.pool);
    if (d.mem_pool_get_attribute == nullptr ||
        d.mem_pool_get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
            CUDA_SUCCESS ||
        d.mem_pool_get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS) {
      return;
    }
    agent::SetMemInfoPool(r, reserved, used);
    SampleMemInfo(r);
    r.flags = 0;  // kFlagHasMemInfo is FailedAlloc's; a MemInfo always carries its sample
    r.seq = b.seq.load(std::memory_order_acquire);
    std::lock_guard<std::mutex> lock(b.mu);
    Emit(b, r);
    return;
  }
  // An async allocation without a pool argument comes from the device's current pool.
  if (r.type == RecordType::kAlloc && r.kind == agent::MemoryKind::kPool && r.pool == 0 &&
      r.device >= 0 && b.driver.device_get_mem_pool != nullptr) {
    CUmemoryPool pool = nullptr;
    if (b.driver.device_get_mem_pool(&pool, r.device) == CUDA_SUCCESS) {
      r.pool = reinterpret_cast<uint64_t>(pool);
    }
  }
  if (r.type == RecordType::kAlloc && r.kind == agent::MemoryKind::kIpcImport && r.size == 0 &&
      b.driver.mem_get_address_range != nullptr) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (b.driver.mem_get_address_range(&base, &size, r.address) == CUDA_SUCCESS) r.size = size;
  }
  if (r.type == RecordType::kFailed) SampleMemInfo(r);
  r.seq = t.seq_from_enter ? t_release_seq : NextSeq();
  std::lock_guard<std::mutex> lock(b.mu);
  b.correlator.Recorded(t.correlation_id, r.pool);
  b.correlator.Recorded(t.inner_correlation_id, r.pool);
  Emit(b, r);
}

// --- activity buffers ---------------------------------------------------------------------------
constexpr size_t kActivityBufferBytes = 1 << 20;

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer != nullptr ? kActivityBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI OnBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Backend& b = State();
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(b.mu);
  while (b.cupti.activity_next != nullptr &&
         b.cupti.activity_next(buffer, valid, &record) == CUPTI_SUCCESS) {
    EventRecord r;
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMORY2) {
      const auto& memory = *reinterpret_cast<const CUpti_ActivityMemory4*>(record);
      if (!b.correlator.IsNew(memory) || !TranslateMemoryActivity(memory, &r)) continue;
      r.seq = NextSeq();
      Emit(b, r);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL) {
      const auto& pool = *reinterpret_cast<const CUpti_ActivityMemoryPool3*>(record);
      if (!TranslateMemoryPoolActivity(pool, &r)) continue;
      r.pool = b.correlator.PoolForBase(pool.address);
      if (r.pool == 0) continue;  // not tied to a handle the allocation events use
      r.seq = b.seq.load(std::memory_order_acquire);
      Emit(b, r);
    }
  }
  std::free(buffer);
}

void AtExit() {
  Backend& b = State();
  if (b.cupti.activity_flush != nullptr) b.cupti.activity_flush(1);
  std::lock_guard<std::mutex> lock(b.mu);
  if (!b.stream_started || b.ended) return;
  agent::EndData end;
  end.seq = b.seq.load(std::memory_order_acquire);
  end.time_ns = NowNs();
  end.events_recorded = b.events.load(std::memory_order_relaxed);
  Put(b, [&](agent::WireWriter& w) { return agent::EncodeEnd(w, end); });
  Flush(b);
  b.ended = true;
}

const char* ResultString(const CuptiApi& api, CUptiResult r) {
  const char* text = nullptr;
  if (api.result_string == nullptr || api.result_string(r, &text) != CUPTI_SUCCESS) return "?";
  return text;
}

}  // namespace
}  // namespace fragscope::cupti

// Called by the CUDA driver (CUDA_INJECTION64_PATH) during cuInit. Returns 1 when subscribed.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  using namespace fragscope::cupti;
  static std::atomic<bool> once{false};
  if (once.exchange(true)) return 1;
  Backend& b = State();
  fragscope::agent::LoadConfig(&b.config);
  if (!b.config.has_output()) return 1;  // nowhere to write: stay out of the way
  if (dlsym(RTLD_DEFAULT, "fragscope_mark") != nullptr) {
    std::fprintf(stderr, "fragscope(cupti): libfragscope.so is preloaded; CUPTI backend off\n");
    return 1;
  }
  if (!LoadCupti(&b.cupti)) {
    std::fprintf(stderr, "fragscope(cupti): libcupti not found; CUPTI backend off\n");
    return 1;
  }
  LoadDriver(&b.driver);
  CUptiResult r = b.cupti.subscribe(&b.subscriber, OnCallback, nullptr);
  if (r != CUPTI_SUCCESS) {
    // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: a profiler holds CUPTI.
    std::fprintf(stderr, "fragscope(cupti): cuptiSubscribe failed (%s); CUPTI backend off\n",
                 ResultString(b.cupti, r));
    return 1;
  }
  for (CUpti_CallbackDomain domain : {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RUNTIME_API}) {
    CUpti_CallbackId ids[128];
    size_t n = TrackedCallbacks(domain, ids, 128);
    for (size_t i = 0; i < n; ++i) b.cupti.enable_callback(1, b.subscriber, domain, ids[i]);
  }
  if (b.cupti.activity_register != nullptr && b.cupti.activity_enable != nullptr &&
      b.cupti.activity_register(OnBufferRequested, OnBufferCompleted) == CUPTI_SUCCESS) {
    b.cupti.activity_enable(CUPTI_ACTIVITY_KIND_MEMORY2);
    b.cupti.activity_enable(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
  }
  std::atexit(AtExit);
  return 1;
}
