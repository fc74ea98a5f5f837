#include "recording/block_recorder.h"

#include "recording/live_table.h"
#include "recording/recorder.h"

namespace fragscope::agent {

void RecordBlockAlloc(const BlockInfo& info, bool with_stack) {
  EventRecord r = with_stack ? NewRecord(RecordType::kBlock, info.api)
                             : NewRecordWithoutStack(RecordType::kBlock, info.api);
  FillBlockRecord(r, info);
  LiveEntry e = ZeroLiveEntry();  // not `{}`: see ZeroLiveEntry
  e.cls = LiveClass::kBlock;
  e.api = info.api;
  e.device = info.device;
  e.address = info.address;
  e.size = info.size;
  e.stream = info.stream;
  e.pool = info.allocator_pool;
  e.stack_id = r.stack_id;
  r.seq = InsertLive(e);
  Submit(r);
}

void RecordBlockRelease(const BlockInfo& info) {
  LiveTable& live = Agent().live;
  LiveEntry entry = ZeroLiveEntry();  // not `{}`: see ZeroLiveEntry
  size_t index = 0;
  bool known;
  bool erased = false;
  if (info.op == BlockOp::kFree) {
    known = erased = live.Erase(LiveClass::kBlock, info.address, &entry, &index);
  } else {
    known = live.Update(LiveClass::kBlock, info.address, [&](LiveEntry& e) {
      e.flags |= kLivePendingFree;
      entry = e;
      return true;
    });
  }
  EventRecord r = NewReleaseRecord(RecordType::kBlock, info.api);
  r.seq = NextSeq();
  if (erased) live.SetRemovedSeq(index, r.seq);
  BlockInfo released = info;
  released.size = known ? entry.size : 0;
  released.allocator_pool = known ? entry.pool : 0;
  FillBlockRecord(r, released);
  Submit(r);
}

void RecordBlockSite(uint64_t address, int32_t device, uint64_t site) {
  // The live entry too: a snapshot taken later (a wake, a flight segment) names the new site.
  Agent().live.Update(LiveClass::kBlock, address, [&](LiveEntry& e) {
    e.stack_id = site;
    return true;
  });
  EventRecord r = NewRecordWithoutStack(RecordType::kBlock, Api::k_fragscope_block_alloc);
  FillBlockRecord(r, BlockInfo{Api::k_fragscope_block_alloc, BlockOp::kSite, address, 0, device});
  r.stack_id = site;
  r.seq = NextSeq();
  Submit(r);
}

void RecordFreedBlockSite(uint64_t address, uint64_t size, int32_t device, uint64_t site) {
  EventRecord r = NewRecordWithoutStack(RecordType::kBlock, Api::k_fragscope_block_alloc);
  FillBlockRecord(
      r, BlockInfo{Api::k_fragscope_block_alloc, BlockOp::kSiteFreed, address, size, device});
  r.stack_id = site;
  r.seq = NextSeq();
  Submit(r);
}

}  // namespace fragscope::agent
