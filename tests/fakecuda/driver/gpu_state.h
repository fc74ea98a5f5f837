// The simulated GPUs: devices, contexts, allocations, pools, streams, VMM handles.
//
// One process-wide State guarded by one mutex (State::mu). Every exported driver function
// takes the lock for its whole body; helpers named *Locked expect it held. Objects handed out
// as CUDA handles (contexts, streams, events, graphs, pools) are never deleted, only marked
// dead, so a stale handle is detected instead of read after free.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "fakecuda/fakecuda.h"
#include "va_allocator.h"

namespace fakecuda {

constexpr uint64_t kPageBytes = FAKECUDA_PAGE_BYTES;
constexpr uint64_t kSmallAlignment = FAKECUDA_SMALL_ALIGNMENT;
constexpr uint64_t kPoolChunkBytes = FAKECUDA_POOL_CHUNK_BYTES;
constexpr int kMaxDevices = 8;

inline uint64_t RoundUp(uint64_t value, uint64_t to) { return (value + to - 1) / to * to; }
inline uint64_t PagesFor(uint64_t bytes) { return (bytes + kPageBytes - 1) / kPageBytes; }

struct Stream;
struct MemPool;
struct Graph;

// NVIDIA's runtime keeps its per-context state in the driver (export table 5, export_tables.cc):
// a value per (context, key), with a destructor the driver calls when the context goes away.
using LocalStorageDestructor = void (*)(CUcontext ctx, void* key, void* value);
struct LocalStorageEntry {
  void* value = nullptr;
  LocalStorageDestructor destructor = nullptr;
};
// A destructor call taken out of a dying context, made after the state lock is released (the
// runtime's destructor calls back into the driver).
struct LocalStorageRelease {
  CUcontext ctx;
  void* key;
  LocalStorageEntry entry;
};

struct Context {
  int device = 0;
  bool primary = false;
  bool alive = false;    // created/active; false after destroy or primary release to 0
  int primary_refs = 0;  // primary contexts only
  unsigned flags = 0;
  uint64_t overhead_pages = 0;
  Stream* legacy_stream = nullptr;      // the NULL / CU_STREAM_LEGACY stream
  Stream* per_thread_stream = nullptr;  // CU_STREAM_PER_THREAD (one per context in the fake)
  uint64_t id = 0;                      // unique per activation (cuCtxGetId, export table 8)
  std::map<void*, LocalStorageEntry> local_storage;
  std::map<int, size_t> limits;  // set with cuCtxSetLimit; the rest have their defaults
};

struct PoolChunk {
  uint64_t address = 0;
  uint64_t size = 0;
  FirstFitRanges ranges;
  uint64_t blocks = 0;  // live or pending blocks inside
};

struct Allocation {
  uint64_t address = 0;
  uint64_t size = 0;      // as requested
  uint64_t va_bytes = 0;  // virtual range taken (rounded)
  uint64_t pages = 0;     // physical pages charged to this allocation alone
  int device = 0;
  fakecuda_kind kind = FAKECUDA_KIND_DEVICE;
  Context* ctx = nullptr;
  uint64_t small_page = 0;  // shared page holding it, 0 when it has its own pages
  bool low_window = false;  // legacy 32-bit allocation
  MemPool* pool = nullptr;  // async blocks
  PoolChunk* chunk = nullptr;
  Stream* free_stream = nullptr;  // pending free: stream and its op number at the free
  uint64_t free_seq = 0;
  Graph* graph = nullptr;  // graph allocations
};

struct MemPool {
  int device = 0;
  bool is_default = false;
  bool alive = true;
  uint64_t release_threshold = 0;
  int reuse[3] = {1, 1, 1};
  uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  CUmemAllocationHandleType handle_types = CU_MEM_HANDLE_TYPE_NONE;
  std::vector<std::unique_ptr<PoolChunk>> chunks;
};

struct Stream {
  Context* ctx = nullptr;
  bool alive = true;
  unsigned flags = 0;
  int priority = 0;
  uint64_t id = 0;
  uint64_t seq = 0;  // operations enqueued so far
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id capture_thread;
  Graph* capture_graph = nullptr;
  uint64_t capture_id = 0;
};

struct Event {
  Context* ctx = nullptr;
  bool alive = true;
  unsigned flags = 0;
  bool recorded = false;
  Stream* stream = nullptr;
  uint64_t seq = 0;
  uint64_t time_ns = 0;
};

struct Graph {
  bool alive = true;
  uint64_t nodes = 0;
  int execs = 0;
  std::vector<uint64_t> freed_inside;  // graph allocations freed by the graph itself
};

struct GraphExec {
  Graph* graph = nullptr;
  bool alive = true;
};

// Physical memory behind one or more VMM handles (an import in this process shares it).
struct PhysicalMemory {
  int device = 0;
  uint64_t size = 0;
  uint64_t pages = 0;  // charged; 0 for memory exported by another process
  int memfd = -1;      // host backing, so mappings at several addresses share bytes
  int handles = 0;     // live handles referring to it
};

struct VmmHandle {
  uint64_t id = 0;
  PhysicalMemory* memory = nullptr;
  CUmemAllocationProp prop{};
  int refs = 0;  // creation/import + retains - releases
  int maps = 0;  // live mappings
  bool imported = false;
};

struct VmmMapping {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
  uint64_t handle = 0;
  bool accessible = false;
};

struct SmallPage {
  FirstFitRanges ranges;
  uint64_t live = 0;
  int device = 0;
};

struct Device {
  int physical = 0;
  uint64_t total_pages = 0;
  uint64_t other_pages = 0;
  uint64_t used_pages = 0;
  FirstFitRanges va;      // main window, 2 MiB granular users and small pages
  FirstFitRanges low_va;  // below 4 GiB, for the legacy 32-bit ABI
  bool low_window_ok = false;
  std::map<uint64_t, SmallPage> small_pages;
  Context primary;
  MemPool* default_pool = nullptr;
  MemPool* current_pool = nullptr;
};

struct HandleObject {  // modules, functions, libraries, kernels: accepted, never executed
  enum Type { kModule, kFunction, kLibrary, kKernel } type;
  bool alive = true;
  HandleObject* parent = nullptr;  // module or library a function or kernel came from
  std::map<int, int> attributes;   // set with cu{Func,Kernel}SetAttribute
};

struct State {
  std::mutex mu;
  // Null mode (FAKECUDA_NULL=1) skips the lock: addresses come from this bump counter.
  std::atomic<bool> null_mode{false};
  std::atomic<uint64_t> null_next{1ull << 44};
  Config config;
  bool initialized = false;  // cuInit succeeded
  bool windows_mapped = false;
  uint64_t window_bytes = 0;
  Device devices[kMaxDevices];
  int device_count = 0;                        // visible
  std::map<uint64_t, Allocation> allocations;  // by address
  std::set<Context*> contexts;                 // created (non-primary) ones ever made, alive or not
  std::set<Stream*> streams;
  std::set<Event*> events;
  std::set<Graph*> graphs;
  std::set<GraphExec*> graph_execs;
  std::set<MemPool*> pools;
  std::set<HandleObject*> objects;
  // Module and library globals (cuModuleGetGlobal): host memory the copy functions accept as
  // device memory, never charged to a device. (module or library, name) -> address; sizes.
  std::map<std::pair<HandleObject*, std::string>, uint64_t> global_addresses;
  std::map<uint64_t, uint64_t> globals;         // address -> bytes
  std::map<uint64_t, size_t> host_allocations;  // pinned host memory: address -> bytes
  std::map<uint64_t, size_t> host_registered;
  // VMM
  FirstFitRanges vmm_va;
  std::map<uint64_t, uint64_t> reservations;  // address -> size
  std::map<uint64_t, VmmMapping> mappings;    // address -> mapping
  std::map<uint64_t, VmmHandle> handles;      // id -> handle
  uint64_t next_handle = 1;
  uint64_t next_stream_id = 1;
  uint64_t next_capture_id = 1;
  uint64_t next_context_id = 1;
  // Failure injection
  uint64_t allocation_calls = 0;
  std::vector<uint64_t> fail_at;
  // Per-API failure injection (FAKECUDA_FAIL_CALLS=api:n,...): api -> {calls, n}.
  std::map<std::string, std::pair<uint64_t, uint64_t>> call_failures;
  uint64_t frees_done = 0;  // successful cuMemFree calls (FAKECUDA_FREE_WAIT)
  // FAKECUDA_LIVE_DUMP: exit() has begun (an atexit handler registered by cuInit), and the live
  // table as it was when a context was first torn down after that (NVIDIA's runtime releases
  // its primary context from its library destructor, freeing what the program left).
  bool exiting = false;
  bool exit_live_taken = false;
  std::vector<fakecuda_live_entry> exit_live;
};

State& GetState();

// --- helpers; all expect GetState().mu held -------------------------------------------------

// Resets devices from config (capacity, other use) and maps the host-backed VA windows once.
void ConfigureDevicesLocked(State& s);
// Counts one allocation call; true when this call must fail by injection.
bool CountAllocationCallLocked(State& s);
// Counts one call of a failure-only API family ("cuLaunchKernel", "cuModuleLoad",
// "cuLibraryLoad", "cuGraphInstantiate", "cuGraphUpload", "cuCtxCreate",
// "cuDevicePrimaryCtxRetain"); true when it must fail with CUDA_ERROR_OUT_OF_MEMORY.
bool CountApiCallLocked(State& s, const char* api);

// Physical pages: false when the device has too few free pages.
bool ChargePagesLocked(Device& d, uint64_t pages);
void ReleasePagesLocked(Device& d, uint64_t pages);
uint64_t FreePagesLocked(const Device& d);

// Host backing of device addresses (no-ops in null mode).
void CommitLocked(const State& s, uint64_t address, uint64_t bytes);
void DecommitLocked(const State& s, uint64_t address, uint64_t bytes);

// A plain driver allocation (device, pitch, managed, legacy, graph, ipc) following the page
// rules; fills *out and records it. Returns CUDA_ERROR_OUT_OF_MEMORY when pages or addresses
// run out. `charge` false for managed and imported memory.
CUresult AllocateLocked(State& s, Context* ctx, uint64_t size, fakecuda_kind kind, bool charge,
                        bool low_window, CUdeviceptr* out);
// Releases what AllocateLocked recorded at exactly `address`.
void ReleaseAllocationLocked(State& s, std::map<uint64_t, Allocation>::iterator it);
// The live allocation containing [address, address + bytes), or allocations.end().
std::map<uint64_t, Allocation>::iterator FindContainingLocked(State& s, uint64_t address,
                                                              uint64_t bytes);
// True when [address, address+bytes) is device memory the host may touch (allocation or
// accessible VMM mapping).
bool IsDeviceRangeLocked(State& s, uint64_t address, uint64_t bytes);

// Contexts
Context* CurrentContext();  // thread's current context or nullptr (no lock needed)
void SetCurrentContext(Context* ctx);
// The thread's capture interaction mode (cuThreadExchangeStreamCaptureMode).
CUstreamCaptureMode& ThreadCaptureMode();
std::vector<Context*>& ContextStack();
// Checks cuInit and a usable current context; fills *ctx.
CUresult RequireContextLocked(State& s, Context** ctx);
bool IsLiveContextLocked(State& s, Context* ctx);
bool IsPrimaryContextLocked(State& s, Context* ctx);     // one of the visible devices' primaries
CUresult ActivateContextLocked(State& s, Context* ctx);  // charges overhead, default streams
void DeactivateContextLocked(State& s, Context* ctx);    // frees everything it owns
// Empties the context's local storage; the caller runs the destructors with
// RunLocalStorageDestructors once the lock is released, before the context is deactivated.
std::vector<LocalStorageRelease> TakeLocalStorageLocked(Context* ctx);
void RunLocalStorageDestructors(const std::vector<LocalStorageRelease>& releases);  // no lock held

// Streams: resolves NULL/LEGACY/PER_THREAD to the context's stream objects.
Stream* ResolveStreamLocked(State& s, Context* ctx, CUstream stream, bool per_thread_default);
// Marks stream work done up to now: completes pending frees on it, then applies pools'
// release thresholds on its device.
void SynchronizeStreamLocked(State& s, Stream* stream, uint64_t up_to_seq);
void SynchronizeContextLocked(State& s, Context* ctx);
// Pools
void ReleaseIdleChunksLocked(State& s, MemPool* pool, uint64_t keep_bytes);
void DestroyPoolContentsLocked(State& s, MemPool* pool);
// Capture: true when a potentially unsafe call must be refused right now (and invalidates
// the captures it would disturb).
bool UnsafeDuringCaptureLocked(State& s);
// Modules, libraries, functions, kernels
HandleObject* LiveObjectLocked(State& s, void* handle, HandleObject::Type type);
HandleObject* NewObjectLocked(State& s, HandleObject::Type type, HandleObject* parent = nullptr);
// VMM
void DropHandleIfUnusedLocked(State& s, uint64_t handle_id);

// Resets all state (fakecuda_reset).
void ResetLocked(State& s);

// Ground truth at exit (ground_truth.cc): registers, once, the atexit handler that marks the
// start of exit(); and keeps the live table before the first context teardown during exit
// (DeactivateContextLocked calls it).
void WatchExitLocked(State& s);
void NoteContextTeardownLocked(State& s);

}  // namespace fakecuda
