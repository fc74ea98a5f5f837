// Recording of a sub-allocator's blocks (annotate.h: fragscope_block_alloc/free/free_pending and
// the late site updates): the hook hands over a typed record (event_infos.h, BlockInfo); this
// file keeps the blocks in the live table and pushes the BlockEvent. Call these only from a hook
// whose HookCall records (recorder.h).
#ifndef FRAGSCOPE_INTERPOSE_BLOCK_RECORDER_H_
#define FRAGSCOPE_INTERPOSE_BLOCK_RECORDER_H_

#include <cstdint>

#include "recording/event_infos.h"

namespace fragscope::agent {

// OP_ALLOC: a live block. `with_stack`: the caller is where the block was allocated (a live
// report), not a reporter after the fact (a snapshot diff), whose stack would name itself as the
// block's site.
void RecordBlockAlloc(const BlockInfo& info, bool with_stack);

// OP_FREE (the block leaves the table) or OP_FREE_PENDING (marked pending); the size and
// sub-allocator pool are the live block's (0 for a block the agent does not know).
void RecordBlockRelease(const BlockInfo& info);

// OP_SITE: the block at `address` was allocated at source stack `site` (also set on the live
// block, so a later snapshot names it).
void RecordBlockSite(uint64_t address, int32_t device, uint64_t site);

// OP_SITE_FREED: the same for a block already freed, with its size.
void RecordFreedBlockSite(uint64_t address, uint64_t size, int32_t device, uint64_t site);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_BLOCK_RECORDER_H_
