// The fixed-size record a hook pushes into the ring: everything one frame needs, with no
// pointers to memory the hook owns. The drain thread turns it into a protobuf frame.
#ifndef FRAGSCOPE_INTERPOSE_EVENT_RECORD_H_
#define FRAGSCOPE_INTERPOSE_EVENT_RECORD_H_

#include <cstdint>

#include "recording/api.h"

namespace fragscope::agent {

// Which Frame body a record becomes.
enum class RecordType : uint8_t {
  kNone = 0,
  kAlloc,    // AllocEvent
  kFree,     // FreeEvent
  kMap,      // MapEvent (op)
  kHandle,   // HandleEvent (op)
  kFailed,   // FailedAlloc
  kMemInfo,  // MemInfo
  kMark,     // Mark (label)
  kBlock,    // BlockEvent (op)
};

// Bits of EventRecord::flags.
enum RecordFlags : uint8_t {
  kFlagInCapture = 1 << 0,     // AllocEvent.in_capture
  kFlagHasMemInfo = 1 << 1,    // FailedAlloc.has_mem_info (free/total in aux0/aux1)
  kFlagSubAllocator = 1 << 2,  // FailedAlloc.from_sub_allocator
  kFlagBlocksSynced = 1 << 3,  // Mark.blocks_synced
  kFlagRank = 1 << 4,          // Mark.rank and Mark.world_size, from `rank_mark`
};

// 120 bytes, so that with the ring's 8-byte sequence word a slot is two cache lines.
struct EventRecord {
  uint64_t seq;         // global sequence number (see fragscope.proto)
  uint64_t time_ns;     // CLOCK_MONOTONIC
  uint64_t stack_id;    // interned stack id, 0 = none
  uint32_t stack_slot;  // where the stack table keeps stack_id's frames
  uint32_t tid;
  int32_t result;  // CUresult / cudaError_t
  int32_t device;  // ordinal, -1 unknown
  Api api;
  RecordType type;
  uint8_t op;  // MapOp / HandleOp / BlockOp
  MemoryKind kind;
  uint8_t flags;  // RecordFlags
  uint8_t label_size;
  uint8_t reserved;
  static constexpr int kLabelCapacity = 72;
  static constexpr int kRankLabelCapacity = kLabelCapacity - 8;
  union {
    struct {
      uint64_t address;
      uint64_t size;  // bytes
      uint64_t stream;
      uint64_t pool;  // pool, or the VMM handle for Map/Handle records, allocator for blocks
      uint64_t aux0;  // pitch (alloc), offset (map), free bytes (failed/meminfo)
      uint64_t aux1;  // alignment (map), handle type (handle), total bytes (failed/meminfo)
      uint64_t aux2;  // MemInfo: pool reserved bytes; Block: sub-allocator pool id
      uint64_t aux3;  // MemInfo: pool used bytes
      uint64_t aux4;
    };
    char label[kLabelCapacity];  // Mark, not NUL-terminated (label_size bytes)
    // A Mark with kFlagRank: its label is at most kRankLabelCapacity bytes (`label` reads them).
    struct {
      char text[kRankLabelCapacity];
      int32_t rank;
      int32_t world_size;  // -1: unknown
    } rank_mark;
  };
};
static_assert(sizeof(EventRecord) == 120, "EventRecord must fill two cache lines with its slot");

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_EVENT_RECORD_H_
