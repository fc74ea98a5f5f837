#include "agent.h"

#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include <new>

#include "attach/inject_attach.h"
#include "hooks/driver_api.h"
#include "hooks/hook_table.h"
#include "recording/recorder.h"
#include "recording/stack_capture.h"
#include "recording/unwind_rules.h"
#include "shipping/drain.h"

extern "C" int __cxa_atexit(void (*fn)(void*), void* arg, void* dso_handle);

namespace fragscope::agent {

constinit AgentStorage g_agent_storage;
constinit std::atomic<int> g_agent_init{0};  // 0 not started, 1 running, 2 done

namespace {

thread_local constinit bool t_initializing __attribute__((tls_model("initial-exec"))) = false;

uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The agent's own text, so stacks skip its frames and lookups never wrap a wrapper.
void FindOwnText() {
  struct Search {
    uintptr_t probe;
    uintptr_t begin = 0;
    uintptr_t end = 0;
  } search{reinterpret_cast<uintptr_t>(&FindOwnText)};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
          uintptr_t b = info->dlpi_addr + ph.p_vaddr;
          if (s->probe >= b && s->probe < b + ph.p_memsz) {
            s->begin = b;
            s->end = b + ph.p_memsz;
            return 1;
          }
        }
        return 0;
      },
      &search);
  if (search.end != 0) {
    SetSkippedRange(search.begin, search.end);
    SetAgentTextRange(search.begin, search.end);
  }
  // Stacks through code without frame pointers need glibc 2.35's _dl_find_object; looked up
  // rather than linked so the agent still loads on an older glibc (frame-pointer walks there).
  SetFindObject(reinterpret_cast<FindObjectFn>(RealDlsym()(RTLD_DEFAULT, "_dl_find_object")));
}

void ChildAfterFork() {
  AgentState& a = Agent();
  if (g_agent_init.load() != 2) return;
  // Only this thread exists now. Nothing the parent had in flight is ours.
  CurrentThread().tid = 0;
  DrainAfterFork();
  a.source_stacks.ResetAfterFork();  // its lock may have been held by a parent thread
  // A dormant agent's child is dormant too, with an empty table and a control socket of its
  // own (created with its first event).
  const bool dormant = a.config.dormant && a.recording.load();
  if (!a.recording.load() && !a.config.follow_fork) return;
  a.recording.store(false);
  a.shipping.store(false);
  if (a.ring.bytes() > 0) a.ring.Reset();
  a.live.Clear();
  a.logs.ResetAfterFork(/*open=*/dormant);
  a.stacks.ResetAfterFork();
  for (DeviceSlot& d : a.devices) {
    d.state.store(0);
    d.sent = 0;
    d.last_sample_ns.store(0);
  }
  a.seq.store(0);
  a.ring_drops.store(0);
  a.late.store(false);
  if (dormant) {
    a.recording.store(true);
  } else if (a.config.follow_fork) {
    ++a.stream_index;
    a.monotonic_at_start_ns = ClockNs(CLOCK_MONOTONIC);
    a.realtime_at_start_ns = ClockNs(CLOCK_REALTIME);
    a.recording.store(true);
    a.shipping.store(true);
  }
}

// The last of our exit steps for a preloaded agent (see Initialize): the End frame.
void AtExit(void*) {
  if (g_agent_init.load() != 2 || !Agent().recording.load()) return;
  DrainWriteEnd();
}

void Initialize() {
  AgentState& a = Agent();
  LoadConfig(&a.config);
  a.monotonic_at_start_ns = ClockNs(CLOCK_MONOTONIC);
  a.realtime_at_start_ns = ClockNs(CLOCK_REALTIME);
  FindOwnText();
  // dlopen()ed by `fragscope attach`: the environment is not ours to follow (the program may
  // have FRAGSCOPE_* set without the preload); AgentStartInjected starts it.
  if (LoadedIntoRunningProcess()) return;
  if (!a.config.dormant && !a.config.has_output()) return;
  if (!a.live.Init(a.config.live_slots)) return;
  if (a.config.dormant_logs) a.logs.Init(/*open=*/a.config.dormant);
  // Dormant: only the live table, so a later attach starts from an exact snapshot; the ring
  // and the stack table are mapped when it wakes (drain.cc).
  if (!a.config.dormant) {
    if (!a.ring.Init(a.config.ring_bytes)) return;
    if (a.config.stack_depth > 0 && !a.stacks.Init(a.config.stack_slots, a.config.stack_depth)) {
      a.config.stack_depth = 0;
    }
  }
  pthread_atfork(nullptr, nullptr, ChildAfterFork);
  // Exit order for a preloaded agent: the program's atexit handlers and static destructors,
  // then _dl_fini (every library's destructor, ours included, in an order we do not control:
  // libraries may still free CUDA memory after ours ran), then this handler, registered before
  // __libc_start_main registered _dl_fini. So our destructor stops the drain thread (hooks then
  // write inline) and this handler writes End, last. Registered with no DSO handle: atexit()
  // in a library would tie it to the library and run it inside our own destructor.
  __cxa_atexit(AtExit, nullptr, nullptr);
  a.shipping.store(!a.config.dormant, std::memory_order_release);
  a.recording.store(true, std::memory_order_release);
}

// Runs before main (and before most other libraries' constructors, as a preload).
__attribute__((constructor)) void AgentLoad() {
  OwnSignalHandlerTable();
  AgentRecording();
}

// Runs in _dl_fini, after the program's atexit handlers; other libraries' destructors may run
// after it. Stops the drain thread; AtExit writes End (or, if it already ran because the agent
// was loaded late, this only ships what came since).
__attribute__((destructor)) void AgentUnload() {
  if (g_agent_init.load() != 2 || !Agent().recording.load()) return;
  if (Agent().injected) {
    // Loaded last, so finalized first: libraries finalized after us may still free memory.
    // Close the stream here (as a detach would) and ship nothing after its End.
    Agent().shipping.store(false, std::memory_order_seq_cst);
    DrainWriteEnd();
    return;
  }
  DrainAtExit();
}

}  // namespace

bool AgentStartInjected() {
  AgentRecording();  // the constructor already ran; this only waits for it
  AgentState& a = Agent();
  if (a.injected) return true;
  if (a.recording.load() || !LoadedIntoRunningProcess()) return false;
  AgentCodeScope agent_code;
  // Dormant with only the live table, like FRAGSCOPE_DORMANT=1; the environment's outputs do
  // not apply (the stream goes where `wake` says).
  a.config.dormant = true;
  a.config.output_path[0] = '\0';
  a.config.socket_path[0] = '\0';
  if (!a.live.Init(a.config.live_slots)) return false;
  if (a.config.dormant_logs) a.logs.Init(/*open=*/true);
  pthread_atfork(nullptr, nullptr, ChildAfterFork);
  // No atexit handler: registered now it would run before the program's own; AgentUnload
  // ends the stream instead.
  a.injected = true;
  a.shipping.store(false, std::memory_order_release);
  a.recording.store(true, std::memory_order_release);
  EnsureBackgroundThread();  // its control socket is how `attach` wakes us
  return true;
}

bool AgentRecordingSlow() {
  if (g_agent_init.load(std::memory_order_acquire) == 2) {
    return g_agent_storage.state.recording.load(std::memory_order_relaxed);
  }
  if (t_initializing) return false;  // a hook reached from our own initialization
  // Initialization may set errno; a hook that records nothing does not save and restore it.
  const int saved_errno = errno;
  int expected = 0;
  if (g_agent_init.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    t_initializing = true;
    {
      AgentCodeScope agent_code;
      Initialize();
    }
    t_initializing = false;
    g_agent_init.store(2, std::memory_order_release);
  } else {
    while (g_agent_init.load(std::memory_order_acquire) != 2) sched_yield();
  }
  errno = saved_errno;
  return g_agent_storage.state.recording.load(std::memory_order_relaxed);
}

}  // namespace fragscope::agent
