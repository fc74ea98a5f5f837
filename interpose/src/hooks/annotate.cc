// The agent's definitions of the annotate.h API: strong, exported, unversioned. They produce
// BlockEvent, FailedAlloc (from_sub_allocator) and Mark frames.
#include "fragscope/annotate.h"

#include <cstddef>
#include <cstring>

#include "hooks/hook_exports.h"
#include "recording/block_recorder.h"
#include "recording/recorder.h"

namespace fragscope::agent {
namespace {

uint64_t Address(const void* p) { return reinterpret_cast<uint64_t>(p); }

void BlockRelease(void* ptr, int device, void* stream, BlockOp op) {
  HookCall hook;  // keeps errno as the program left it
  if (!hook.record()) return;
  RecordBlockRelease(
      BlockInfo{Api::k_fragscope_block_free, op, Address(ptr), 0, device, Address(stream)});
}

// `with_stack`: see RecordBlockAlloc.
void BlockAlloc(void* ptr, size_t size, int device, void* stream, uint64_t pool, bool with_stack) {
  HookCall hook;
  if (!hook.record()) return;
  RecordBlockAlloc(BlockInfo{Api::k_fragscope_block_alloc, BlockOp::kAlloc, Address(ptr), size,
                             device, Address(stream), pool},
                   with_stack);
}

// A sub-allocator's own OOM: with `site` (a source-level stack id) as its site, or with the
// caller's stack for 0 or an id that is not one.
void SubAllocatorFailed(size_t size, int device, void* stream, uint64_t site) {
  HookCall hook;
  if (!hook.record()) return;
  FailureInfo info{Api::k_fragscope_alloc_failed, /*result=*/2 /* out of memory */, size, device};
  info.stream = Address(stream);
  info.from_sub_allocator = true;
  if (SourceStackTable::IsSourceId(site)) info.site = site;
  RecordFailure(info);
}

}  // namespace
}  // namespace fragscope::agent

using namespace fragscope::agent;

extern "C" FRAGSCOPE_VISIBLE void fragscope_block_alloc(void* ptr, size_t size, int device,
                                                        void* stream, uint64_t pool) {
  BlockAlloc(ptr, size, device, stream, pool, /*with_stack=*/true);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_block_alloc_late(void* ptr, size_t size, int device,
                                                             void* stream, uint64_t pool) {
  BlockAlloc(ptr, size, device, stream, pool, /*with_stack=*/false);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_block_free(void* ptr, int device, void* stream) {
  BlockRelease(ptr, device, stream, BlockOp::kFree);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_block_free_pending(void* ptr, int device,
                                                               void* stream) {
  BlockRelease(ptr, device, stream, BlockOp::kFreePending);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_alloc_failed(size_t size, int device, void* stream) {
  SubAllocatorFailed(size, device, stream, /*site=*/0);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_alloc_failed_at(size_t size, int device, void* stream,
                                                            uint64_t site) {
  SubAllocatorFailed(size, device, stream, site);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_mark(const char* label) {
  HookCall hook;
  if (hook.record()) RecordMark(label, /*blocks_synced=*/false);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_blocks_synced(const char* label) {
  HookCall hook;
  if (hook.record()) RecordMark(label, /*blocks_synced=*/true);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_set_rank(int rank, int world_size) {
  if (rank < 0) return;
  HookCall hook;
  const ProcessRank now{rank, world_size > rank ? world_size : -1};
  if (!AgentRecording()) return;  // no stream now or later (agent off)
  const ProcessRank before = CurrentRank();
  Agent().program_rank.store(PackRank(now), std::memory_order_relaxed);
  // The same rank the stream already names (a torchrun launch that also calls
  // init_process_group): no mark. Dormant: the wake's Hello carries it.
  if (before == now || !hook.record()) return;
  RecordRankMark(now.rank, now.world_size);
}

static_assert(sizeof(fragscope_source_frame) == sizeof(SourceFrameText) &&
                  offsetof(fragscope_source_frame, line) == offsetof(SourceFrameText, line),
              "annotate.h's frame and the table's must be the same layout");

extern "C" FRAGSCOPE_VISIBLE uint64_t fragscope_source_stack(const fragscope_source_frame* frames,
                                                             size_t count) {
  HookCall hook;
  if (!hook.record()) return 0;
  return Agent().source_stacks.Intern(reinterpret_cast<const SourceFrameText*>(frames), count);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_block_site(void* ptr, int device, uint64_t site) {
  HookCall hook;
  if (!hook.record() || !SourceStackTable::IsSourceId(site)) return;
  RecordBlockSite(Address(ptr), device, site);
}

extern "C" FRAGSCOPE_VISIBLE void fragscope_freed_block_site(void* ptr, size_t size, int device,
                                                             uint64_t site) {
  HookCall hook;
  if (!hook.record() || !SourceStackTable::IsSourceId(site)) return;
  RecordFreedBlockSite(Address(ptr), size, device, site);
}
