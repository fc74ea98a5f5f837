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

Coverage Segment::coverage() const {
  if (annotated_) return Coverage::kAnnotated;
  return via_caching_allocator_.value_or(false) ? Coverage::kOpaque : Coverage::kExact;
}

uint64_t Segment::backing_bytes() const {
  return kind_ == SegmentKind::kDriverAllocation ? size_ : handle_bytes_;
}

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
    free_.Insert(begin, end);
    return;
  }
  // Only mapped VA is memory; the rest of a reservation is address space.
  auto it = mappings_.upper_bound(begin);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < end; ++it) {
    if (it->second.imported) continue;  // not this process's memory to carve
    const uint64_t lo = std::max(begin, it->first);
    const uint64_t hi = std::min(end, it->first + it->second.size);
    if (lo < hi) free_.Insert(lo, hi);
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
  free_.Insert(address, address + mapping.size);
  const uint64_t end = address + mapping.size;
  auto it = blocks_.upper_bound(address);
  if (it != blocks_.begin()) --it;
  for (; it != blocks_.end() && it->first < end; ++it) {
    free_.Erase(it->first, it->first + it->second.size);
  }
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
  if (annotated_) free_.Erase(begin, end);
  return changes;
}

Segment::Placement Segment::AllocBlock(uint64_t address, const SubBlock& block,
                                       SubBlock* replaced) {
  // CanPlaceBlock's test, written out so that its search also gives the insertion hint.
  if (!Encloses(address, block.size)) return Placement::kRejected;
  auto pos = blocks_.lower_bound(address);
  if (pos != blocks_.begin()) {
    auto prev = std::prev(pos);
    if (prev->first + prev->second.size > address) return Placement::kRejected;
  }
  const bool same_address = pos != blocks_.end() && pos->first == address;
  auto next = same_address ? std::next(pos) : pos;
  if (next != blocks_.end() && next->first < address + block.size) return Placement::kRejected;

  BecomeAnnotated();  // changes free ranges only: `pos` stays valid
  Placement placement = Placement::kPlaced;
  if (same_address) {
    // Its free was lost: forget the old block before placing the new one.
    *replaced = pos->second;
    SubBlock ignored;
    FreeBlock(address, &ignored);
    placement = Placement::kReplaced;
    blocks_[address] = block;  // FreeBlock's erase invalidated `pos`
  } else {
    blocks_.emplace_hint(pos, address, block);
  }
  if (block.pending_free) {
    pending_block_bytes_ += block.size;
    ++pending_blocks_;
  } else {
    live_block_bytes_ += block.size;
  }
  free_.Erase(address, address + block.size);
  const std::pair<uint64_t, uint64_t> sp{block.stream, block.pool};
  if (!stream_and_pool_) {
    stream_and_pool_ = sp;
  } else if (*stream_and_pool_ != sp) {
    mixed_streams_ = true;
  }
  return placement;
}

bool Segment::FreeBlock(uint64_t address, SubBlock* freed) {
  auto it = blocks_.find(address);
  if (it == blocks_.end()) return false;
  *freed = it->second;
  if (it->second.pending_free) {
    pending_block_bytes_ -= it->second.size;
    --pending_blocks_;
  } else {
    live_block_bytes_ -= it->second.size;
  }
  blocks_.erase(it);
  FreeBacked(address, address + freed->size);
  return true;
}

bool Segment::MarkPendingFree(uint64_t address) {
  auto it = blocks_.find(address);
  if (it == blocks_.end()) return false;
  if (it->second.pending_free) return true;
  it->second.pending_free = true;
  live_block_bytes_ -= it->second.size;
  pending_block_bytes_ += it->second.size;
  ++pending_blocks_;
  return true;
}

std::optional<std::pair<uint64_t, uint64_t>> Segment::stream_and_pool() const {
  if (mixed_streams_) return std::nullopt;
  return stream_and_pool_;
}

uint64_t Segment::LargestFreeIfPendingCompleted() const {
  uint64_t largest = free_.largest_bytes();
  if (pending_blocks_ == 0) return largest;
  for (const auto& [address, block] : blocks_) {
    if (!block.pending_free) continue;
    largest = std::max(largest, free_.MergedSizeIfFreed(address, address + block.size));
  }
  return largest;
}

SegmentContribution Segment::Contribution() const {
  SegmentContribution c;
  c.coverage = coverage();
  c.backing = backing_bytes();
  // A reservation with nothing mapped is address space, not a segment (yet).
  c.counted = kind_ == SegmentKind::kDriverAllocation || mapped_bytes_ > 0 || !blocks_.empty();
  switch (c.coverage) {
    case Coverage::kExact:
      c.allocated = c.backing;
      c.blocks = c.backing > 0 ? 1 : 0;
      break;
    case Coverage::kOpaque:
      c.opaque = c.backing;
      break;
    case Coverage::kAnnotated:
      c.allocated = live_block_bytes_;
      c.pending = pending_block_bytes_;
      c.cached = free_.total_bytes();
      c.largest_free = free_.largest_bytes();
      c.blocks = blocks_.size();
      c.free_ranges = free_.count();
      break;
  }
  return c;
}

}  // namespace fragscope
