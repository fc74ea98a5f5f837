#include "python/python_state.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "agent.h"
#include "hooks/driver_api.h"
#include "hooks/hook_table.h"
#include "hooks/primary_context.h"
#include "recording/live_table.h"
#include "recording/recorder.h"

namespace fragscope::agent {
namespace {

// The few CPython functions used, all in the stable ABI of every CPython 3 (Python 3.8 on is
// what matters: PyTorch needs 3.9+). Opaque pointers: no Python header is included.
using PyObj = void;
struct PythonApi {
  int (*is_initialized)() = nullptr;
  int (*is_finalizing)() = nullptr;  // Py_IsFinalizing (3.13+) or _Py_IsFinalizing; optional
  int (*gil_ensure)() = nullptr;     // PyGILState_STATE is an int-sized enum
  void (*gil_release)(int) = nullptr;
  PyObj* (*dict_new)() = nullptr;
  int (*dict_set_item_string)(PyObj*, const char*, PyObj*) = nullptr;
  PyObj* (*unicode_from_string)(const char*) = nullptr;
  PyObj* (*dict_get_item_string)(PyObj*, const char*) = nullptr;  // borrowed
  PyObj* (*eval_get_builtins)() = nullptr;                        // borrowed
  PyObj* (*run_string_flags)(const char*, int, PyObj*, PyObj*, void*) = nullptr;
  int (*bytes_as_string_and_size)(PyObj*, char**, long*) = nullptr;
  void (*err_clear)() = nullptr;
  void (*dec_ref)(PyObj*) = nullptr;
};
constexpr int kPyFileInput = 257;  // Py_file_input

// Runs in a fresh namespace with the GIL held. Never imports torch (a process that has not
// would only pay for it) and never initializes CUDA. Leaves `result`: bytes starting with '+'
// (then little-endian uint64 records of 7 words: kind (1 segment, 2 block), device, address,
// size, stream, pool, flags; a segment's blocks follow it), '-' (nothing to import: why) or '!'
// (an error: what). An expandable segment is listed by torch as one segment per mapped run.
// Also leaves `observer`: b"" when PyTorch's OOM observer is installed, else why not. Reads
// `_fragscope_agent_path` and `_fragscope_adapter_dir`, set in the namespace beforehand.
constexpr char kPythonCode[] = R"PY(
def _fragscope_torch_state():
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        return b"-torch is not imported in this Python process"
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not hasattr(cuda, "memory_snapshot"):
        return b"-this torch has no torch.cuda.memory_snapshot (a CPU-only build?)"
    if not cuda.is_initialized():
        return b"-torch has not initialized CUDA (nothing allocated through it yet)"
    backend = getattr(cuda, "get_allocator_backend", None)
    if backend is not None and backend() != "native":
        return ("-torch uses the %s allocator backend, whose memory memory_snapshot() does not "
                "list" % backend()).encode("utf-8", "replace")
    try:
        segments = cuda.memory_snapshot(include_traces=False)
    except TypeError:  # before torch 2.10
        segments = cuda.memory_snapshot()
    import struct
    mask = (1 << 64) - 1

    def pool_id(pool):  # as scripts/adapter/sitecustomize.py's _pool_id
        if not pool:
            return 0
        first, second = (tuple(pool) + (0, 0))[:2]
        if first:
            return (int(first) | (1 << 63)) & mask
        return int(second) & mask

    try:  # the state is imported whatever becomes of the observer
        observer = _fragscope_install_observer(torch, segments)
    except Exception as error:
        observer = ("%s: %s" % (type(error).__name__, error)).encode("utf-8", "replace")[:300]
    words = []
    for seg in segments:
        device = int(seg.get("device", 0))
        address = int(seg["address"])
        stream = int(seg.get("stream") or 0) & mask
        pool = pool_id(seg.get("segment_pool_id"))
        blocks = []
        offset = address
        for block in seg.get("blocks") or ():
            start = int(block.get("address", offset))
            size = int(block["size"])
            offset = start + size
            state = block.get("state")
            if state != "inactive":
                blocks += [2, device, start, size, stream, pool,
                           0 if state == "active_allocated" else 1]
                # Where torch records memory history: the Python frames that made the block.
                python = [(str(f.get("name", "")), str(f.get("filename", "")),
                           int(f.get("line") or 0))
                          for f in block.get("frames") or ()
                          if str(f.get("filename", "")).endswith(".py")]
                if python:
                    _fragscope_sites.append((start, device, python))
        flags = (1 if seg.get("is_expandable") else 0) | (0 if blocks else 2)
        words += [1, device, address, int(seg["total_size"]), stream, pool, flags]
        words += blocks
    return b"+" + struct.pack("<%dQ" % len(words), *words), observer


def _fragscope_install_observer(torch, segments):
    """PyTorch's OOM observer, once per process: at an OOM the blocks are brought up to date
    (the adapter's snapshot diff, primed with `segments`, the state this import enters) before
    the failure goes to the agent, so the post-mortem judges the blocks of the OOM, not those
    of the attach. Returns b"" when installed, else why not."""
    import os
    import sys
    import types

    attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return b"this torch has no OOM observer"
    adapter = _fragscope_adapter_dir
    path = os.path.join(adapter, "fragscope_torch_diff.py") if adapter else ""
    if not path or not os.path.isfile(path):
        return ("no fragscope_torch_diff.py in the adapter folder %r" % adapter).encode(
            "utf-8", "replace")
    holder = sys.modules.get("_fragscope_injected")
    if holder is None:
        import ctypes
        import importlib.util

        spec = importlib.util.spec_from_file_location("_fragscope_injected_diff", path)
        diff = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(diff)
        holder = types.ModuleType("_fragscope_injected")
        holder.diff = diff
        holder.api = diff.AgentApi(ctypes.CDLL(_fragscope_agent_path))
        holder.forwarder = None

        def on_oom(device, alloc_size, device_total, device_free):
            forwarder = holder.forwarder
            if forwarder is not None:
                forwarder.sync("OOM")
                # The failing request's Python frames as the failure's site.
                holder.api.report_oom(alloc_size, device, holder.diff.request_frames())

        attach(on_oom)
        sys.modules["_fragscope_injected"] = holder
    # A later attach (the agent stays loaded) primes a new forwarder for the same observer.
    forwarder = holder.diff.SnapshotForwarder(torch, holder.api)
    forwarder.prime(segments)
    holder.forwarder = forwarder
    return b""

def _fragscope_send_sites():
    """After the import entered the blocks: each block's Python frames as its site
    (fragscope_block_site, through the observer's AgentApi). b"+N" for N blocks."""
    import sys
    holder = sys.modules.get("_fragscope_injected")
    send = getattr(getattr(holder, "api", None), "block_site_frames", None)
    if send is None:
        return b"+0"
    for address, device, frames in _fragscope_sites:
        send(address, device, frames)
    return b"+%d" % len(_fragscope_sites)

_fragscope_sites = []
observer = b"not installed"
try:
    result = _fragscope_torch_state()
    if isinstance(result, tuple):
        result, observer = result
except BaseException as error:
    result = ("!%s: %s" % (type(error).__name__, error)).encode("utf-8", "replace")[:900]
)PY";

// Run in the import's namespace once its blocks are in the live table: gives them the Python
// frames torch's memory history kept (a site needs the block's live entry). Leaves `result`.
constexpr char kSitesCode[] = R"PY(
try:
    result = _fragscope_send_sites()
except BaseException as error:
    result = ("!%s: %s" % (type(error).__name__, error)).encode("utf-8", "replace")[:300]
)PY";

// A sync (an attach's start or detach), run like the import: the forwarder the import primed
// (its OOM observer's), or the adapter fallback's, forwards PyTorch's blocks as they are now;
// with the adapter's C++ extension instead, its pending Python sites are reported.
// Leaves `result`: b"+N" (N block events), b"-why" (nothing to sync) or b"!error".
constexpr char kSyncCode[] = R"PY(
def _fragscope_torch_sync():
    import sys
    # An injected import's forwarder, else the adapter's fallback in a process started with the
    # agent (sitecustomize.py); the adapter's C++ extension follows every block and needs none.
    forwarder = getattr(sys.modules.get("_fragscope_injected"), "forwarder", None)
    if forwarder is None:
        forwarder = getattr(sys.modules.get("sitecustomize"), "_FORWARDER", None)
    if forwarder is None or not hasattr(forwarder, "events"):
        adapter = sys.modules.get("sitecustomize")
        extension = getattr(adapter, "_EXTENSION", None)
        if extension is not None and getattr(adapter, "_SITES_ON", False):
            # The C++ extension follows every block; what it has not reported yet is the Python
            # sites of blocks made since its last flush (every 5 s, at new peaks): report them
            # now, so the tensors made just before a detach are named too.
            adapter._flush_sites(extension)
            return b"-the adapter's C++ extension follows every block (Python sites reported)"
        return (b"-no PyTorch snapshot diff in this process (no import, and the adapter's "
                b"fallback is not running)")
    before = forwarder.events
    forwarder.sync(_fragscope_sync_why)
    return b"+%d" % (forwarder.events - before)

try:
    result = _fragscope_torch_sync()
except BaseException as error:
    result = ("!%s: %s" % (type(error).__name__, error)).encode("utf-8", "replace")[:900]
)PY";

enum : uint64_t { kRecordSegment = 1, kRecordBlock = 2 };
enum : uint64_t { kSegmentExpandable = 1, kSegmentNoActiveBlock = 2 };
enum : uint64_t { kBlockPending = 1 };
constexpr size_t kRecordWords = 7;

enum JobState : int { kWaiting = 0, kRunning = 1, kDone = 2, kAbandoned = 3 };

// Shared by the caller and the helper thread; the last of the two to let go frees it (the
// caller may return long before an abandoned helper ever gets the GIL).
struct Job {
  std::atomic<int> refs;
  std::atomic<int> state;
  PythonApi py;
  FragscopeTorchImport result;
  char adapter_dir[4096];  // copied: the caller's string is gone once it gave up waiting
  bool sync;               // a sync (kSyncCode), not the import
  char why[32];            // the sync's label word
};

// The path the agent was loaded from (for ctypes in the import's Python code).
const char* AgentLibraryPath() {
  static char path[4096];
  Dl_info info;
  if (path[0] == '\0' && dladdr(reinterpret_cast<void*>(&AgentLibraryPath), &info) != 0 &&
      info.dli_fname != nullptr) {
    snprintf(path, sizeof(path), "%s", info.dli_fname);
  }
  return path;
}

void Unref(Job* job) {
  if (job->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) free(job);
}

void Say(FragscopeTorchImport* out, const char* format, ...) {
  const size_t used = strnlen(out->message, sizeof(out->message));
  if (used + 1 >= sizeof(out->message)) return;
  va_list args;
  va_start(args, format);
  vsnprintf(out->message + used, sizeof(out->message) - used, format, args);
  va_end(args);
}

uint64_t MonotonicMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

// The object that defines the Python C API: the global scope (a `python3` executable exports
// it, or has libpython among its dependencies), else a libpython loaded with RTLD_LOCAL (an
// embedding program). False when there is none. (RTLD_DEFAULT is a null handle: hence `*out`.)
bool PythonHandle(void** out) {
  DlsymFn lookup = RealDlsym();
  if (lookup == nullptr) return false;
  if (lookup(RTLD_DEFAULT, "Py_IsInitialized") != nullptr) {
    *out = RTLD_DEFAULT;
    return true;
  }
  struct Search {
    char name[512] = {};
  } search;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        const char* name = info->dlpi_name;
        if (name == nullptr || strstr(name, "libpython3") == nullptr) return 0;
        snprintf(static_cast<Search*>(data)->name, sizeof(Search::name), "%s", name);
        return 1;
      },
      &search);
  if (search.name[0] == '\0') return false;
  // Already loaded (NOLOAD): this only takes a reference, never loads Python into a process.
  *out = dlopen(search.name, RTLD_NOW | RTLD_NOLOAD);
  return *out != nullptr;
}

bool LoadPythonApi(PythonApi* py) {
  void* handle = nullptr;
  if (!PythonHandle(&handle)) return false;
  DlsymFn lookup = RealDlsym();
  auto get = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(lookup(handle, name));
    return *fn != nullptr;
  };
  if (!get(&py->is_finalizing, "Py_IsFinalizing")) get(&py->is_finalizing, "_Py_IsFinalizing");
  return get(&py->is_initialized, "Py_IsInitialized") &&
         get(&py->gil_ensure, "PyGILState_Ensure") && get(&py->gil_release, "PyGILState_Release") &&
         get(&py->dict_new, "PyDict_New") &&
         get(&py->dict_set_item_string, "PyDict_SetItemString") &&
         get(&py->unicode_from_string, "PyUnicode_FromString") &&
         get(&py->dict_get_item_string, "PyDict_GetItemString") &&
         get(&py->eval_get_builtins, "PyEval_GetBuiltins") &&
         get(&py->run_string_flags, "PyRun_StringFlags") &&
         get(&py->bytes_as_string_and_size, "PyBytes_AsStringAndSize") &&
         get(&py->err_clear, "PyErr_Clear") && get(&py->dec_ref, "Py_DecRef");
}

FragscopeTorchDevice* DeviceEntry(FragscopeTorchImport* out, int32_t device) {
  for (uint32_t i = 0; i < out->device_count; ++i) {
    if (out->devices[i].device == device) return &out->devices[i];
  }
  if (out->device_count == kFragscopeTorchMaxDevices) return nullptr;
  FragscopeTorchDevice* d = &out->devices[out->device_count++];
  *d = FragscopeTorchDevice{};
  d->device = device;
  DescribeDevice(device);  // before the wake, which samples the described devices' free/total
  return d;
}

// InsertLive (recorder.h), saying whether the table took the entry.
bool Enter(const LiveEntry& entry) {
  size_t index = 0;
  InsertLive(entry, &index);
  return index != SIZE_MAX;
}

// Enters the pages of an expandable segment's mapped run [address, address + size) as the
// driver has them: each mapping, and the handle behind it. The handle is read with
// cuMemRetainAllocationHandle (documented to give the handle value the memory was mapped with,
// so the program's later unmap and release match it) and the reference that takes is given
// back at once. Both go through the real functions: in an injected agent the exported ones are
// patched to jump to the wrappers, which would record them. There is no reservation to enter:
// no driver call tells its extent, so the collector infers it from the mappings (their pages
// touch) and widens it as the program maps more. Returns the bytes entered; fewer than `size`
// when the driver could not list a page (the rest stays untracked).
uint64_t EnterPages(int32_t device, uint64_t address, uint64_t size, FragscopeTorchDevice* d,
                    FragscopeTorchImport* out) {
  auto range = Driver().mem_get_address_range;
  auto retain = reinterpret_cast<CUresult (*)(CUmemGenericAllocationHandle*, void*)>(
      DriverReal(DriverHookId::k_cuMemRetainAllocationHandle));
  auto release = reinterpret_cast<CUresult (*)(CUmemGenericAllocationHandle)>(
      DriverReal(DriverHookId::k_cuMemRelease));
  if (range == nullptr || retain == nullptr || release == nullptr) return 0;
  PrimaryContextScope context(device);
  if (!context.ok()) return 0;
  uint64_t entered = 0;
  for (uint64_t at = address; at - address < size;) {
    CUdeviceptr base = 0;
    size_t bytes = 0;
    if (range(&base, &bytes, at) != CUDA_SUCCESS || bytes == 0 || base > at || base + bytes <= at) {
      break;
    }
    CUmemGenericAllocationHandle handle = 0;
    if (retain(&handle, reinterpret_cast<void*>(base)) != CUDA_SUCCESS) break;
    release(handle);
    LiveEntry h = ZeroLiveEntry();
    h.cls = LiveClass::kHandle;
    h.api = Api::k_torch_snapshot;
    h.kind = MemoryKind::kDevice;
    h.device = device;
    h.address = handle;
    h.size = bytes;  // what the mapping proves; PyTorch maps each page's handle whole
    h.refs = 1;      // PyTorch's, released after its unmap
    h.maps = 1;
    // Only the part inside the run, which PyTorch says is mapped: a driver that answered with
    // a wider range (more than one page, or unmapped address space) must not make the model
    // believe in memory the run does not hold.
    const uint64_t end = std::min<uint64_t>(base + bytes, address + size);
    LiveEntry m = ZeroLiveEntry();
    m.cls = LiveClass::kMapping;
    m.api = Api::k_torch_snapshot;
    m.kind = MemoryKind::kDevice;
    m.device = device;
    m.address = at;
    m.size = end - at;
    m.offset = at - base;
    m.handle = handle;
    if (!Enter(h) || !Enter(m)) {
      ++out->table_full;
      break;
    }
    ++d->pages;
    entered += end - at;
    at = end;
  }
  return entered;
}

// Enters the records of the Python code's answer. With the GIL held: Python code that
// gives memory back (torch.cuda.empty_cache()) cannot run meanwhile.
void EnterRecords(const uint64_t* words, size_t count, FragscopeTorchImport* out) {
  uint32_t devices_left_out = 0;
  // Blocks are entered only inside what was entered of their segment: [usable_begin,
  // usable_end). A block with no segment around it would be an orphan.
  uint64_t usable_begin = 0, usable_end = 0;
  for (size_t i = 0; i + kRecordWords <= count; i += kRecordWords) {
    const uint64_t* r = words + i;
    const int32_t device = static_cast<int32_t>(r[1]);
    FragscopeTorchDevice* d = DeviceEntry(out, device);
    if (d == nullptr) {
      ++devices_left_out;
      continue;
    }
    LiveEntry e{};
    e.device = device;
    e.address = r[2];
    e.size = r[3];
    e.stream = r[4];
    e.kind = MemoryKind::kDevice;
    if (r[0] == kRecordSegment) {
      usable_begin = usable_end = 0;
      uint64_t usable = e.size;
      if ((r[6] & kSegmentExpandable) != 0) {
        usable = EnterPages(device, e.address, e.size, d, out);
        d->reserved_bytes += usable;
        if (usable < e.size) {
          // The rest is untracked: with the device described, the report shows it in the
          // device's untracked bytes.
          ++d->skipped_segments;
          d->skipped_bytes += e.size - usable;
          if (usable == 0) continue;
        } else {
          ++d->expandable_runs;
        }
      } else {
        // A cudaMalloc segment, as the snapshot importer enters one (collector/torch): pool 0
        // (no CUDA memory pool), the segment's stream.
        e.cls = LiveClass::kAllocation;
        e.api = Api::k_torch_snapshot;
        if (!Enter(e)) {
          ++out->table_full;
          continue;
        }
        ++d->segments;
        d->reserved_bytes += e.size;
      }
      usable_begin = e.address;
      usable_end = e.address + usable;
      if ((r[6] & kSegmentNoActiveBlock) != 0) {
        // All free: a zero-byte block at its start tells the collector the segment is carved
        // by PyTorch (annotated, its bytes cached), not one opaque allocation.
        LiveEntry mark{};
        mark.cls = LiveClass::kBlock;
        mark.api = Api::k_fragscope_block_alloc;
        mark.device = device;
        mark.address = e.address;
        mark.stream = e.stream;
        mark.pool = r[5];
        if (!Enter(mark)) ++out->table_full;
      }
    } else if (r[0] == kRecordBlock && e.address >= usable_begin && e.address < usable_end &&
               e.size <= usable_end - e.address) {
      e.cls = LiveClass::kBlock;
      e.api = Api::k_fragscope_block_alloc;
      e.pool = r[5];
      if ((r[6] & kBlockPending) != 0) e.flags = kLivePendingFree;
      if (!Enter(e)) {
        ++out->table_full;
        continue;
      }
      ++d->blocks;
      d->allocated_bytes += e.size;
    }
  }
  if (devices_left_out > 0) {
    Say(out, "%u segments and blocks of devices beyond the first %d were not imported; ",
        devices_left_out, kFragscopeTorchMaxDevices);
  }
  if (out->table_full > 0) {
    // The load at the first refusal says whether the table was really full (live_table.h: at
    // 98 % of its slots or more) and how much larger it must be.
    const LiveTable& live = Agent().live;
    Say(out,
        "the live table refused %u entries (full at %zu of its %zu slots live; set "
        "FRAGSCOPE_LIVE_SLOTS=%zu or more in the program's environment before it starts); ",
        out->table_full, live.live_at_first_overflow(), live.slots(), 2 * live.slots());
  }
}

// With the GIL held: runs `code` in a fresh namespace that also holds the agent's path, the
// adapter folder and a sync's label as strings. For a `result` of b"+..." returns the namespace
// (the caller dec_refs it) with the bytes after the '+' in *data/*size; otherwise returns nullptr
// with the status and the reason (b"-why", b"!error", or the code's failure) in *out.
PyObj* RunInFreshNamespace(const Job* job, const char* code, const char* what, char** data,
                           long* size, FragscopeTorchImport* out) {
  const PythonApi& py = job->py;
  PyObj* globals = py.dict_new();
  if (globals == nullptr) {
    py.err_clear();
    out->status = kFragscopeTorchFailed;
    Say(out, "PyDict_New failed");
    return nullptr;
  }
  // Before Python 3.10 code run in a dict without __builtins__ cannot even import.
  PyObj* builtins = py.eval_get_builtins();
  if (builtins != nullptr) py.dict_set_item_string(globals, "__builtins__", builtins);
  auto set_string = [&](const char* name, const char* value) {
    PyObj* text = py.unicode_from_string(value);
    if (text == nullptr) {
      py.err_clear();
      text = py.unicode_from_string("");
    }
    if (text != nullptr) {
      py.dict_set_item_string(globals, name, text);  // takes its own reference
      py.dec_ref(text);
    }
  };
  set_string("_fragscope_agent_path", AgentLibraryPath());
  set_string("_fragscope_adapter_dir", job->adapter_dir);
  set_string("_fragscope_sync_why", job->why);
  PyObj* ran = py.run_string_flags(code, kPyFileInput, globals, globals, nullptr);
  if (ran == nullptr) {
    py.err_clear();
    out->status = kFragscopeTorchFailed;
    Say(out, "the %s's Python code did not run (a Python that is not CPython 3?)", what);
    py.dec_ref(globals);
    return nullptr;
  }
  py.dec_ref(ran);
  PyObj* result = py.dict_get_item_string(globals, "result");
  if (result == nullptr || py.bytes_as_string_and_size(result, data, size) != 0 || *size < 1) {
    py.err_clear();
    out->status = kFragscopeTorchFailed;
    Say(out, "the %s's Python code left no answer", what);
    py.dec_ref(globals);
    return nullptr;
  }
  if ((*data)[0] != '+') {
    out->status = (*data)[0] == '-' ? kFragscopeTorchNoTorch : kFragscopeTorchFailed;
    Say(out, "%.*s", static_cast<int>(*size - 1), *data + 1);
    py.dec_ref(globals);
    return nullptr;
  }
  ++*data;
  --*size;
  return globals;
}

// With the GIL held: runs the import's Python code and enters what it found.
void RunImport(Job* job) {
  const PythonApi& py = job->py;
  FragscopeTorchImport* out = &job->result;
  char* data = nullptr;
  long size = 0;
  PyObj* globals = RunInFreshNamespace(job, kPythonCode, "import", &data, &size, out);
  if (globals == nullptr) return;
  out->status = kFragscopeTorchImported;
  PyObj* observer = py.dict_get_item_string(globals, "observer");
  char* why = nullptr;
  long why_size = 0;
  if (observer != nullptr && py.bytes_as_string_and_size(observer, &why, &why_size) == 0) {
    if (why_size == 0) {
      out->oom_observer = 1;
    } else {
      Say(out, "no OOM observer (%.*s): an OOM is judged against the blocks of the attach; ",
          static_cast<int>(why_size), why);
    }
  } else {
    py.err_clear();
  }
  const size_t words = static_cast<size_t>(size) / sizeof(uint64_t);
  // The bytes object's buffer is not 8-aligned past its first byte: copy the words out.
  uint64_t chunk[kRecordWords * 64];
  for (size_t at = 0; at < words; at += kRecordWords * 64) {
    const size_t n = words - at < kRecordWords * 64 ? words - at : kRecordWords * 64;
    memcpy(chunk, data + at * sizeof(uint64_t), n * sizeof(uint64_t));
    EnterRecords(chunk, n, out);
  }
  PyObj* ran = py.run_string_flags(kSitesCode, kPyFileInput, globals, globals, nullptr);
  if (ran == nullptr) {
    py.err_clear();
  } else {
    py.dec_ref(ran);
    PyObj* sites = py.dict_get_item_string(globals, "result");
    char* text = nullptr;
    long text_size = 0;
    if (sites != nullptr && py.bytes_as_string_and_size(sites, &text, &text_size) == 0 &&
        text_size > 1) {
      long blocks = 0;
      if (text[0] == '+') {
        for (long i = 1; i < text_size && text[i] >= '0' && text[i] <= '9'; ++i) {
          blocks = blocks * 10 + (text[i] - '0');
        }
      }
      if (blocks > 0) {
        Say(out, "%ld %s the Python frames torch's memory history kept as %s site; ", blocks,
            blocks == 1 ? "block has" : "blocks have", blocks == 1 ? "its" : "their");
      } else if (text[0] == '!') {
        Say(out, "no Python sites (%.*s); ", static_cast<int>(text_size - 1), text + 1);
      }
    } else {
      py.err_clear();
    }
  }
  py.dec_ref(globals);
}

// With the GIL held: runs the detach's sync.
void RunSync(Job* job) {
  FragscopeTorchImport* out = &job->result;
  char* data = nullptr;
  long size = 0;
  PyObj* globals = RunInFreshNamespace(job, kSyncCode, "sync", &data, &size, out);
  if (globals == nullptr) return;
  out->status = kFragscopeTorchImported;
  out->synced_events = static_cast<uint32_t>(strtoul(std::string(data, size).c_str(), nullptr, 10));
  job->py.dec_ref(globals);
}

void* HelperMain(void* arg) {
  Job* job = static_cast<Job*>(arg);
  // The program's signals are for its own threads.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const uint64_t start = MonotonicMs();
  const int gil = job->py.gil_ensure();
  int expected = kWaiting;
  if (job->state.compare_exchange_strong(expected, kRunning, std::memory_order_acq_rel)) {
    job->result.waited_ms = static_cast<uint32_t>(MonotonicMs() - start);
    if (job->sync) {
      RunSync(job);
    } else {
      RunImport(job);
    }
    job->state.store(kDone, std::memory_order_release);
  }
  // Abandoned (the caller gave up waiting, the stream may have started): enter nothing.
  job->py.gil_release(gil);
  Unref(job);
  return nullptr;
}

// Runs the import (or, with `sync`, the detach's sync) on a helper thread that takes the GIL,
// waiting at most `wait_ms` for it.
void RunUnderGil(uint32_t wait_ms, const char* adapter_dir, bool sync, const char* why,
                 FragscopeTorchImport* out) {
  *out = FragscopeTorchImport{};
  out->magic = kFragscopeTorchMagic;
  out->abi = kFragscopeTorchAbi;
  PythonApi py;
  if (!LoadPythonApi(&py)) {
    out->status = kFragscopeTorchNoPython;
    Say(out, "not a Python process: no CPython C API in it");
    return;
  }
  if (py.is_initialized() == 0) {
    out->status = kFragscopeTorchNoPython;
    Say(out, "Python is loaded but not initialized");
    return;
  }
  if (py.is_finalizing != nullptr && py.is_finalizing() != 0) {
    // A thread that asks for the GIL now would hang (or be ended) by the finalization.
    out->status = kFragscopeTorchNoPython;
    Say(out, "the Python interpreter is shutting down");
    return;
  }
  Job* job = static_cast<Job*>(calloc(1, sizeof(Job)));
  if (job == nullptr) {
    out->status = kFragscopeTorchFailed;
    Say(out, "out of memory");
    return;
  }
  job->refs.store(2);
  job->state.store(kWaiting);
  job->py = py;
  job->result = *out;
  job->sync = sync;
  snprintf(job->adapter_dir, sizeof(job->adapter_dir), "%s",
           adapter_dir != nullptr ? adapter_dir : "");
  snprintf(job->why, sizeof(job->why), "%s", why != nullptr ? why : "");
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, HelperMain, job);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    free(job);
    out->status = kFragscopeTorchFailed;
    Say(out, "cannot start a thread for the %s: %s", sync ? "sync" : "import", strerror(rc));
    return;
  }
  const uint64_t start = MonotonicMs();
  const timespec tick{0, 1000000};  // 1 ms
  for (;;) {
    const int state = job->state.load(std::memory_order_acquire);
    if (state == kDone) break;
    if (state == kWaiting && MonotonicMs() - start >= wait_ms) {
      int expected = kWaiting;
      if (job->state.compare_exchange_strong(expected, kAbandoned, std::memory_order_acq_rel)) {
        out->status = kFragscopeTorchTimedOut;
        out->waited_ms = static_cast<uint32_t>(MonotonicMs() - start);
        Say(out,
            "the Python interpreter's lock (GIL) was not free within %u ms (a thread holds it in "
            "a long call); nothing was %s",
            wait_ms, sync ? "forwarded" : "imported");
        Unref(job);
        return;
      }
      continue;  // it got the GIL just now: the import is running, wait for it
    }
    nanosleep(&tick, nullptr);
  }
  *out = job->result;
  Unref(job);
}

}  // namespace

void ImportTorchState(uint32_t wait_ms, const char* adapter_dir, FragscopeTorchImport* out) {
  RunUnderGil(wait_ms, adapter_dir, false, "", out);
}

void SyncTorchState(uint32_t wait_ms, const char* why, FragscopeTorchImport* out) {
  RunUnderGil(wait_ms, "", true, why, out);
}

}  // namespace fragscope::agent
