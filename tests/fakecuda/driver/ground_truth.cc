// The fakecuda_* exports (fakecuda.h) and the FAKECUDA_LIVE_DUMP file written at exit.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "gpu_state.h"

using namespace fakecuda;

namespace {

using Lock = std::lock_guard<std::mutex>;

std::vector<fakecuda_live_entry> CollectLocked(State& s) {
  std::vector<fakecuda_live_entry> out;
  for (const auto& [address, a] : s.allocations) {
    out.push_back({address, a.size, a.device, a.kind, 0});
  }
  for (MemPool* pool : s.pools) {
    for (const auto& chunk : pool->chunks) {
      out.push_back({chunk->address, chunk->size, pool->device, FAKECUDA_KIND_POOL_CHUNK, 0});
    }
  }
  for (const auto& [address, size] : s.reservations) {
    out.push_back({address, size, -1, FAKECUDA_KIND_VMM_RESERVE, 0});
  }
  for (const auto& [id, h] : s.handles) {
    out.push_back({0, h.memory->size, h.memory->device,
                   h.imported ? FAKECUDA_KIND_VMM_IMPORT : FAKECUDA_KIND_VMM_HANDLE, id});
  }
  for (const auto& [address, m] : s.mappings) {
    int device = s.handles.count(m.handle) ? s.handles.at(m.handle).memory->device : -1;
    out.push_back({address, m.size, device, FAKECUDA_KIND_VMM_MAP, m.handle});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.kind != b.kind
               ? a.kind < b.kind
               : (a.address != b.address ? a.address < b.address : a.handle < b.handle);
  });
  return out;
}

bool CountsAsAllocation(int kind) {
  switch (kind) {
    case FAKECUDA_KIND_DEVICE:
    case FAKECUDA_KIND_PITCH:
    case FAKECUDA_KIND_MANAGED:
    case FAKECUDA_KIND_LEGACY:
    case FAKECUDA_KIND_ASYNC:
    case FAKECUDA_KIND_GRAPH:
    case FAKECUDA_KIND_VMM_HANDLE:
    case FAKECUDA_KIND_VMM_IMPORT:
    case FAKECUDA_KIND_IPC:
      return true;
    default:
      return false;
  }
}

// Another thread may still hold the lock at exit (exit() does not stop threads), so wait
// briefly instead of deadlocking.
bool LockAtExit(std::unique_lock<std::mutex>& lock) {
  for (int i = 0; i < 200 && !lock.try_lock(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return lock.owns_lock();
}

// Runs before library destructors (atexit handlers registered after start-up come first).
void MarkExiting() {
  State& s = GetState();
  std::unique_lock<std::mutex> lock(s.mu, std::defer_lock);
  if (LockAtExit(lock)) s.exiting = true;
}

// Runs when libcuda.so.1 is unloaded or the process exits normally: what the program left
// live, taken before any runtime tore its contexts down at exit.
__attribute__((destructor)) void WriteLiveDump() {
  const char* path = std::getenv("FAKECUDA_LIVE_DUMP");
  if (!path || !*path) return;
  State& s = GetState();
  std::unique_lock<std::mutex> lock(s.mu, std::defer_lock);
  if (!LockAtExit(lock)) {
    std::fprintf(stderr, "fakecuda: state busy at exit, %s not written\n", path);
    return;
  }
  FILE* out = std::fopen(path, "we");
  if (!out) return;
  for (const fakecuda_live_entry& e : s.exit_live_taken ? s.exit_live : CollectLocked(s)) {
    std::fprintf(out, "%s 0x%" PRIx64 " %" PRIu64 " %d\n", fakecuda_kind_name(e.kind), e.address,
                 e.size, e.device);
  }
  std::fclose(out);
}

}  // namespace

void fakecuda::WatchExitLocked(State&) {
  static bool registered = false;
  if (!registered) registered = std::atexit(&MarkExiting) == 0;
}

void fakecuda::NoteContextTeardownLocked(State& s) {
  if (!s.exiting || s.exit_live_taken) return;
  s.exit_live = CollectLocked(s);
  s.exit_live_taken = true;
}

extern "C" {

size_t fakecuda_live_count(int device) {
  State& s = GetState();
  Lock lock(s.mu);
  size_t count = 0;
  for (const fakecuda_live_entry& e : CollectLocked(s)) {
    if (e.device == device && CountsAsAllocation(e.kind)) ++count;
  }
  return count;
}

uint64_t fakecuda_used_bytes(int device) {
  State& s = GetState();
  Lock lock(s.mu);
  if (device < 0 || device >= s.device_count) return 0;
  return s.devices[device].used_pages * kPageBytes;
}

size_t fakecuda_live_list(fakecuda_live_entry* out, size_t max) {
  State& s = GetState();
  Lock lock(s.mu);
  std::vector<fakecuda_live_entry> entries = CollectLocked(s);
  for (size_t i = 0; i < entries.size() && i < max && out; ++i) out[i] = entries[i];
  return entries.size();
}

const char* fakecuda_kind_name(int kind) {
  static const char* const kNames[] = {
      "device",      "pitch",      "managed", "legacy", "async",      "async_pending", "graph",
      "vmm_reserve", "vmm_handle", "vmm_map", "ipc",    "pool_chunk", "vmm_import"};
  if (kind < 0 || kind >= static_cast<int>(sizeof kNames / sizeof kNames[0])) return "unknown";
  return kNames[kind];
}

void fakecuda_reset(void) {
  State& s = GetState();
  Lock lock(s.mu);
  if (s.initialized) {
    ResetLocked(s);
  } else {
    s.allocation_calls = 0;
  }
}

void fakecuda_fail_nth_allocation(uint64_t n) {
  State& s = GetState();
  Lock lock(s.mu);
  s.fail_at.clear();
  if (n) s.fail_at.push_back(s.allocation_calls + n);
}

uint64_t fakecuda_allocation_calls(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return s.allocation_calls;
}

}  // extern "C"
