#include "attach/inject_attach.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "agent.h"
#include "attach/inline_patch.h"
#include "fragscope/attach_contract.h"
#include "hooks/driver_api.h"
#include "hooks/hook_table.h"
#include "python/python_state.h"
#include "recording/recorder.h"

namespace fragscope::agent {
namespace {

static_assert(kDriverHookCount <= kFragscopeInjectMaxPatches);
static_assert(kMaxPatchBytes <= sizeof(FragscopeInjectPatch::original));

constinit FragscopeInjectTable g_table{};
constinit InlinePatch g_patches[kFragscopeInjectMaxPatches]{};
constinit std::atomic<int> g_loaded_late{-1};  // -1 not computed, 0 preloaded, 1 late

void Append(const char* format, ...) {
  const size_t used = strnlen(g_table.message, sizeof(g_table.message));
  if (used + 1 >= sizeof(g_table.message)) return;
  va_list args;
  va_start(args, format);
  vsnprintf(g_table.message + used, sizeof(g_table.message) - used, format, args);
  va_end(args);
}

void Fail(const char* format, ...) {
  g_table.status = 1;
  g_table.count = 0;
  va_list args;
  va_start(args, format);
  vsnprintf(g_table.message, sizeof(g_table.message), format, args);
  va_end(args);
}

// Prepares the patches (once). Fills g_table.
void PreparePatches() {
  char why[512] = {};
  // Never destroyed: its trampolines stay in use after a detach, until the process ends.
  static InlinePatcher* const patcher_ptr = new InlinePatcher;
  InlinePatcher& patcher = *patcher_ptr;
  if (!patcher.Init(why, sizeof(why))) {
    Fail("%s", why);
    return;
  }
  void* libcuda = LibcudaHandle();
  if (libcuda == nullptr) {
    Fail("libcuda.so.1 is not loaded in this process");
    return;
  }
  DlsymFn lookup = RealDlsym();
  uint32_t count = 0;
  for (size_t i = 0; i < kDriverHookCount; ++i) {
    const DriverHookId id = static_cast<DriverHookId>(i);
    const DriverHook& hook = GetDriverHook(id);
    // Lookup functions need no patch: whatever they hand out is a patched function.
    if (hook.kind == HookKind::kRoute) continue;
    void* fn = lookup(libcuda, hook.symbol);
    if (fn == nullptr) continue;  // not exported by this driver
    Dl_info info{};
    void* sym_entry = nullptr;
    if (dladdr1(fn, &info, &sym_entry, RTLD_DL_SYMENT) == 0 || info.dli_fname == nullptr ||
        strstr(info.dli_fname, "libcuda") == nullptr) {
      continue;  // defined elsewhere (not libcuda's own code)
    }
    // Two names for one function (an alias): one patch, both wrappers' real is its trampoline.
    int same = -1;
    for (uint32_t j = 0; j < count; ++j) {
      if (g_patches[j].target == reinterpret_cast<uintptr_t>(fn)) same = static_cast<int>(j);
    }
    if (same >= 0) {
      SetDriverReal(id, g_patches[same].trampoline);
      continue;
    }
    InlinePatch p;
    const auto* sym = static_cast<const ElfW(Sym)*>(sym_entry);
    const size_t size = sym != nullptr ? static_cast<size_t>(sym->st_size) : 0;
    if (!patcher.Prepare(fn, size, hook.wrapper, &p, why, sizeof(why))) {
      ++g_table.refused;
      Append("%s: %s; ", hook.symbol, why);
      continue;
    }
    // The wrapper must call the trampoline: the exported function will jump to the wrapper.
    SetDriverReal(id, p.trampoline);
    if (DriverReal(id) != p.trampoline) {
      ++g_table.refused;
      Append("%s: its wrapper already calls another function; ", hook.symbol);
      continue;
    }
    g_patches[count] = p;
    FragscopeInjectPatch& out = g_table.patches[count];
    out.address = p.target;
    out.length = p.length;
    memcpy(out.original, p.original, p.length);
    memcpy(out.patch, p.patch, p.length);
    snprintf(out.name, sizeof(out.name), "%s", hook.symbol);
    ++count;
  }
  if (!patcher.Seal()) {
    Fail("cannot make the trampolines executable (mprotect refused PROT_EXEC)");
    return;
  }
  g_table.count = count;
  if (count == 0) {
    g_table.status = 1;
    Append("no tracked driver function of this libcuda could be patched");
  }
}

}  // namespace

bool LoadedIntoRunningProcess() {
  int known = g_loaded_late.load(std::memory_order_acquire);
  if (known >= 0) return known == 1;
  // Preloaded objects come before the program's dependencies (libc among them) in the link
  // map; a dlopen()ed one comes after them.
  struct Search {
    uintptr_t self;
    uintptr_t libc;
    int index = 0;
    int self_index = -1;
    int libc_index = -1;
  } search{reinterpret_cast<uintptr_t>(&LoadedIntoRunningProcess),
           reinterpret_cast<uintptr_t>(&dl_iterate_phdr)};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const uintptr_t b = info->dlpi_addr + ph.p_vaddr;
          if (s->self >= b && s->self < b + ph.p_memsz) s->self_index = s->index;
          if (s->libc >= b && s->libc < b + ph.p_memsz) s->libc_index = s->index;
        }
        ++s->index;
        return 0;
      },
      &search);
  const bool late =
      search.self_index >= 0 && search.libc_index >= 0 && search.libc_index < search.self_index;
  g_loaded_late.store(late ? 1 : 0, std::memory_order_release);
  return late;
}

}  // namespace fragscope::agent

using fragscope::agent::Agent;

// The entry point `fragscope attach` calls (through ptrace) after dlopen(): see inject_attach.h.
// Returns the table the attach command reads; never null.
extern "C" __attribute__((visibility("default"))) FragscopeInjectTable* fragscope_inject_start() {
  using namespace fragscope::agent;
  AgentCodeScope agent_code;  // driver calls made here are not the program's
  FragscopeInjectTable& t = g_table;
  t.magic = kFragscopeInjectMagic;
  t.abi = kFragscopeInjectAbi;
  if (Agent().injected) {
    // A later attach: the previous detach removed the patches, so nothing the table holds was
    // seen to the end. Only threads still inside a wrapper from before could touch it now.
    if (t.status == 0) {
      Agent().logs.FoldAll(Agent().live);  // what the logs still hold goes with the table
      Agent().live.Clear();
    }
    return &t;
  }
  if (!LoadedIntoRunningProcess()) {
    Fail("the agent is preloaded in this process; attach wakes it through its control socket");
    return &t;
  }
  t.status = 0;
  t.message[0] = '\0';
  PreparePatches();
  if (t.status != 0) return &t;
  if (!AgentStartInjected()) {
    Fail("the agent could not start (its live table could not be mapped)");
  }
  return &t;
}

// Called by `fragscope attach` (through ptrace) after fragscope_inject_start() and after the
// patches are written, before `wake`: imports PyTorch's caching-allocator state into the live
// table when the process runs CPython with torch and CUDA initialized (python_state.h), so the
// first snapshot is exact for PyTorch's memory, and installs PyTorch's OOM observer with the
// snapshot diff of `adapter_dir` (the PyTorch adapter's folder; empty: none). Waits at most
// `wait_ms` for the GIL. Returns
// the answer the attach command reads; never null.
extern "C" __attribute__((visibility("default"))) FragscopeTorchImport*
fragscope_inject_import_torch(uint32_t wait_ms, const char* adapter_dir) {
  using namespace fragscope::agent;
  static constinit FragscopeTorchImport answer{};
  if (!Agent().injected) {
    answer = FragscopeTorchImport{};
    answer.magic = kFragscopeTorchMagic;
    answer.abi = kFragscopeTorchAbi;
    answer.status = kFragscopeTorchFailed;
    snprintf(answer.message, sizeof(answer.message),
             "the agent was not started by an injection (fragscope_inject_start first)");
    return &answer;
  }
  ImportTorchState(wait_ms, adapter_dir, &answer);
  // PyTorch's blocks are in the live table now, read from its state: a sync. Before the wake
  // the mark is not shipped; the wake's snapshot names it (Snapshot.last_blocks_synced_seq), so
  // the collector knows these blocks are the import's, and whether anything happened since.
  if (answer.status == kFragscopeTorchImported) {
    RecordMark("PyTorch blocks imported at the attach", /*blocks_synced=*/true);
  }
  return &answer;
}
