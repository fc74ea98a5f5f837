#include "fragscope/model/segment.h"

#include <algorithm>

namespace fragscope {

const char* CoverageName(Coverage c) {
  switch (c) {
    case Coverage::kExact:
      return "exact";
    case Coverage::kAnnotated:
      return "annotated";
    case Coverage::kOpaque:
      return "opaque";
  }
  return "?";
}

Segment::Segment(SegmentKind kind, uint64_t begin, uint64_t size, int device, uint64_t stack_id)
    : kind_(kind), begin_(begin), size_(size), device_(device), stack_id_(stack_id) {}

void Segment::AddMappingPiece(uint64_t address, const Mapping& m) {
  mappings_[address] = m;
  if (m.imported) return;
  mapped_bytes_ += m.size;
  if (pieces_by_handle_[m.handle]++ == 0) handle_bytes_ += m.handle_size;
}

void Segment::RemoveMappingPiece(absl::btree_map<uint64_t, Mapping>::iterator it) {
  const Mapping m = it->second;
  mappings_.erase(it);
  if (m.imported) return;
  mapped_bytes_ -= m.size;
  auto pieces = pieces_by_handle_.find(m.handle);
  if (pieces != pieces_by_handle_.end() && --pieces->second == 0) {
    pieces_by_handle_.erase(pieces);
    handle_bytes_ -= m.handle_size;
  }
}

template <typename F>
void Segment::ForEachUnbacked(uint64_t begin, uint64_t end, F&& f) const {
  begin = std::max(begin, begin_);
  end = std::min(end, this->end());
  if (begin >= end || kind_ == SegmentKind::kDriverAllocation) return;
  uint64_t cursor = begin;
  auto it = mappings_.upper_bound(begin);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < end; ++it) {
    if (it->second.imported) continue;  // not this process's memory to carve
    const uint64_t lo = std::max(begin, it->first);
    const uint64_t hi = std::min(end, it->first + it->second.size);
    if (lo >= hi) continue;
    if (lo > cursor) f(cursor, lo);
    cursor = std::max(cursor, hi);
  }
  if (cursor < end) f(cursor, end);
}

void Segment::PlaceInGap(uint64_t address, const Extent& e, ExtentMap::iterator next) {
  const Gap gap = GapBefore(next);
  const uint64_t gap_end = gap.begin + gap.size;
  CountFreeRemoved(gap.size);
  const uint64_t before = address - gap.begin;
  SetGapSize(gap, before);  // before the insert, which moves entries
  CountFreeAdded(before);
  const uint64_t end = address + e.size;
  const uint64_t free_after = gap_end - end;
  CountFreeAdded(free_after);
  // Field by field into the new slot, not a copy of `e`: the caller has just written `e` field
  // by field, and a copy reads it back 16 bytes at a time, which the CPU cannot forward from
  // the narrower stores still in flight (a stall of a dozen cycles; in perf, half of
  // AllocBlock's samples sat on that load).
  const auto it = extents_.emplace_hint(next, address, Extent{});
  Extent& placed = it->second;
  placed.size = e.size;
  placed.block = e.block;
  placed.pending_free = e.pending_free;
  extents_.set_weight(it, free_after);
}

Segment::ExtentMap::iterator Segment::RemoveExtent(ExtentMap::iterator it) {
  const Gap gap = GapBefore(it);
  const uint64_t end = it->first + it->second.size;
  const uint64_t after = it.weight();
  CountFreeRemoved(gap.size);
  CountFreeRemoved(after);
  const uint64_t merged = end + after - gap.begin;
  SetGapSize(gap, merged);  // before the erase, which moves entries
  CountFreeAdded(merged);
  return extents_.erase(it);
}

void Segment::ClearHoles(uint64_t begin, uint64_t end) {
  while (true) {
    // The first hole overlapping [begin, end): the extent before `begin` if it reaches past it,
    // else the first at or after `begin`.
    auto it = extents_.lower_bound(begin);
    if (it != extents_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second.size > begin) it = prev;
    }
    while (it != extents_.end() && it->first < end && !it->second.is_hole()) ++it;
    if (it == extents_.end() || it->first >= end) return;
    const uint64_t h_begin = it->first;
    const uint64_t h_end = h_begin + it->second.size;
    auto next = RemoveExtent(it);
    if (h_end > end) PlaceInGap(end, HoleExtent(h_end - end), next);
    if (h_begin < begin)
      PlaceInGap(h_begin, HoleExtent(begin - h_begin), extents_.upper_bound(h_begin));
  }
}

void Segment::HoleOverFree(uint64_t begin, uint64_t end) {
  // Collected first: inserting moves entries (btree iterators do not survive it).
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  ForEachFreeRange([&](uint64_t b, uint64_t e) {
    b = std::max(b, begin);
    e = std::min(e, end);
    if (b < e) runs.emplace_back(b, e);
  });
  for (const auto& [b, e] : runs) PlaceInGap(b, HoleExtent(e - b), extents_.upper_bound(b));
}

void Segment::BecomeAnnotated() {
  if (annotated_) return;
  annotated_ = true;
  // Every byte is free but the unbacked VA of a reservation (no extents yet: blocks come after).
  CountFreeAdded(size_);
  head_free_ = size_;
  ForEachUnbacked(begin_, end(), [this](uint64_t b, uint64_t e) {
    PlaceInGap(b, HoleExtent(e - b), extents_.upper_bound(b));
  });
}

void Segment::Map(uint64_t address, const Mapping& mapping) {
  // A mapping replacing one at the same VA (the unmap was lost) must not count twice.
  auto old = mappings_.find(address);
  if (old != mappings_.end()) RemoveMappingPiece(old);
  AddMappingPiece(address, mapping);
  if (!annotated_ || mapping.imported) return;
  // New memory is free except where blocks already lie (a block annotated before its map).
  ClearHoles(std::max(address, begin_), std::min(address + mapping.size, end()));
}

std::vector<std::pair<uint64_t, int>> Segment::Unmap(uint64_t begin, uint64_t end) {
  std::vector<std::pair<uint64_t, int>> changes;
  if (begin >= end) return changes;
  // Collect first: btree iterators do not survive the inserts below.
  std::vector<std::pair<uint64_t, Mapping>> touched;
  auto it = mappings_.upper_bound(begin);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < end; ++it) {
    if (it->first + it->second.size > begin) touched.emplace_back(it->first, it->second);
  }
  for (const auto& [address, mapping] : touched) {
    // Put the surviving pieces in before taking the old one out, so a handle that stays mapped
    // never looks unmapped in between.
    int delta = -1;
    const uint64_t m_end = address + mapping.size;
    if (m_end > end) {  // the part after the unmapped range stays mapped
      Mapping after = mapping;
      after.size = m_end - end;
      after.offset = mapping.offset + (end - address);
      AddMappingPiece(end, after);
      ++delta;
    }
    RemoveMappingPiece(mappings_.find(address));
    if (address < begin) {  // and so does the part before it
      Mapping before = mapping;
      before.size = begin - address;
      AddMappingPiece(address, before);
      ++delta;
    }
    changes.emplace_back(mapping.handle, delta);
  }
  if (annotated_) HoleOverFree(begin, end);
  return changes;
}

uint32_t Segment::NewBlockData(const SubBlock& block) {
  if (!spare_block_data_.empty()) {
    const uint32_t index = spare_block_data_.back();
    spare_block_data_.pop_back();
    block_data_[index] = block;
    return index;
  }
  block_data_.push_back(block);
  return static_cast<uint32_t>(block_data_.size() - 1);
}

void Segment::CompactBlockData() {
  std::vector<SubBlock> live;
  live.reserve(block_count_);
  for (auto&& [address, extent] : extents_) {
    if (extent.is_hole()) continue;
    live.push_back(block_data_[extent.block]);
    extent.block = static_cast<uint32_t>(live.size() - 1);
  }
  block_data_ = std::move(live);
  spare_block_data_.clear();
  spare_block_data_.shrink_to_fit();
}

void Segment::AccountPlaced(const SubBlock& block) {
  ++block_count_;
  if (block.pending_free) {
    pending_block_bytes_ += block.size;
    ++pending_blocks_;
  } else {
    live_block_bytes_ += block.size;
  }
  const std::pair<uint64_t, uint64_t> sp{block.stream, block.pool};
  if (!stream_and_pool_) {
    stream_and_pool_ = sp;
  } else if (*stream_and_pool_ != sp) {
    mixed_streams_ = true;
  }
}

void Segment::AccountRemoved(uint64_t size, bool pending_free) {
  --block_count_;
  if (pending_free) {
    pending_block_bytes_ -= size;
    --pending_blocks_;
  } else {
    live_block_bytes_ -= size;
  }
}

bool Segment::CanPlaceBlock(uint64_t address, uint64_t size) const {
  if (!Encloses(address, size)) return false;
  // A block starting before `address` and reaching past it: only the extent with the greatest
  // start below `address` can be one (extents are disjoint).
  auto it = extents_.lower_bound(address);
  if (it != extents_.begin()) {
    auto prev = std::prev(it);
    if (!prev->second.is_hole() && prev->first + prev->second.size > address) return false;
  }
  // A block starting inside (address, address + size).
  if (it != extents_.end() && it->first == address) ++it;
  for (; it != extents_.end() && it->first < address + size; ++it) {
    if (!it->second.is_hole()) return false;
  }
  auto zero = zero_blocks_.upper_bound(address);
  return zero == zero_blocks_.end() || zero->first >= address + size;
}

Segment::Placement Segment::AllocBlock(uint64_t address, const SubBlock& block,
                                       BlockSite* replaced) {
  // The common case, with one search: an annotated segment, a block with bytes, inside one free
  // run. Everything else goes the general way.
  if (!annotated_ || block.size == 0 || !zero_blocks_.empty() || !Encloses(address, block.size)) {
    return AllocBlockSlow(address, block, replaced);
  }
  auto next = extents_.upper_bound(address);
  const Gap gap = GapBefore(next);
  if (address < gap.begin || address - gap.begin + block.size > gap.size) {
    return AllocBlockSlow(address, block, replaced);
  }
  PlaceInGap(address, BlockExtent(block, NewBlockData(block)), next);
  AccountPlaced(block);
  return Placement::kPlaced;
}

Segment::Placement Segment::AllocBlockSlow(uint64_t address, const SubBlock& block,
                                           BlockSite* replaced) {
  if (!CanPlaceBlock(address, block.size)) return Placement::kRejected;
  BecomeAnnotated();
  Placement placement = Placement::kPlaced;
  auto same = extents_.find(address);
  const bool same_address =
      (same != extents_.end() && !same->second.is_hole()) || zero_blocks_.contains(address);
  if (same_address) {
    // Its free was lost: forget the old block before placing the new one.
    FreeBlock(address, replaced);
    placement = Placement::kReplaced;
  }
  if (block.size == 0) {
    zero_blocks_[address] = block;
  } else {
    // No block overlaps the range (CanPlaceBlock, and the one at `address` is gone); once the
    // holes under it are cut back it lies in one free run. A block over unbacked VA (annotated
    // before its map) holds those bytes; they do not become free when it is freed.
    ClearHoles(address, address + block.size);
    PlaceInGap(address, BlockExtent(block, NewBlockData(block)), extents_.upper_bound(address));
  }
  AccountPlaced(block);
  return placement;
}

bool Segment::FreeBlock(uint64_t address, BlockSite* freed) {
  auto it = extents_.find(address);
  if (it == extents_.end() || it->second.is_hole()) {
    auto zero = zero_blocks_.find(address);
    if (zero == zero_blocks_.end()) return false;
    *freed = BlockSite{zero->second.size, zero->second.stack_id, zero->second.seq};
    AccountRemoved(zero->second.size, zero->second.pending_free);
    zero_blocks_.erase(zero);
    return true;  // no bytes: the free runs stay as they are
  }
  const SubBlock& data = block_data_[it->second.block];
  *freed = BlockSite{it->second.size, data.stack_id, data.seq};
  AccountRemoved(it->second.size, it->second.pending_free);
  ReleaseBlockData(it->second.block);  // keeps iterators: only block_data_ changes
  const uint64_t size = it->second.size;
  auto next = RemoveExtent(it);
  if (kind_ != SegmentKind::kDriverAllocation) {
    // Only the mapped parts of a reservation become free: the rest goes back to holes (all in
    // the run just made, which ends at `next`; placed in address order, each ends the run
    // before it, and the last keeps `next` as its upper bound).
    bool first = true;
    ForEachUnbacked(address, address + size, [&](uint64_t b, uint64_t e) {
      PlaceInGap(b, HoleExtent(e - b), first ? next : extents_.upper_bound(b));
      first = false;
    });
  }
  return true;
}

SubBlock* Segment::BlockAt(uint64_t address, Extent** extent) {
  if (auto it = extents_.find(address); it != extents_.end() && !it->second.is_hole()) {
    *extent = &it->second;
    return &block_data_[it->second.block];
  }
  *extent = nullptr;
  auto zero = zero_blocks_.find(address);
  return zero != zero_blocks_.end() ? &zero->second : nullptr;
}

bool Segment::SetBlockSite(uint64_t address, uint64_t stack_id, BlockSite* before) {
  Extent* extent = nullptr;
  SubBlock* b = BlockAt(address, &extent);
  if (b == nullptr) return false;
  *before = BlockSite{b->size, b->stack_id, b->seq};
  b->stack_id = stack_id;
  return true;
}

bool Segment::MarkPendingFree(uint64_t address) {
  Extent* extent = nullptr;
  SubBlock* b = BlockAt(address, &extent);
  if (b == nullptr) return false;
  if (extent != nullptr) extent->pending_free = true;
  if (b->pending_free) return true;
  b->pending_free = true;
  live_block_bytes_ -= b->size;
  pending_block_bytes_ += b->size;
  ++pending_blocks_;
  return true;
}

std::optional<std::pair<uint64_t, uint64_t>> Segment::stream_and_pool() const {
  if (mixed_streams_) return std::nullopt;
  return stream_and_pool_;
}

uint64_t Segment::LargestFreeIfPendingCompleted() const {
  uint64_t largest = largest_free_bytes();
  if (pending_blocks_ == 0) return largest;
  // A pending block's bytes merged with the free runs right before and after it (adjacent
  // pending blocks are not merged with each other). Zero-size blocks free nothing.
  uint64_t run_before = head_free_;
  for (auto it = extents_.begin(); it != extents_.end(); ++it) {
    const Extent& extent = it->second;
    if (!extent.is_hole() && extent.pending_free) {
      largest = std::max(largest, run_before + extent.size + it.weight());
    }
    run_before = it.weight();
  }
  return largest;
}

}  // namespace fragscope
