// An absl B-tree map with wider nodes than absl::btree_map's, for the per-segment maps that every
// block event searches.
#ifndef FRAGSCOPE_MODEL_WIDE_BTREE_MAP_H_
#define FRAGSCOPE_MODEL_WIDE_BTREE_MAP_H_

#include <memory>
#include <utility>

#include "absl/container/btree_map.h"

namespace fragscope {

// absl::btree_map with nodes of about `kNodeBytes` bytes instead of its fixed 256. The same
// class and interface as absl::btree_map (ordered, unique keys; iterators invalidated by inserts
// and erases as there); only the node size differs. absl fixes the node size of btree_map at 256
// bytes and takes another only through its container_internal templates, which this names (the
// same ones btree_map itself is made of).
//
// Why wider: with 32-byte entries a 256-byte node holds 7, so a segment of a few hundred blocks
// and free ranges is a tree of 3-4 levels, each a cache miss in a long trace; a 1 KiB node holds
// 31 and makes it 2. With such nodes, searching a node linearly (absl's default for integer keys
// under std::less) beats bisection: the bisection's unpredictable branches cost more than the
// extra compares of a scan the branch predictor follows. Replay benchmark
// (tests/bench/collector_bench.cc, 1 M events, medians of 5): 256-byte nodes bisected
// 2.16 M events/s, 1 KiB nodes scanned 2.32 M (2 KiB: no better).
template <typename Key, typename Value, typename Compare, int kNodeBytes>
using WideBtreeMap = absl::container_internal::btree_map_container<
    absl::container_internal::btree<absl::container_internal::map_params<
        Key, Value, Compare, std::allocator<std::pair<const Key, Value>>, kNodeBytes,
        /*IsMulti=*/false>>>;

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_WIDE_BTREE_MAP_H_
