#include "shipping/drain.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "agent.h"
#include "attach/control.h"
#include "fragscope/attach_contract.h"
#include "python/python_state.h"
#include "recording/agent_log.h"
#include "recording/recorder.h"
#include "shipping/flight_recorder.h"
#include "shipping/frame_encoder.h"
#include "shipping/module_map.h"
#include "shipping/packed_event_run.h"
#include "shipping/transport.h"

#ifndef FRAGSCOPE_AGENT_VERSION
#define FRAGSCOPE_AGENT_VERSION "unknown"
#endif

namespace fragscope::agent {
namespace {

constexpr size_t kWriteBufferBytes = size_t{1} << 20;
constexpr uint64_t kIdleWaitNs = 10'000'000;   // drain thread wakes at least this often
constexpr uint64_t kBusyWaitNs = 2'000'000;    // between batches while events flow
constexpr uint64_t kFlushWaitNs = 50'000'000;  // a failing hook waits at most this long
constexpr int kDormantPollMs = 100;  // dormant: how long the thread sleeps in poll() at a time
constexpr int kMaxArgs = 256;
constexpr size_t kDrainBatch = 65536;  // records one DrainLocked pass pops at most
// A collector socket that failed is tried again after this long, doubling up to the maximum:
// a restarted collector picks the stream up within seconds, a gone one costs one failed
// connect() (microseconds on a Unix socket) every half minute.
constexpr uint64_t kReconnectFirstNs = 1'000'000'000;
constexpr uint64_t kReconnectMaxNs = 32'000'000'000;

struct DrainState {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  // serializes everything below
  pthread_t thread{};
  std::atomic<int> thread_state{0};  // 0 none, 1 starting/running, 2 stopped
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> wake_word{0};
  std::atomic<bool> wake_pending{false};
  std::atomic<uint64_t> written{0};  // ring positions below this are written (or dropped)

  // Under `lock`:
  bool stream_started = false;
  bool ended = false;
  Output output;
  uint8_t* buffer = nullptr;
  ModuleTracker modules;
  uint64_t reported_ring_drops = 0;
  uint64_t undeliverable = 0;  // events popped but not delivered (the output had failed)
  uint64_t in_writer = 0;      // events encoded into g_writer since it was last written out
  uint64_t in_file = 0;        // events written to the current file (lost if it is deleted)
  // Events above stream_start_seq skipped because a snapshot written after them holds their
  // effect (End.events_in_snapshots).
  uint64_t in_snapshots = 0;

  // Reconnect (FRAGSCOPE_SOCKET streams), under lock:
  uint32_t reconnects = 0;              // successful ones (Hello.resumed of the current stream)
  uint64_t reconnect_at_ns = 0;         // next attempt (0: none scheduled)
  uint64_t reconnect_wait_ns = 0;       // the current back-off
  uint64_t undeliverable_reported = 0;  // part of `undeliverable` already in a Drops frame
  uint64_t events_since_snapshot = 0;
  size_t last_snapshot_entries = 0;  // entries of the latest snapshot (sizes the next one)
  char path[Config::kPathCapacity + 32] = {};
  char exe[4096] = {};
  char host[256] = {};
  char cmdline[32768] = {};
  const char* argv[kMaxArgs] = {};
  int argc = 0;

  // Attach (control socket; the thread's own, not under `lock` except where noted):
  ControlServer control;
  bool stacks_mapped = false;  // under lock: the stack table was mapped by a wake
  bool attached = false;       // under lock: the stream was opened by `wake`
  uint64_t min_seq = 0;        // under lock: ring records at or below it are in the snapshot
  // Under lock: seq when this stream began; End.events_recorded counts from it. A resumed stream
  // or a new flight segment keeps it: their Drops and skipped records are counted against it.
  uint64_t stream_start_seq = 0;

  // Flight recorder (FRAGSCOPE_FLIGHT_MB; flight_recorder.h), under lock:
  uint64_t segment_bytes = 0;    // bytes written to the current file (not counting g_writer)
  uint64_t segment_head = 0;     // bytes of its head (header .. first snapshot)
  uint64_t segment_min_seq = 0;  // live-state records at or below it are in its snapshot
  uint64_t rotations = 0;

  // exec (DrainBeforeExec .. DrainAfterFailedExec), under lock:
  bool exec_end_written = false;  // an End (exec) was written for an exec that may yet fail
  uint64_t exec_end_at = 0;       // bytes of the file before that End
};

// constinit: hooks can run before this library's constructors.
constinit DrainState g_drain;

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
              static_cast<long>(timeout_ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr,
          0);
}

void Wake() {
  if (!g_drain.wake_pending.exchange(true, std::memory_order_acq_rel)) {
    g_drain.wake_word.fetch_add(1, std::memory_order_release);
    FutexWake(&g_drain.wake_word);
  }
}

// --- encoding helpers (under lock) ---

constinit WireWriter g_writer(nullptr, 0);  // over g_drain.buffer once EnsureBuffer succeeded
// The run of packed events open at the end of g_writer, if any: closed before any other frame
// is put and before the writer is written out, forgotten when it is cleared (ClearWriter).
constinit PackedEventRun g_run;

void ClearWriter() {
  g_run.Abandon();
  g_writer.Clear();
}

bool EnsureBuffer() {
  if (g_drain.buffer != nullptr) return true;
  void* mem =
      mmap(nullptr, kWriteBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return false;
  g_drain.buffer = static_cast<uint8_t*>(mem);
  g_writer = WireWriter(g_drain.buffer, kWriteBufferBytes);
  return true;
}

// Writes to the output, counting the bytes of the current file. `sent`: as Output::Write.
bool WriteOut(const void* data, size_t size, size_t* sent = nullptr) {
  g_drain.segment_bytes += size;
  return g_drain.output.Write(data, size, sent);
}

// Writes the buffer out. The events of a buffer that could not be written are lost with it and
// counted as undeliverable, except those whose whole frames went out before the write failed (a
// send that timed out on a collector that stopped reading): its reader has them.
void FlushWriter() {
  DrainState& d = g_drain;
  g_run.Close(g_writer);
  if (g_writer.size() > 0) {
    size_t sent = 0;
    if (!(d.output.is_open() && WriteOut(g_writer.data(), g_writer.size(), &sent))) {
      const size_t delivered = sent > 0 ? CountWholeEventFrames(g_writer.data(), sent) : 0;
      d.undeliverable += d.in_writer - (delivered < d.in_writer ? delivered : d.in_writer);
    } else {
      d.in_file += d.in_writer;
    }
  }
  d.in_writer = 0;
  ClearWriter();
}

// Runs `encode(writer)`; on overflow flushes and tries once more. False if it never fits.
template <typename Encode>
bool Put(Encode&& encode) {
  g_run.Close(g_writer);
  if (encode(g_writer)) return true;
  FlushWriter();
  return encode(g_writer);
}

// One record: into the open packed run when it is one of the events a run holds, else as a
// frame of its own.
void PutRecord(const EventRecord& r) {
  if (PackedBody(r) == 0) {
    Put([&](WireWriter& w) { return EncodeRecord(w, r); });
    return;
  }
  if (AddPacked(g_run, g_writer, r)) return;
  FlushWriter();  // the run is full, or the buffer
  if (!AddPacked(g_run, g_writer, r)) Put([&](WireWriter& w) { return EncodeRecord(w, r); });
}

void ReadProcessInfo() {
  DrainState& d = g_drain;
  ssize_t n = readlink("/proc/self/exe", d.exe, sizeof(d.exe) - 1);
  d.exe[n > 0 ? n : 0] = '\0';
  if (gethostname(d.host, sizeof(d.host) - 1) != 0) d.host[0] = '\0';
  d.host[sizeof(d.host) - 1] = '\0';
  d.argc = 0;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t len = 0;
  for (;;) {
    ssize_t got = read(fd, d.cmdline + len, sizeof(d.cmdline) - 1 - len);
    if (got <= 0) break;
    len += static_cast<size_t>(got);
  }
  close(fd);
  d.cmdline[len] = '\0';
  for (size_t i = 0; i < len && d.argc < kMaxArgs; i += strlen(d.cmdline + i) + 1) {
    d.argv[d.argc++] = d.cmdline + i;
  }
}

// The last blocks_synced mark a snapshot exact at `seq` holds the blocks of (0: none, or only
// marks after it, which the stream ships itself).
uint64_t BlocksSyncedAtOrBelow(uint64_t seq) {
  const uint64_t last = Agent().last_blocks_synced_seq.load(std::memory_order_acquire);
  return last <= seq ? last : 0;
}

// Returns the seq the snapshot is exact at (0 if it could not be written).
uint64_t WriteSnapshot(SnapshotReason reason) {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  // Exact at the seq the scan reads (live_table.h explains how).
  const uint64_t now = NowNs();
  uint64_t seq = 0;
  size_t entries = 0;
  auto encode = [&](WireWriter& w) {
    // An injected agent started with the attach: what was allocated before is unknown.
    SnapshotEncoder snapshot(w, now, reason, /*complete_history=*/!a.injected);
    entries = a.live.ForEachAt(a.seq, &seq, [&](const LiveEntry& e) { snapshot.Add(e); });
    return snapshot.Finish(seq, a.live.overflows(), BlocksSyncedAtOrBelow(seq));
  };
  // The previous snapshot's size, plus a quarter, says whether the write buffer is likely to
  // hold this one; Put fails cleanly when it does not (one scan wasted), and the scratch
  // mapping below, which holds every slot, takes it.
  const size_t likely = (d.last_snapshot_entries * 5 / 4 + 64) * kMaxLiveEntryBytes;
  if (likely < kWriteBufferBytes / 2 && Put(encode)) {
    d.last_snapshot_entries = entries;
    return seq;
  }
  FlushWriter();
  // NORESERVE: only the pages the snapshot writes are touched.
  const size_t bound = a.live.slots() * kMaxLiveEntryBytes + 4096;
  void* mem = mmap(nullptr, bound, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return 0;
  WireWriter big(static_cast<uint8_t*>(mem), bound);
  bool ok = encode(big) && g_drain.output.is_open() && WriteOut(big.data(), big.size());
  munmap(mem, bound);
  if (ok) d.last_snapshot_entries = entries;
  return ok ? seq : 0;
}

void SendModules() {
  while (g_drain.modules.Changed()) {
    if (!Put([](WireWriter& w) { return g_drain.modules.EncodeNew(w); })) break;
  }
}

void WriteStreamHead();

void StartStream() {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  d.stream_started = true;
  const pid_t pid = getpid();
  if (a.config.socket_path[0] == '\0') {
    if (!ExpandPath(a.config.output_path, pid, d.path, Config::kPathCapacity)) {
      strcpy(d.path, "/dev/null/fragscope-path-too-long");  // fails to open: warned once
    }
    if (a.stream_index > 0 && strstr(a.config.output_path, "%p") == nullptr) {
      // A followed child must not write over its parent's file ("%p" already separates them).
      size_t len = strlen(d.path);
      snprintf(d.path + len, sizeof(d.path) - len, ".%d", static_cast<int>(pid));
    }
    if (a.config.exec_image > 0) {
      // Nor an exec'ed image over the image before it (same pid, so "%p" does not help).
      char first[sizeof(d.path)];
      memcpy(first, d.path, sizeof(first));
      if (!ExecImagePath(a.config.output_path, first, static_cast<int>(pid), a.config.exec_image,
                         d.path, sizeof(d.path))) {
        strcpy(d.path, "/dev/null/fragscope-path-too-long");
      }
    }
  }
  d.output.Open(d.path, a.config.socket_path);
  ReadProcessInfo();
  d.reported_ring_drops = 0;
  d.segment_min_seq = 0;
  d.in_snapshots = 0;
  d.in_file = 0;
  WriteStreamHead();
  // No STREAM_START snapshot here: a preloaded agent's stream starts with the first event (or,
  // in a forked child, with an empty table), so every live entry is also an event still in the
  // ring. A woken agent's stream does start with one (Wake).
}

// Stream header, Hello and the module map: how every stream and flight segment begins.
void WriteStreamHead() {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  d.segment_bytes = 0;
  d.modules.Reset();
  d.modules.SetMainProgramPath(d.exe);
  d.events_since_snapshot = 0;
  for (DeviceSlot& slot : a.devices) slot.sent = 0;  // a new stream describes its devices again
  const pid_t pid = getpid();
  uint8_t header[kStreamHeaderSize];
  EncodeStreamHeader(header);
  g_run.Close(g_writer);
  g_writer.RawBytes(header, sizeof(header));
  HelloInfo hello;
  hello.pid = static_cast<uint32_t>(pid);
  hello.ppid = static_cast<uint32_t>(getppid());
  hello.host = d.host;
  hello.exe = d.exe;
  hello.argv = d.argv;
  hello.argc = d.argc;
  hello.agent_version = FRAGSCOPE_AGENT_VERSION;
  hello.realtime_at_start_ns = a.realtime_at_start_ns;
  hello.monotonic_at_start_ns = a.monotonic_at_start_ns;
  hello.stream_index = a.stream_index;
  // A resumed stream joins a running program, as a woken one does.
  hello.attached = d.attached || d.reconnects > 0;
  hello.resumed = d.reconnects;
  if (a.injected) hello.backend = HelloBackend::kInjected;  // memory from before is not known
  hello.stack_depth = static_cast<uint32_t>(a.config.stack_depth);
  hello.release_stacks_off = a.config.stack_depth > 0 && !a.config.release_stacks;
  hello.ring_bytes = a.ring.bytes();
  const ProcessRank rank = CurrentRank();
  hello.rank = rank.rank;
  hello.world_size = rank.world_size;
  hello.exec_image = a.config.exec_image;
  Put([&](WireWriter& w) { return EncodeHello(w, hello); });
  SendModules();
}

void WriteDeviceInfo(int32_t device) {
  if (device < 0 || device >= kMaxDevices) return;
  DeviceSlot& slot = Agent().devices[device];
  if (slot.sent || slot.state.load(std::memory_order_acquire) != 2) return;
  DeviceInfoData info;
  info.ordinal = slot.ordinal;
  info.has_uuid = slot.has_uuid;
  memcpy(info.uuid, slot.uuid, sizeof(info.uuid));
  info.total_bytes = slot.total_bytes;
  info.name = slot.name;
  if (Put([&](WireWriter& w) { return EncodeDeviceInfo(w, info); })) slot.sent = 1;
}

// One source-level stack's SymbolizedStack frame (SourceStackTable's write callback).
bool PutSourceStack(uint64_t id, const uint8_t* frames, size_t size) {
  return Put([&](WireWriter& w) { return EncodeSymbolizedStack(w, id, frames, size); });
}

// A source-level stack (annotate.h's fragscope_source_stack), once per stream.
void WriteSourceStack(uint64_t id) { Agent().source_stacks.SendIfUnsent(id, PutSourceStack); }

void WriteStack(uint64_t id, uint32_t slot) {
  if (SourceStackTable::IsSourceId(id)) {
    WriteSourceStack(id);
    return;
  }
  StackTable& stacks = Agent().stacks;
  if (id == 0 || stacks.IsSent(slot)) return;
  SendModules();  // the stack may point into a module loaded since the last map
  uint64_t pcs[StackTable::kMaxDepth];
  StackEnd end = StackEnd::kUnspecified;
  int n = stacks.Frames(slot, id, pcs, &end);
  if (n < 0) return;
  if (Put([&](WireWriter& w) { return EncodeStack(w, id, pcs, n, end); })) stacks.MarkSent(slot);
}

// The stack `id` when only its id is known (a live entry): the id names its slot.
void WriteStackById(uint64_t id) {
  if (SourceStackTable::IsSourceId(id)) {
    WriteSourceStack(id);
    return;
  }
  StackTable& stacks = Agent().stacks;
  if (id == 0 || id > stacks.slots()) return;
  WriteStack(id, StackTable::SlotOfId(id));
}

// A block's site learned after the fact (fragscope_block_site, fragscope_freed_block_site). Its
// live-table update is not ordered by seq against a snapshot's scan, so it is never taken as inside
// a snapshot: written after one, it sets what the snapshot may already say, or names a block the
// model no longer holds, which changes nothing.
bool SiteRecord(const EventRecord& r) {
  return r.type == RecordType::kBlock && (r.op == static_cast<uint8_t>(BlockOp::kSite) ||
                                          r.op == static_cast<uint8_t>(BlockOp::kSiteFreed));
}

bool LiveStateRecord(const EventRecord& r) {
  const RecordType type = r.type;
  return (type == RecordType::kAlloc || type == RecordType::kFree || type == RecordType::kMap ||
          type == RecordType::kHandle || type == RecordType::kBlock) &&
         !SiteRecord(r);
}

bool SegmentFull() {
  DrainState& d = g_drain;
  const uint64_t limit = FlightSegmentBytes();
  if (limit == 0 || d.attached || Agent().config.socket_path[0] != '\0' || !d.output.is_open()) {
    return false;
  }
  const uint64_t size = d.segment_bytes + g_writer.size();
  // A head (snapshot) bigger than half the segment still leaves room for events: no thrashing.
  return size >= limit && size - d.segment_head >= limit / 2;
}

// Starts the output over where a reader may begin (a new flight segment, a resumed stream):
// stream head, devices, `drops` if given, the StackTable frames of every stack the live entries
// name, then a snapshot exact at its seq S. Live-state records at or below S still in the ring
// are then skipped (the snapshot has them; counted in End.events_in_snapshots); failures and
// marks among them are still written, after it.
void BeginSegment(SnapshotReason reason, const DropsData* drops) {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  WriteStreamHead();
  for (int i = 0; i < kMaxDevices; ++i) WriteDeviceInfo(i);
  if (drops != nullptr) Put([&](WireWriter& w) { return EncodeDrops(w, *drops); });
  if (a.stacks.slots() > 0) a.stacks.ResetSent();
  a.source_stacks.ResetSent();
  // The snapshot is encoded aside while the stacks it names go to the write buffer, so the
  // StackTable frames precede it.
  FlushWriter();
  // Room for every slot; NORESERVE: only the pages the snapshot writes are touched.
  const size_t bound = a.live.slots() * kMaxLiveEntryBytes + 4096;
  void* mem = mmap(nullptr, bound, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  uint64_t seq = 0;
  if (mem != MAP_FAILED) {
    WireWriter big(static_cast<uint8_t*>(mem), bound);
    SnapshotEncoder snapshot(big, NowNs(), reason, /*complete_history=*/!a.injected);
    d.last_snapshot_entries = a.live.ForEachAt(a.seq, &seq, [&](const LiveEntry& e) {
      snapshot.Add(e);
      WriteStackById(e.stack_id);
    });
    const bool ok = snapshot.Finish(seq, a.live.overflows(), BlocksSyncedAtOrBelow(seq));
    FlushWriter();
    if (ok && d.output.is_open()) WriteOut(big.data(), big.size());
    munmap(mem, bound);
  }
  d.segment_min_seq = seq;
  d.events_since_snapshot = 0;
  d.segment_head = d.segment_bytes;
}

// Starts the stream over on an output opened again (a collector that accepts after a restart, a
// trace file made again after it was deleted): Hello (resumed = one more), the devices, a Drops
// frame (REASON_DISCONNECTED) counting what was lost since the last one (undeliverable events
// not yet reported, and ring drops), then a STREAM_START snapshot with its stacks. Returns the
// events that Drops frame counts. Under lock.
uint64_t ResumeOnNewOutput() {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  ++d.reconnects;
  const uint64_t ring_drops = a.ring_drops.load(std::memory_order_acquire);
  DropsData info;
  info.seq = a.seq.load(std::memory_order_acquire);
  info.time_ns = NowNs();
  info.dropped_events =
      (d.undeliverable - d.undeliverable_reported) + (ring_drops - d.reported_ring_drops);
  info.total_dropped = d.undeliverable + ring_drops;
  info.reason = DropReason::kDisconnected;
  d.undeliverable_reported = d.undeliverable;
  d.reported_ring_drops = ring_drops;
  BeginSegment(SnapshotReason::kStreamStart, &info);
  FlushWriter();
  return info.dropped_events;
}

// FRAGSCOPE_SOCKET: a collector that went away (restarted, upgraded, crashed) or was not up yet
// when the program started. While the output is failed the stream is tried again with a
// back-off; once a collector accepts, the stream resumes as Hello (resumed = k) + devices +
// Drops (REASON_DISCONNECTED: the events popped meanwhile, and those lost in the write buffer
// that failed) + a STREAM_START snapshot with its stacks. The live table was kept the whole
// time, so the model is exact again from that snapshot on. Events the old collector had
// accepted into its socket buffer but never read are lost without being counted: the agent
// cannot know of them. Under lock.
// `at_exit`: try now, whatever the back-off says (the last chance to deliver the final state).
void MaybeReconnect(bool at_exit = false) {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  if (!d.output.failed() || d.attached || d.ended || a.config.socket_path[0] == '\0') return;
  if (at_exit) d.reconnect_at_ns = 1;
  const uint64_t now = MonotonicNs();
  if (d.reconnect_at_ns == 0) {  // just failed: give the collector time to come back
    d.reconnect_wait_ns = kReconnectFirstNs;
    d.reconnect_at_ns = now + d.reconnect_wait_ns;
    return;
  }
  if (now < d.reconnect_at_ns) return;
  d.reconnect_wait_ns =
      d.reconnect_wait_ns * 2 < kReconnectMaxNs ? d.reconnect_wait_ns * 2 : kReconnectMaxNs;
  d.reconnect_at_ns = now + d.reconnect_wait_ns;
  FlushWriter();  // counts what the failed buffer held
  d.output.Close();
  if (!d.output.Open(nullptr, a.config.socket_path)) return;  // quiet: warned at the failure
  d.reconnect_at_ns = 0;
  const uint64_t lost = ResumeOnNewOutput();
  AgentLog(
      "reconnected to %.300s; %llu events were lost while disconnected, the stream resumes with "
      "a snapshot of the live memory",
      a.config.socket_path, static_cast<unsigned long long>(lost));
}

// Creates the folders above `path` that are missing (mode 0755 less the umask, as mkdir -p).
// False with errno set if one cannot be made.
bool MakeParentFolders(const char* path) {
  char prefix[sizeof(g_drain.path)];
  const size_t len = strnlen(path, sizeof(prefix) - 1);
  for (size_t i = 1; i < len; ++i) {
    if (path[i] != '/') continue;
    memcpy(prefix, path, i);
    prefix[i] = '\0';
    if (mkdir(prefix, 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// A trace file deleted while the program runs (its folder removed by a cleanup job, `rm -rf`
// of an output folder): writes would go on into a file nobody can open, and the whole trace
// would be gone at exit without a word. Checked once per drain pass (one fstat). The file is
// made again at its path (and its folders), said once on stderr, and starts over as a resumed
// stream does: Hello (resumed), a Drops frame counting the events the deleted file held, then a
// snapshot of the live table, so the model is exact again from there. Under lock.
void MaybeRecreateFile() {
  DrainState& d = g_drain;
  if (d.attached || !d.output.is_open() || !d.output.is_file() || !d.output.Unlinked()) return;
  const uint64_t lost = d.in_file + d.in_writer;  // the buffer would only follow them
  ClearWriter();
  d.in_writer = 0;
  d.in_file = 0;
  d.undeliverable += lost;
  d.output.Close();
  const bool folders = MakeParentFolders(d.path);
  const int folder_error = errno;
  const bool reopened = folders && d.output.Open(d.path, "");
  if (reopened) {
    AgentLog(
        "the trace file %s was deleted while the program ran (%llu events written to it are "
        "lost); made it again: it goes on from a snapshot of the live memory",
        d.path, static_cast<unsigned long long>(lost));
  } else if (!folders) {
    AgentLog(
        "the trace file %s was deleted while the program ran, and its folder cannot be made "
        "again: %s; the program continues, events are counted as dropped",
        d.path, strerror(folder_error));
  }                       // else Open said why
  if (!reopened) return;  // closed: later events count as undeliverable
  ResumeOnNewOutput();    // Hello.resumed: the file begins in the middle of the run
}

// Flight recorder: the current file becomes "<path>.prev" and a new one starts at `path` with
// a segment head and a PERIODIC snapshot (BeginSegment).
void RotateSegment() {
  DrainState& d = g_drain;
  FlushWriter();
  // memcpy rather than snprintf: the bound is explicit (and gcc's truncation warning quiet).
  char prev[sizeof(d.path) + 8];
  const size_t n = strnlen(d.path, sizeof(d.path) - 1);
  memcpy(prev, d.path, n);
  memcpy(prev + n, ".prev", sizeof(".prev"));
  rename(d.path, prev);  // on failure the new file truncates the old one: still bounded
  d.output.Close();
  d.output.Open(d.path, "");
  d.in_file = 0;
  ++d.rotations;
  BeginSegment(SnapshotReason::kPeriodic, /*drops=*/nullptr);
}

// A record skipped because a snapshot already written holds its effect. Records at or below
// the stream's start (pushed by hooks that saw the stream begin) are not its events at all.
void CountInSnapshot(const EventRecord& r) {
  if (r.seq > g_drain.stream_start_seq) ++g_drain.in_snapshots;
}

// Pops and writes what the ring holds. Returns the number of records popped.
size_t DrainLocked() {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  // Dormant (or detached): no stream, and the ring may not even be mapped.
  if (!d.stream_started && !a.shipping.load(std::memory_order_acquire)) return 0;
  if (!EnsureBuffer()) return 0;
  if (!d.stream_started) StartStream();
  MaybeReconnect();
  MaybeRecreateFile();
  size_t popped = 0;
  EventRecord r;
  while (popped < kDrainBatch && a.ring.TryPop(&r)) {
    ++popped;
    // Already in the wake's snapshot; a free/total sample is not state and is kept (the wake's
    // own carries the snapshot's seq).
    if (r.seq <= d.min_seq && d.min_seq != 0 && r.type != RecordType::kMemInfo && !SiteRecord(r)) {
      CountInSnapshot(r);
      continue;
    }
    if (r.seq <= d.segment_min_seq && LiveStateRecord(r)) {  // in the snapshot
      CountInSnapshot(r);
      continue;
    }
    // Rotate before a record, never after the last one: a segment cut right after the final
    // records (a failed allocation, then exit) would leave the newest file with a snapshot and
    // End only, and the failure in `.prev`.
    if (SegmentFull()) {
      RotateSegment();
      if (r.seq <= d.segment_min_seq && LiveStateRecord(r)) {
        CountInSnapshot(r);
        continue;
      }
    }
    if (!d.output.is_open()) {
      if (r.type != RecordType::kMemInfo) ++d.undeliverable;
      continue;
    }
    WriteDeviceInfo(r.device);
    WriteStack(r.stack_id, r.stack_slot);
    PutRecord(r);
    if (r.type != RecordType::kMemInfo) {
      ++d.events_since_snapshot;
      ++d.in_writer;
    }
    if (d.output.is_file() && a.config.snapshot_every > 0 &&
        d.events_since_snapshot >= a.config.snapshot_every) {
      WriteSnapshot(SnapshotReason::kPeriodic);  // lets a reader start in the middle
      d.events_since_snapshot = 0;
    }
  }
  const uint64_t drops = a.ring_drops.load(std::memory_order_acquire);
  if (drops != d.reported_ring_drops && d.output.is_open()) {
    DropsData info;
    info.seq = a.seq.load(std::memory_order_acquire);
    info.time_ns = NowNs();
    info.dropped_events = drops - d.reported_ring_drops;
    info.total_dropped = drops;
    info.reason = DropReason::kRingFull;
    Put([&](WireWriter& w) { return EncodeDrops(w, info); });
    d.reported_ring_drops = drops;
    WriteSnapshot(SnapshotReason::kResync);  // the model re-synchronizes instead of drifting
    d.events_since_snapshot = 0;
  }
  FlushWriter();
  d.written.store(a.ring.consumed(), std::memory_order_release);
  return popped;
}

size_t DrainNow() {
  pthread_mutex_lock(&g_drain.lock);
  size_t n = DrainLocked();
  pthread_mutex_unlock(&g_drain.lock);
  return n;
}

// Before an End (exit, detach): pops until the ring is empty, not just one batch. A backlog of
// more than a batch or two was left behind the End frame, counted in events_recorded and never
// written (617089 of 1.6 M events in one 16-thread run on the null fake). Bounded by what the
// ring held when it started plus one ring more, so producers still running cannot keep it here.
void DrainAllLocked() {
  AgentState& a = Agent();
  uint64_t budget = a.ring.size_approx() + a.ring.capacity();
  for (;;) {
    const size_t popped = DrainLocked();
    if (popped < kDrainBatch || popped >= budget) return;
    budget -= popped;
  }
}

// The End frame of a preloaded stream (exit, _exit, exec), written out. Under lock.
void WriteEndLocked(int exit_status, bool exec) {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  EndData end;
  end.seq = a.seq.load(std::memory_order_acquire);
  end.time_ns = NowNs();
  end.events_recorded = end.seq - d.stream_start_seq;
  // Undeliverable events are not zero only on a stream that lost its output for a while (a
  // collector restart, a deleted file), which counted them in a Drops frame too.
  end.total_dropped = a.ring_drops.load(std::memory_order_acquire) + d.undeliverable;
  end.events_in_snapshots = d.in_snapshots;
  end.exit_status = exit_status;
  end.exec = exec;
  Put([&](WireWriter& w) { return EncodeEnd(w, end); });
  FlushWriter();
  d.ended = true;
}

// --- attach: wake / sleep through the control socket (drain thread only) ---

// Ends a stream that `wake` opened: ships what is in the ring, writes End, closes. Under lock.
void EndAttachedStreamLocked(bool write_end) {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  a.shipping.store(false, std::memory_order_seq_cst);
  if (a.config.dormant_logs) a.logs.Open();  // dormant allocations go to the logs again
  DrainAllLocked();
  if (write_end && d.output.is_open()) {
    EndData end;
    end.seq = a.seq.load(std::memory_order_acquire);
    end.time_ns = NowNs();
    end.events_recorded = end.seq - d.stream_start_seq;
    end.total_dropped = a.ring_drops.load(std::memory_order_acquire);
    end.events_in_snapshots = d.in_snapshots;
    Put([&](WireWriter& w) { return EncodeEnd(w, end); });
    FlushWriter();
  }
  ClearWriter();
  d.output.Close();
  d.stream_started = false;
  d.attached = false;
  d.ended = false;
  // Records hooks push after this (they saw `shipping` just before) are older than the next
  // wake's snapshot, which the min_seq filter then skips.
}

void Wake(const char* socket_path, char* reply, size_t reply_size) {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  pthread_mutex_lock(&d.lock);
  if (a.shipping.load(std::memory_order_acquire) || d.stream_started) {
    snprintf(reply, reply_size, "error already streaming (%s)",
             d.attached ? "attached by another fragscope attach" : "started with an output");
    pthread_mutex_unlock(&d.lock);
    return;
  }
  if (a.ring.bytes() == 0 && !a.ring.Init(a.config.ring_bytes)) {
    snprintf(reply, reply_size, "error cannot map the %zu-byte event ring", a.config.ring_bytes);
    pthread_mutex_unlock(&d.lock);
    return;
  }
  if (!d.stacks_mapped && a.config.stack_depth > 0) {
    // Hooks read stack_depth only after they see `shipping` (stored below, release).
    if (!a.stacks.Init(a.config.stack_slots, a.config.stack_depth)) a.config.stack_depth = 0;
  }
  d.stacks_mapped = true;
  if (a.config.stack_depth > 0) a.stacks.ResetSent();
  if (!EnsureBuffer()) {
    snprintf(reply, reply_size, "error cannot map the write buffer");
    pthread_mutex_unlock(&d.lock);
    return;
  }
  snprintf(a.config.socket_path, sizeof(a.config.socket_path), "%s", socket_path);
  d.attached = true;
  StartStream();
  if (!d.output.is_open()) {
    d.output.Close();
    ClearWriter();
    d.stream_started = false;
    d.attached = false;
    snprintf(reply, reply_size,
             "error the agent cannot connect to %.3000s (its reason is on the program's stderr)",
             socket_path);
    pthread_mutex_unlock(&d.lock);
    return;
  }
  a.ring_drops.store(0, std::memory_order_relaxed);
  d.stream_start_seq = a.seq.load(std::memory_order_acquire);
  // From here on every event whose seq is above the snapshot's is pushed (Submit loads
  // `shipping` after taking its seq; both seq_cst), and every one at or below it is in the
  // snapshot, so the stream is exact from its first frame.
  a.shipping.store(true, std::memory_order_seq_cst);
  // What dormant threads logged goes into the table before anything reads it; their logs take
  // nothing from now on (allocation_log.h), so the table alone is the live set.
  a.logs.Close(a.live);
  // Dormant hooks left the devices (and stream-ordered pools) of their allocations to now
  // (recorder.cc); hooks from here on read their own. Before the devices are described, so
  // that every device the snapshot names has its DeviceInfo ahead of it.
  a.live.ResolveDeferred([](LiveEntry& e) {
    ResolveDeferred(e);
    DescribeDevice(e.device);
  });
  for (int i = 0; i < kMaxDevices; ++i) WriteDeviceInfo(i);
  // Source-level sites set while dormant (fragscope_block_site) are in the live entries the
  // snapshot lists; pc stacks are not (a dormant agent walks none). A wake after a sleep is a
  // new stream: everything is unsent again.
  a.source_stacks.ResetSent();
  a.source_stacks.SendAllUnsent(PutSourceStack);
  const uint64_t seq = WriteSnapshot(SnapshotReason::kStreamStart);
  d.min_seq = seq;
  FlushWriter();
  const size_t live = d.last_snapshot_entries;
  pthread_mutex_unlock(&d.lock);
  // What is outside this process's memory is known from the start, even if the program
  // allocates nothing while attached (its hooks sample free/total only as they record).
  for (int i = 0; i < kMaxDevices; ++i) SampleMemInfoNow(i);
  snprintf(reply, reply_size, "ok streaming seq=%llu live=%zu",
           static_cast<unsigned long long>(seq), live);
}

void ServeControl(int timeout_ms) {
  DrainState& d = g_drain;
  ControlCommand cmd = d.control.Next(timeout_ms);
  char reply[4096];
  AgentState& a = Agent();
  switch (cmd.kind) {
    case ControlCommandKind::kNone:
      return;
    case ControlCommandKind::kWake:
      Wake(cmd.argument, reply, sizeof(reply));
      break;
    case ControlCommandKind::kSleep:
      pthread_mutex_lock(&d.lock);
      if (d.attached) {
        EndAttachedStreamLocked(/*write_end=*/true);
        snprintf(reply, sizeof(reply), "ok dormant seq=%llu",
                 static_cast<unsigned long long>(a.seq.load()));
      } else {
        snprintf(reply, sizeof(reply), "error not attached");
      }
      pthread_mutex_unlock(&d.lock);
      break;
    case ControlCommandKind::kStatus: {
      if (!a.shipping.load()) a.logs.FoldAll(a.live);  // so that `live` counts them
      // The live table's load too: how full it is, and whether (and how full) it ever refused.
      const LiveTable::Occupancy o = a.live.Count();
      snprintf(reply, sizeof(reply),
               "ok %s pid=%d seq=%llu live=%zu slots=%zu tombstones=%zu refused=%llu "
               "full_at=%zu",
               a.shipping.load() ? "streaming" : "dormant", static_cast<int>(getpid()),
               static_cast<unsigned long long>(a.seq.load()), o.live, o.slots, o.tombstones,
               static_cast<unsigned long long>(a.live.overflows()),
               a.live.live_at_first_overflow());
      break;
    }
    case ControlCommandKind::kSyncTorch:
      // The snapshot diff of a PyTorch process (the adapter's fallback, or an injected
      // import's), while the stream runs. Bounded by wait_ms for the GIL; the ring holds the
      // diff's events meanwhile, and hooks never wait on this thread for longer than a
      // failure's flush.
      if (!d.attached) {
        snprintf(reply, sizeof(reply), "error not attached");
      } else {
        FragscopeTorchImport answer;
        SyncTorchState(cmd.wait_ms, cmd.argument, &answer);
        if (answer.status == kFragscopeTorchImported) {
          snprintf(reply, sizeof(reply), "%s%u", control_socket::kSynced, answer.synced_events);
        } else {
          // No Python, no torch, no diff: nothing to sync. A busy GIL or a failed diff: say why.
          const bool nothing =
              answer.status == kFragscopeTorchNoPython || answer.status == kFragscopeTorchNoTorch;
          snprintf(reply, sizeof(reply), "%s %s",
                   nothing ? control_socket::kSyncNone : control_socket::kError, answer.message);
        }
      }
      break;
    case ControlCommandKind::kInvalid:
      snprintf(reply, sizeof(reply),
               "error unknown command (wake /abs/collector.sock | sleep | status | sync-torch "
               "MS WHY)");
      break;
  }
  d.control.Reply(reply);
}

// Once, when the live table first refuses an insert: snapshots from then on lack entries, so the
// figures of any reader that starts from one may undercount. The trace says it too (Snapshot.
// entries_not_held); this line is for whoever watches the program.
void WarnOnceIfTableFull() {
  static constinit std::atomic<bool> warned{false};
  const LiveTable& live = Agent().live;
  if (live.overflows() == 0 || warned.exchange(true)) return;
  AgentLog(
      "the live table is full: an insert was refused at %zu of its %zu slots live, so snapshots "
      "lack what it could not hold and figures may undercount; set FRAGSCOPE_LIVE_SLOTS=%zu or "
      "more in the program's environment",
      live.live_at_first_overflow(), live.slots(), 2 * live.slots());
}

void* DrainThreadMain(void*) {
  AgentCodeScope agent_code;  // CUDA calls on this thread (none expected) are not events
  pthread_setname_np(pthread_self(), "fragscope");
  AgentState& a = Agent();
  // Only a dormant agent can be woken; a streaming one has nothing to offer `attach`.
  if (a.config.dormant && a.config.control_dir[0] != '\0') {
    g_drain.control.Listen(a.config.control_dir);
  }
  while (!g_drain.stop.load(std::memory_order_acquire)) {
    uint32_t seen = g_drain.wake_word.load(std::memory_order_acquire);
    g_drain.wake_pending.store(false, std::memory_order_release);
    ServeControl(0);
    size_t popped = DrainNow();
    WarnOnceIfTableFull();
    if (g_drain.attached && g_drain.output.failed()) {
      // The collector went away (attach killed): back to dormant, quietly.
      pthread_mutex_lock(&g_drain.lock);
      if (g_drain.attached) EndAttachedStreamLocked(/*write_end=*/false);
      pthread_mutex_unlock(&g_drain.lock);
    }
    if (!a.shipping.load(std::memory_order_acquire)) {
      // Dormant: the threads' allocation logs into the table, so that they do not fill up and
      // the table's entries are there for an attach (a wake folds what is left).
      if (a.logs.HasUnfolded()) a.logs.FoldAll(a.live);
    }
    if (!a.shipping.load(std::memory_order_acquire) && g_drain.control.listening()) {
      // Dormant: hooks push nothing; sleep until a control client comes (or a while passes,
      // to notice stop at exit).
      ServeControl(kDormantPollMs);
      continue;
    }
    // Batches: popping right behind the producers would bounce every slot's cache line between
    // them and us. Hooks wake us early when the ring is half full or a failure needs shipping.
    FutexWait(&g_drain.wake_word, seen, popped > 0 ? kBusyWaitNs : kIdleWaitNs);
  }
  return nullptr;
}

void StartThread() {
  int expected = 0;
  if (!g_drain.thread_state.compare_exchange_strong(expected, 1)) return;
  AgentCodeScope agent_code;
  // The drain thread takes no signals: the program's handlers expect its own threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  if (pthread_create(&g_drain.thread, &attr, DrainThreadMain, nullptr) != 0) {
    g_drain.thread_state.store(2);  // no thread: hooks drain inline
  }
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

bool ThreadRunning() { return g_drain.thread_state.load(std::memory_order_acquire) == 1; }

void TryDrainInline() {
  if (pthread_mutex_trylock(&g_drain.lock) != 0) return;  // someone else is draining
  DrainLocked();
  pthread_mutex_unlock(&g_drain.lock);
}

}  // namespace

void EnsureBackgroundThread() {
  if (g_drain.thread_state.load(std::memory_order_relaxed) != 0) return;
  if (Agent().late.load(std::memory_order_acquire)) return;  // never start a thread during exit
  StartThread();
}

void PushRecord(const EventRecord& record) {
  AgentState& a = Agent();
  uint64_t position = 0;
  if (!a.ring.TryPush(record, &position)) {
    // Drops counts events (what End.events_recorded counts); a lost MemInfo sample is not one.
    if (record.type != RecordType::kMemInfo) a.ring_drops.fetch_add(1, std::memory_order_relaxed);
    Wake();
    return;
  }
  if (a.late.load(std::memory_order_acquire)) {
    TryDrainInline();
    return;
  }
  if (g_drain.thread_state.load(std::memory_order_acquire) == 0) StartThread();
  if (!ThreadRunning()) {
    TryDrainInline();
  } else if ((position & 255) == 0 && a.ring.size_approx() > a.ring.capacity() / 2) {
    // Checked every 256 records only: the fill level reads the consumer's cache line.
    Wake();
  }
}

void FlushSoon() {
  AgentState& a = Agent();
  // Everything pushed before now: positions below the current enqueue count.
  const uint64_t target = a.ring.consumed() + a.ring.size_approx();
  const uint64_t deadline = NowNs() + kFlushWaitNs;
  // Ship it from this thread if nobody is draining (deterministic, and no thread switch);
  // otherwise the drain thread is at it: wait for it, a bounded time.
  for (;;) {
    if (g_drain.written.load(std::memory_order_acquire) >= target) return;
    if (pthread_mutex_trylock(&g_drain.lock) == 0) {
      DrainLocked();
      pthread_mutex_unlock(&g_drain.lock);
      if (g_drain.written.load(std::memory_order_acquire) >= target) return;
      // Still short: an earlier record's producer has not finished writing its slot.
    }
    if (NowNs() >= deadline) return;
    timespec ts{0, 200'000};
    nanosleep(&ts, nullptr);
  }
}

void DrainAtExit() {
  AgentState& a = Agent();
  a.late.store(true, std::memory_order_release);  // from now on hooks drain inline
  if (ThreadRunning()) {
    g_drain.stop.store(true, std::memory_order_release);
    g_drain.wake_pending.store(false);
    Wake();
    // Bounded: a collector that stopped reading makes a send time out after a few seconds.
    timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 3;
    if (pthread_timedjoin_np(g_drain.thread, nullptr, &deadline) == 0) {
      g_drain.thread_state.store(2, std::memory_order_release);
      g_drain.control.Close();  // the thread that owned it is gone; unlinks the socket file
    }
  }
  if (g_drain.thread_state.load() != 0 || a.ring.size_approx() > 0) {
    pthread_mutex_lock(&g_drain.lock);
    DrainAllLocked();
    pthread_mutex_unlock(&g_drain.lock);
  }
}

void DrainWriteEnd(int exit_status) {
  if (g_drain.thread_state.load() == 0 && !g_drain.stream_started) return;  // never used
  DrainAtExit();
  WarnOnceIfTableFull();
  pthread_mutex_lock(&g_drain.lock);
  if (g_drain.stream_started) MaybeReconnect(/*at_exit=*/true);
  DrainAllLocked();
  if (!g_drain.ended && g_drain.stream_started && g_drain.output.is_open()) {
    WriteEndLocked(exit_status, /*exec=*/false);
  }
  pthread_mutex_unlock(&g_drain.lock);
}

bool DrainBeforeExec() {
  DrainState& d = g_drain;
  pthread_mutex_lock(&d.lock);
  d.exec_end_written = false;
  // No event yet (the drain thread starts with the first): no stream to end, none to start.
  if (d.thread_state.load() == 0 && !d.stream_started) return false;
  if (d.attached) {
    // An attach ends with the image (the next one starts dormant): as `sleep` would.
    EndAttachedStreamLocked(/*write_end=*/true);
    return true;
  }
  if (d.stream_started) MaybeReconnect(/*at_exit=*/true);
  DrainAllLocked();
  if (!d.stream_started) return false;
  if (d.ended || !d.output.is_open()) return true;
  d.exec_end_at = d.segment_bytes;  // DrainLocked left the write buffer empty
  WriteEndLocked(/*exit_status=*/-1, /*exec=*/true);
  d.exec_end_written = true;
  return true;
}

void DrainAfterFailedExec() {
  AgentState& a = Agent();
  DrainState& d = g_drain;
  if (d.exec_end_written) {
    d.exec_end_written = false;
    d.ended = false;
    if (d.output.is_file()) {
      // The End is taken back: the stream goes on as if the exec had not been tried.
      if (d.output.Rewind(d.exec_end_at)) d.segment_bytes = d.exec_end_at;
    } else {
      // A collector cannot take an End back: the stream goes on as a resumed one (its Hello
      // says so, and its snapshot makes the model exact again).
      d.output.Close();
      if (d.output.Open(nullptr, a.config.socket_path)) {
        ++d.reconnects;
        BeginSegment(SnapshotReason::kStreamStart, /*drops=*/nullptr);
        FlushWriter();
      }
    }
  }
  pthread_mutex_unlock(&d.lock);
}

void DrainAfterFork() {
  DrainState& d = g_drain;
  pthread_mutex_init(&d.lock, nullptr);  // the parent's drain thread may have held it
  d.thread_state.store(0);
  d.stop.store(false);
  d.wake_pending.store(false);
  d.written.store(0);
  d.stream_started = false;
  d.ended = false;
  d.output.Close();
  d.undeliverable = 0;
  d.in_writer = 0;
  d.in_file = 0;
  d.in_snapshots = 0;
  d.reconnects = 0;
  d.reconnect_at_ns = 0;
  d.undeliverable_reported = 0;
  d.control.ForgetAfterFork();
  d.attached = false;
  d.min_seq = 0;
  d.stream_start_seq = 0;
  d.segment_min_seq = 0;
  d.segment_bytes = 0;
  d.segment_head = 0;
  ClearWriter();
}

}  // namespace fragscope::agent
