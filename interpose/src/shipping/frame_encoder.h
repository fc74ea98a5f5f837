// Encodes fragscope.v1.Frame messages with WireWriter, each preceded by its varint length, as the
// stream format wants (see proto/fragscope.proto). Field numbers are the named constants the build
// generates from that file (fragscope/wire_constants.h); the round-trip tests in
// tests/agent/frame_encoder_test.cc parse the output with libprotobuf.
//
// Every Encode* appends one whole frame, or on overflow leaves the writer where it was (ok()
// false) so the caller can flush and retry. Thread safety: none (drain thread only).
#ifndef FRAGSCOPE_INTERPOSE_FRAME_ENCODER_H_
#define FRAGSCOPE_INTERPOSE_FRAME_ENCODER_H_

#include <cstddef>
#include <cstdint>

#include "fragscope/packed_events.h"
#include "fragscope/wire_constants.h"
#include "recording/api.h"
#include "recording/event_record.h"
#include "recording/live_table.h"
#include "shipping/packed_event_run.h"
#include "shipping/wire_encoder.h"

namespace fragscope::agent {

inline constexpr char kStreamMagic[8] = {'F', 'R', 'A', 'G', 'S', 'C', 'P', '\x01'};
inline constexpr uint32_t kFormatMajor = static_cast<uint32_t>(FormatVersion::kFormatMajor);
inline constexpr uint32_t kFormatMinor = 0;
inline constexpr size_t kStreamHeaderSize = 16;

// Writes the 16-byte stream header into `out`.
void EncodeStreamHeader(uint8_t out[kStreamHeaderSize]);

struct HelloInfo {
  uint32_t pid = 0;
  uint32_t ppid = 0;
  const char* host = nullptr;
  const char* exe = nullptr;
  const char* const* argv = nullptr;
  int argc = 0;
  const char* agent_version = nullptr;
  uint64_t realtime_at_start_ns = 0;
  uint64_t monotonic_at_start_ns = 0;
  HelloBackend backend = HelloBackend::kPreload;
  bool attached = false;
  uint32_t stream_index = 0;
  uint32_t stack_depth = 0;
  uint64_t ring_bytes = 0;
  uint32_t resumed = 0;             // reconnects so far (Hello.resumed)
  bool release_stacks_off = false;  // FRAGSCOPE_FREE_STACKS=0
  int32_t rank = -1;                // Hello.rank; -1: not in a distributed job's environment
  int32_t world_size = -1;
  uint32_t exec_image = 0;  // Hello.exec_image
};

struct DeviceInfoData {
  int32_t ordinal = -1;
  uint8_t uuid[16] = {};
  bool has_uuid = false;
  uint64_t total_bytes = 0;
  const char* name = nullptr;
};

struct ModuleData {
  const char* path = nullptr;
  const uint8_t* build_id = nullptr;
  size_t build_id_size = 0;
  uint64_t load_address = 0;
  uint64_t size = 0;
};

struct DropsData {
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  uint64_t dropped_events = 0;
  uint64_t total_dropped = 0;
  DropReason reason = DropReason::kUnspecified;
};

struct EndData {
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  uint64_t events_recorded = 0;
  uint64_t total_dropped = 0;
  int32_t exit_status = -1;
  uint64_t events_in_snapshots = 0;
  bool exec = false;  // End.exec
};

bool EncodeHello(WireWriter& w, const HelloInfo& hello);
bool EncodeDeviceInfo(WireWriter& w, const DeviceInfoData& device);
bool EncodeModuleMap(WireWriter& w, const ModuleData* modules, size_t count);
// One StackTable frame holding one stack.
bool EncodeStack(WireWriter& w, uint64_t id, const uint64_t* pcs, int count, StackEnd end);
// One SymbolizedStack frame: `frames` holds its `frames` entries already encoded (field 2,
// SourceStackTable's payload).
bool EncodeSymbolizedStack(WireWriter& w, uint64_t id, const uint8_t* frames, size_t size);
// AllocEvent / FreeEvent / MapEvent / HandleEvent / FailedAlloc / MemInfo / Mark / BlockEvent.
bool EncodeRecord(WireWriter& w, const EventRecord& record);
// The message (Frame field number) a packed run holds `record` as, or 0 for a record that goes
// as a frame of its own: not one of the five packable events, or an AllocEvent with
// failed_release_result (a field past packed::kMaxField).
uint32_t PackedBody(const EventRecord& record);
// Adds a record PackedBody accepts to `run` (PackedEventRun::Add: false when it does not fit).
bool AddPacked(PackedEventRun& run, WireWriter& w, const EventRecord& record);
bool EncodeDrops(WireWriter& w, const DropsData& drops);
bool EncodeEnd(WireWriter& w, const EndData& end);

// The event frames (what EncodeRecord writes, MemInfo excepted: it is no event) that lie whole in
// the first `size` bytes of `data`, a run of frames as the encoders wrote them, optionally
// starting with the stream header. For a write that stopped part-way: the frames before the
// cut reached the reader, the rest did not.
size_t CountWholeEventFrames(const uint8_t* data, size_t size);

// Opens "length prefix + Frame{ body_field: { ... } }"; Close ends both, or on overflow backs
// out to where the frame started and returns false.
class FrameScope {
 public:
  FrameScope(WireWriter& w, uint32_t body_field);
  bool Close();

 private:
  WireWriter& w_;
  size_t mark_;
  size_t frame_;
  size_t body_;
};

// A Snapshot frame built incrementally: construct, Add each live entry, Finish with the seq the
// entries are consistent at (known only once the scan began; field order is free on the wire).
class SnapshotEncoder {
 public:
  SnapshotEncoder(WireWriter& w, uint64_t time_ns, SnapshotReason reason, bool complete_history);
  void Add(const LiveEntry& entry);
  // `entries_not_held`: inserts the live table refused so far (LiveTable::overflows()), read
  // after the scan so that a refusal during it is counted too. `last_blocks_synced_seq`:
  // AgentState::last_blocks_synced_seq, at or below `seq`.
  bool Finish(uint64_t seq, uint64_t entries_not_held = 0, uint64_t last_blocks_synced_seq = 0) {
    w_.Uint64(wire::Snapshot::kSeq, seq);
    w_.Uint64(wire::Snapshot::kEntriesNotHeld, entries_not_held);
    w_.Uint64(wire::Snapshot::kLastBlocksSyncedSeq, last_blocks_synced_seq);
    return frame_.Close();
  }

 private:
  WireWriter& w_;
  FrameScope frame_;
};

// Upper bound of the bytes one live entry takes inside a Snapshot.
inline constexpr size_t kMaxLiveEntryBytes = 128;

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_FRAME_ENCODER_H_
