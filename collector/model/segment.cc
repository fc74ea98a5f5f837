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

void Segment::FreeBacked(uint64_t begin, uint64_t end) {
  begin = std::max(begin, begin_);
  end = std::min(end, this->end());
  if (begin >= end) return;
  if (kind_ == SegmentKind::kDriverAllocation) {
    InsertFree(begin, end);
    return;
  }
  // Only mapped VA is memory; the rest of a reservation is address space.
  auto it = mappings_.upper_bound(begin);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < end; ++it) {
    if (it->second.imported) continue;  // not this process's memory to carve
    const uint64_t lo = std::max(begin, it->first);
    const uint64_t hi = std::min(end, it->first + it->second.size);
    if (lo < hi) InsertFree(lo, hi);
  }
}

void Segment::BecomeAnnotated() {
  if (annotated_) return;
  annotated_ = true;
  FreeBacked(begin_, end());
}

void Segment::Map(uint64_t address, const Mapping& mapping) {
  // A mapping replacing one at the same VA (the unmap was lost) must not count twice.
  auto old = mappings_.find(address);
  if (old != mappings_.end()) RemoveMappingPiece(old);
  AddMappingPiece(address, mapping);
  if (!annotated_ || mapping.imported) return;
  // New memory is free except where blocks already lie (a block annotated before its map).
  InsertFree(address, address + mapping.size);
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
  if (annotated_) EraseFree(begin, end);
  return changes;
}

void Segment::RebuildFreeSizes() {
  free_sizes_.Rebuild([this](auto push) {
    for (const auto& [address, extent] : extents_) {
      if (extent.is_free()) push(extent.size, address);
    }
  });
}

void Segment::InsertFree(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  // The run grows to the free extents touching or overlapping [begin, end): they are taken out
  // and the run's non-block bytes put back as maximal free extents.
  uint64_t lo = begin;
  uint64_t hi = end;
  auto it = extents_.upper_bound(begin);
  if (it != extents_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.is_free() && prev->first + prev->second.size >= begin) it = prev;
  }
  while (it != extents_.end() && it->first <= hi) {
    if (!it->second.is_free()) {
      ++it;
      continue;
    }
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->first + it->second.size);
    CountFreeRemoved(it->first, it->second.size);
    it = extents_.erase(it);
  }
  // What remains in [lo, hi) are blocks: the gaps between them are the free runs. Collected
  // first, as inserting invalidates btree iterators.
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  uint64_t cursor = lo;
  it = extents_.upper_bound(lo);
  if (it != extents_.begin()) {
    auto prev = std::prev(it);
    cursor = std::max(cursor, std::min(hi, prev->first + prev->second.size));
  }
  for (; it != extents_.end() && it->first < hi; ++it) {
    if (it->first > cursor) runs.emplace_back(cursor, it->first);
    cursor = std::max(cursor, std::min(hi, it->first + it->second.size));
  }
  if (cursor < hi) runs.emplace_back(cursor, hi);
  for (const auto& [b, e] : runs) {
    extents_.emplace(b, FreeExtent(e - b));
    CountFreeAdded(b, e - b);
  }
  SettleFreeSizes();
}

void Segment::EraseFree(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  auto it = extents_.upper_bound(begin);
  if (it != extents_.begin() && std::prev(it)->first + std::prev(it)->second.size > begin) --it;
  // The parts of the overlapped free extents outside [begin, end) stay free.
  std::vector<std::pair<uint64_t, uint64_t>> keep;
  while (it != extents_.end() && it->first < end) {
    if (!it->second.is_free()) {
      ++it;
      continue;
    }
    const uint64_t r_begin = it->first;
    const uint64_t r_end = r_begin + it->second.size;
    if (r_begin < begin) keep.emplace_back(r_begin, begin);
    if (r_end > end) keep.emplace_back(end, r_end);
    CountFreeRemoved(it->first, it->second.size);
    it = extents_.erase(it);
  }
  for (const auto& [b, e] : keep) {
    extents_.emplace(b, FreeExtent(e - b));
    CountFreeAdded(b, e - b);
  }
  SettleFreeSizes();
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
  for (auto& [address, extent] : extents_) {
    if (extent.is_free()) continue;
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
    if (!prev->second.is_free() && prev->first + prev->second.size > address) return false;
  }
  // A block starting inside (address, address + size).
  if (it != extents_.end() && it->first == address) ++it;
  for (; it != extents_.end() && it->first < address + size; ++it) {
    if (!it->second.is_free()) return false;
  }
  auto zero = zero_blocks_.upper_bound(address);
  return zero == zero_blocks_.end() || zero->first >= address + size;
}

Segment::Placement Segment::AllocBlock(uint64_t address, const SubBlock& block,
                                       BlockSite* replaced) {
  // The common case, with one search: an annotated segment, a block with bytes, inside one free
  // range. Everything else goes the general way.
  if (!annotated_ || block.size == 0 || !zero_blocks_.empty() || !Encloses(address, block.size)) {
    return AllocBlockSlow(address, block, replaced);
  }
  const uint64_t end = address + block.size;
  auto next = extents_.upper_bound(address);
  if (next == extents_.begin()) return AllocBlockSlow(address, block, replaced);
  auto range = std::prev(next);  // the extent with the greatest start at or below `address`
  const uint64_t r_begin = range->first;
  const uint64_t r_end = r_begin + range->second.size;
  if (!range->second.is_free() || r_end < end) return AllocBlockSlow(address, block, replaced);
  // [r_begin, address) and [end, r_end) stay free; the block takes the middle.
  const uint32_t data = NewBlockData(block);
  CountFreeRemoved(r_begin, range->second.size);
  if (r_begin == address) {
    range->second = BlockExtent(block, data);  // the free extent becomes the block
  } else {
    range->second.size = address - r_begin;
    CountFreeAdded(r_begin, address - r_begin);
    next = std::next(extents_.emplace_hint(next, address, BlockExtent(block, data)));
  }
  if (end < r_end) {
    extents_.emplace_hint(next, end, FreeExtent(r_end - end));
    CountFreeAdded(end, r_end - end);
  }
  SettleFreeSizes();
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
      (same != extents_.end() && !same->second.is_free()) || zero_blocks_.contains(address);
  if (same_address) {
    // Its free was lost: forget the old block before placing the new one.
    FreeBlock(address, replaced);
    placement = Placement::kReplaced;
  }
  if (block.size == 0) {
    zero_blocks_[address] = block;
  } else {
    EraseFree(address, address + block.size);
    extents_.emplace(address, BlockExtent(block, NewBlockData(block)));
  }
  AccountPlaced(block);
  return placement;
}

bool Segment::FreeBlock(uint64_t address, BlockSite* freed) {
  auto it = extents_.find(address);
  if (it == extents_.end() || it->second.is_free()) {
    auto zero = zero_blocks_.find(address);
    if (zero == zero_blocks_.end()) return false;
    *freed = BlockSite{zero->second.size, zero->second.stack_id};
    AccountRemoved(zero->second.size, zero->second.pending_free);
    zero_blocks_.erase(zero);
    return true;  // no bytes: the free ranges stay as they are
  }
  *freed = BlockSite{it->second.size, it->second.stack_id};
  AccountRemoved(it->second.size, it->second.pending_free);
  ReleaseBlockData(it->second.block);  // keeps iterators: only block_data_ changes
  const uint64_t size = it->second.size;
  if (kind_ != SegmentKind::kDriverAllocation) {
    // Only the mapped parts of a reservation become free.
    extents_.erase(it);
    FreeBacked(address, address + size);
    return true;
  }
  // A driver allocation is backed throughout: the block's bytes join the free extents that
  // touch it, found next to it in the same map.
  auto next = std::next(it);
  const bool merge_next =
      next != extents_.end() && next->second.is_free() && next->first == address + size;
  uint64_t run = size;
  if (merge_next) {
    run += next->second.size;
    CountFreeRemoved(next->first, next->second.size);
  }
  if (it != extents_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.is_free() && prev->first + prev->second.size == address) {
      CountFreeRemoved(prev->first, prev->second.size);
      prev->second.size += run;
      CountFreeAdded(prev->first, prev->second.size);
      extents_.erase(it, merge_next ? std::next(next) : next);
      SettleFreeSizes();
      return true;
    }
  }
  it->second = FreeExtent(run);
  CountFreeAdded(address, run);
  if (merge_next) extents_.erase(next);
  SettleFreeSizes();
  return true;
}

bool Segment::MarkPendingFree(uint64_t address) {
  SubBlock* b = nullptr;
  if (auto it = extents_.find(address); it != extents_.end() && !it->second.is_free()) {
    b = &block_data_[it->second.block];
    it->second.pending_free = true;
  } else if (auto zero = zero_blocks_.find(address); zero != zero_blocks_.end()) {
    b = &zero->second;
  } else {
    return false;
  }
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
  // A pending block's bytes merged with the free extents right before and after it (free
  // extents never touch each other, so nothing further joins). Zero-size blocks free nothing.
  for (auto it = extents_.begin(); it != extents_.end(); ++it) {
    if (it->second.is_free() || !it->second.pending_free) continue;
    uint64_t run = it->second.size;
    if (it != extents_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.is_free() && prev->first + prev->second.size == it->first) {
        run += prev->second.size;
      }
    }
    auto next = std::next(it);
    if (next != extents_.end() && next->second.is_free() &&
        next->first == it->first + it->second.size) {
      run += next->second.size;
    }
    largest = std::max(largest, run);
  }
  return largest;
}

}  // namespace fragscope
