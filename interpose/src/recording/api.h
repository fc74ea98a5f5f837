// The proto enums the agent writes (fragscope.proto: Api, MemoryKind, the Op and Reason enums),
// defined from fragscope/wire_constants.h, which the build generates from the proto's compiled
// descriptor: the agent cannot include the generated protobuf code (no protobuf runtime inside
// the traced process), and this way it repeats no number.
#ifndef FRAGSCOPE_INTERPOSE_API_H_
#define FRAGSCOPE_INTERPOSE_API_H_

#include <cstdint>

#include "fragscope/wire_constants.h"

namespace fragscope::agent {

// Each enum's values come from the proto through the generated X-macro; only the storage type
// is the agent's choice (EventRecord packs api, op and kind into 4 bytes). A value that does not
// fit the type does not compile.
#define FRAGSCOPE_AGENT_ENUMERATOR(name, number) name = number,

// fragscope.v1.Api: k_ and the name after API_ (k_cuMemAlloc_v2).
enum class Api : uint16_t { FRAGSCOPE_WIRE_Api(FRAGSCOPE_AGENT_ENUMERATOR) };
// fragscope.v1.MemoryKind.
enum class MemoryKind : uint8_t { FRAGSCOPE_WIRE_MemoryKind(FRAGSCOPE_AGENT_ENUMERATOR) };
// MapEvent.Op.
enum class MapOp : uint8_t { FRAGSCOPE_WIRE_MapEvent_Op(FRAGSCOPE_AGENT_ENUMERATOR) };
// HandleEvent.Op.
enum class HandleOp : uint8_t { FRAGSCOPE_WIRE_HandleEvent_Op(FRAGSCOPE_AGENT_ENUMERATOR) };
// BlockEvent.Op. kSite: the block's allocation site learned after the fact (stack_id);
// kSiteFreed: the same for a block already freed.
enum class BlockOp : uint8_t { FRAGSCOPE_WIRE_BlockEvent_Op(FRAGSCOPE_AGENT_ENUMERATOR) };
// Drops.Reason.
enum class DropReason : uint8_t { FRAGSCOPE_WIRE_Drops_Reason(FRAGSCOPE_AGENT_ENUMERATOR) };
// Snapshot.Reason.
enum class SnapshotReason : uint8_t { FRAGSCOPE_WIRE_Snapshot_Reason(FRAGSCOPE_AGENT_ENUMERATOR) };
// Hello.Backend.
enum class HelloBackend : uint8_t { FRAGSCOPE_WIRE_Hello_Backend(FRAGSCOPE_AGENT_ENUMERATOR) };

// fragscope.v1.StackEnd: how a captured stack ended.
enum class StackEnd : uint8_t { FRAGSCOPE_WIRE_StackEnd(FRAGSCOPE_AGENT_ENUMERATOR) };

// fragscope.v1.FormatVersion: kFormatMajor is the major version the agent writes.
enum class FormatVersion : uint32_t { FRAGSCOPE_WIRE_FormatVersion(FRAGSCOPE_AGENT_ENUMERATOR) };

#undef FRAGSCOPE_AGENT_ENUMERATOR

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_API_H_
