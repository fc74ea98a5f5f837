// An ordered map from 64-bit keys (addresses) to values: a B+tree whose nodes keep their keys
// apart from their values, for the maps that every event of a replay searches (a segment's
// extents, the model's segment index).
#ifndef FRAGSCOPE_MODEL_ADDRESS_BTREE_H_
#define FRAGSCOPE_MODEL_ADDRESS_BTREE_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <type_traits>
#include <utility>

// GCC turns a copy loop into a call to memmove (-ftree-loop-distribute-patterns); for the few
// entries a node shifts, the call costs more than the loop.
#if defined(__GNUC__) && !defined(__clang__)
#define FRAGSCOPE_NO_LOOP_TO_MEMMOVE __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define FRAGSCOPE_NO_LOOP_TO_MEMMOVE
#endif

namespace fragscope {

// Unique uint64_t keys in ascending order, each with a V. The interface is the subset of
// absl::btree_map's that the model uses, with the same guarantees: lookups O(log n); any insert
// or erase invalidates every iterator but the one it returns; memory O(size()) (a node other
// than the root and the first and last leaves is at least a quarter full).
//
// Why not absl::btree_map: it stores key and value side by side and moves entries one at a
// time through their constructors. Here a node's keys are one array (a search scans eight to a
// cache line and never loads a value) and an insert or erase shifts a trivially copyable V in
// a plain loop. Leaves are linked, so stepping an iterator never climbs the tree.
// Measured in the model's replay (tests/bench/RESULTS.md): a branch-free bisection of the keys
// and memmove shifts took fewer instructions than this but more time (each bisection step
// waits for the load before it; a memmove call per shift costs more than the few entries).
//
// V must be default-constructible and movable (move-only is fine). Dereferencing an iterator
// gives a proxy with `first` (the key) and `second` (a reference to the value), so loops bind
// `const auto& [key, value]` or `auto&& [key, value]`, not `auto& [...]`.
//
// Weighted (kWeighted): every entry also carries a uint64 weight, and max_weight() is the largest
// weight of all entries, O(1): each node keeps the largest weight below it (an inner node one per
// child too, so a change rescans one node's array, not its children). A segment's free run after
// each extent is its weight, so the largest free run needs no heap of its own. set_weight is
// O(1) unless the node's largest changes, then O(log n); inserts and erases stay O(log n).
//
// Not thread-safe: one writer, or readers only.
template <typename V, int kLeafSlots = 32, int kInnerSlots = 32, bool kWeighted = false>
class AddressBtree {
  static_assert(kLeafSlots >= 8 && kInnerSlots >= 8, "nodes too small to rebalance");
  static constexpr uint64_t kNoKey = std::numeric_limits<uint64_t>::max();
  // Below these a node other than the root borrows from or merges with a sibling.
  static constexpr int kMinLeaf = kLeafSlots / 4;
  static constexpr int kMinInner = kInnerSlots / 4;

  struct Inner;
  struct NoWeight {};
  using Weight = std::conditional_t<kWeighted, uint64_t, NoWeight>;
  template <int kSlots>
  using Weights = std::conditional_t<kWeighted, std::array<uint64_t, kSlots>, NoWeight>;
  struct Node {
    bool leaf;
    int count = 0;  // keys held
    Inner* parent = nullptr;
    [[no_unique_address]] Weight max{};  // weighted: the largest weight below (0 when empty)
  };
  // Unused key slots hold kNoKey, and one more slot past the end does too, so a scan for the
  // first key >= x needs no bound check (kNoKey is never < x). A real key may be kNoKey as well.
  struct Leaf : Node {
    constexpr Leaf() : Node{true} { std::fill(std::begin(keys), std::end(keys), kNoKey); }
    uint64_t keys[kLeafSlots + 1];
    V values[kLeafSlots]{};
    [[no_unique_address]] Weights<kLeafSlots> weights{};  // of values[i]
    Leaf* prev = nullptr;
    Leaf* next = nullptr;
  };
  // children[i] holds the keys in [keys[i - 1], keys[i]) (keys[-1] = 0, keys[count] = max).
  struct Inner : Node {
    Inner() : Node{false} { std::fill(std::begin(keys), std::end(keys), kNoKey); }
    uint64_t keys[kInnerSlots + 1];
    Node* children[kInnerSlots + 1] = {};
    [[no_unique_address]] Weights<kInnerSlots + 1> child_max{};  // children[i]->max
  };

  // Keys of a node that are < x: a scan, stopped by the first key >= x (the unused slots'
  // kNoKey stops it at the latest).
  static int CountLess(const uint64_t* keys, uint64_t x) {
    int i = 0;
    while (keys[i] < x) ++i;
    return i;
  }
  // Keys in keys[0, n) that are <= x.
  static int CountLessEq(const uint64_t* keys, int n, uint64_t x) {
    return x == kNoKey ? n : CountLess(keys, x + 1);
  }

  // The entries [from, n) of a leaf one slot down (erase) or up (insert), in a plain loop, not a
  // memmove call (GCC makes such functions out of line: they differ in optimization options).
  // An empty asm in the loop keeps it inline instead, and measured no faster.
  FRAGSCOPE_NO_LOOP_TO_MEMMOVE static void ShiftDown(Leaf* leaf, int from, int n) {
    if constexpr (std::is_trivially_copyable_v<V>) {
      for (int j = from; j < n; ++j) {
        leaf->keys[j - 1] = leaf->keys[j];
        leaf->values[j - 1] = leaf->values[j];
        if constexpr (kWeighted) leaf->weights[j - 1] = leaf->weights[j];
      }
    } else {
      std::move(leaf->keys + from, leaf->keys + n, leaf->keys + from - 1);
      std::move(leaf->values + from, leaf->values + n, leaf->values + from - 1);
      if constexpr (kWeighted) {
        std::copy(leaf->weights.data() + from, leaf->weights.data() + n,
                  leaf->weights.data() + from - 1);
      }
    }
  }
  FRAGSCOPE_NO_LOOP_TO_MEMMOVE static void ShiftUp(Leaf* leaf, int from, int n) {
    if constexpr (std::is_trivially_copyable_v<V>) {
      for (int j = n; j > from; --j) {
        leaf->keys[j] = leaf->keys[j - 1];
        leaf->values[j] = leaf->values[j - 1];
        if constexpr (kWeighted) leaf->weights[j] = leaf->weights[j - 1];
      }
    } else {
      std::move_backward(leaf->keys + from, leaf->keys + n, leaf->keys + n + 1);
      std::move_backward(leaf->values + from, leaf->values + n, leaf->values + n + 1);
      if constexpr (kWeighted) {
        std::copy_backward(leaf->weights.data() + from, leaf->weights.data() + n,
                           leaf->weights.data() + n + 1);
      }
    }
  }

 public:
  using key_type = uint64_t;
  using mapped_type = V;
  using size_type = std::size_t;

  template <bool kConst>
  class Iterator {
    using LeafPtr = std::conditional_t<kConst, const Leaf*, Leaf*>;
    using ValueRef = std::conditional_t<kConst, const V&, V&>;

   public:
    struct Ref {
      const uint64_t& first;
      ValueRef second;
    };
    struct Arrow {
      Ref ref;
      const Ref* operator->() const { return &ref; }
    };
    using iterator_category = std::bidirectional_iterator_tag;
    using difference_type = std::ptrdiff_t;
    using value_type = std::pair<uint64_t, V>;
    using reference = Ref;
    using pointer = Arrow;

    Iterator() = default;
    // iterator -> const_iterator.
    template <bool kOther, typename = std::enable_if_t<kConst && !kOther>>
    Iterator(const Iterator<kOther>& other) : leaf_(other.leaf_), pos_(other.pos_) {}

    Ref operator*() const { return Ref{leaf_->keys[pos_], leaf_->values[pos_]}; }
    // Weighted trees: the entry's weight.
    uint64_t weight() const requires kWeighted { return leaf_->weights[pos_]; }
    Arrow operator->() const { return Arrow{**this}; }
    Iterator& operator++() {
      if (++pos_ == leaf_->count && leaf_->next != nullptr) {
        leaf_ = leaf_->next;
        pos_ = 0;
      }
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++*this;
      return old;
    }
    Iterator& operator--() {
      if (pos_ == 0) {
        leaf_ = leaf_->prev;
        pos_ = leaf_->count;
      }
      --pos_;
      return *this;
    }
    Iterator operator--(int) {
      Iterator old = *this;
      --*this;
      return old;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) {
      return a.leaf_ == b.leaf_ && a.pos_ == b.pos_;
    }
    friend bool operator!=(const Iterator& a, const Iterator& b) { return !(a == b); }

   private:
    friend class AddressBtree;
    template <bool>
    friend class Iterator;
    // Positions are normalized: pos < leaf->count, except end() = {last leaf, its count}.
    Iterator(LeafPtr leaf, int pos) : leaf_(leaf), pos_(pos) {
      if (pos_ == leaf_->count && leaf_->next != nullptr) {
        leaf_ = leaf_->next;
        pos_ = 0;
      }
    }
    LeafPtr leaf_ = nullptr;
    int pos_ = 0;
  };
  using iterator = Iterator<false>;
  using const_iterator = Iterator<true>;

  AddressBtree() { Reset(); }
  ~AddressBtree() { Destroy(root_); }
  AddressBtree(const AddressBtree&) = delete;
  AddressBtree& operator=(const AddressBtree&) = delete;
  AddressBtree(AddressBtree&& other) noexcept { Steal(other); }
  AddressBtree& operator=(AddressBtree&& other) noexcept {
    if (this != &other) {
      Destroy(root_);
      Steal(other);
    }
    return *this;
  }

  size_type size() const { return size_; }
  // Leaves in use (tests, and memory figures: each holds kLeafSlots entries' room).
  size_type leaf_count() const {
    size_type n = 0;
    for (const Leaf* leaf = first_; leaf != nullptr; leaf = leaf->next) ++n;
    return n;
  }
  bool empty() const { return size_ == 0; }
  void clear() {
    Destroy(root_);
    Reset();
  }

  iterator begin() { return iterator(first_, 0); }
  iterator end() { return iterator(last_, last_->count); }
  const_iterator begin() const { return const_iterator(first_, 0); }
  const_iterator end() const { return const_iterator(last_, last_->count); }

  // The first entry with key >= x / > x / == x (end() when none).
  iterator lower_bound(uint64_t x) {
    Leaf* leaf = LeafFor(x);
    return iterator(leaf, CountLess(leaf->keys, x));
  }
  const_iterator lower_bound(uint64_t x) const {
    return const_cast<AddressBtree*>(this)->lower_bound(x);
  }
  iterator upper_bound(uint64_t x) {
    Leaf* leaf = LeafFor(x);
    return iterator(leaf, CountLessEq(leaf->keys, leaf->count, x));
  }
  const_iterator upper_bound(uint64_t x) const {
    return const_cast<AddressBtree*>(this)->upper_bound(x);
  }
  iterator find(uint64_t x) {
    Leaf* leaf = LeafFor(x);
    const int i = CountLess(leaf->keys, x);
    return i < leaf->count && leaf->keys[i] == x ? iterator(leaf, i) : end();
  }
  const_iterator find(uint64_t x) const { return const_cast<AddressBtree*>(this)->find(x); }
  bool contains(uint64_t x) const { return find(x) != end(); }

  // Inserts (key, V(args...)) unless `key` is present; the entry with `key` and whether it was
  // inserted.
  template <typename... Args>
  std::pair<iterator, bool> try_emplace(uint64_t key, Args&&... args) {
    Leaf* leaf = LeafFor(key);
    const int i = CountLess(leaf->keys, key);
    if (i < leaf->count && leaf->keys[i] == key) return {iterator(leaf, i), false};
    return {InsertAt(leaf, i, key, std::forward<Args>(args)...), true};
  }
  // Sets the value of `key`, inserting it when absent.
  iterator insert_or_assign(uint64_t key, const V& value) {
    auto [it, inserted] = try_emplace(key, value);
    if (!inserted) it->second = value;
    return it;
  }
  // try_emplace, starting from `hint` when the key belongs right before it (no search then).
  template <typename... Args>
  iterator emplace_hint(const_iterator hint, uint64_t key, Args&&... args) {
    const bool after_prev = hint == begin() || std::prev(hint)->first < key;
    if (after_prev && (hint == end() || key < hint->first)) {
      return InsertAt(const_cast<Leaf*>(hint.leaf_), hint.pos_, key, std::forward<Args>(args)...);
    }
    return try_emplace(key, std::forward<Args>(args)...).first;
  }

  // Removes the entry at `it` (not end()); returns the entry after it.
  iterator erase(const_iterator it) {
    Leaf* leaf = const_cast<Leaf*>(it.leaf_);
    const int pos = it.pos_;
    const int n = leaf->count;
    Weight gone{};
    if constexpr (kWeighted) gone = leaf->weights[pos];
    ShiftDown(leaf, pos + 1, n);
    leaf->keys[n - 1] = kNoKey;
    leaf->values[n - 1] = V();  // the moved-from (or erased) value's resources go now
    leaf->count = n - 1;
    --size_;
    const bool rebalance = leaf->count < kMinLeaf && leaf != root_;
    if constexpr (kWeighted) {
      // The leaf's largest may have gone with the entry. A rebalance settles the weights itself.
      if (gone != 0 && gone == leaf->max) {
        leaf->max = LeafMax(leaf);
        if (leaf->max != gone && !rebalance) PropagateUp(leaf);
      }
    }
    if (!rebalance) return iterator(leaf, pos);
    return RebalanceLeaf(leaf, pos);
  }

  // Weighted trees. The largest weight of all entries (0 when empty). O(1).
  uint64_t max_weight() const requires kWeighted { return root_->max; }
  // Sets the weight of the entry at `it` (not end()). Iterators stay valid.
  void set_weight(const_iterator it, uint64_t w) requires kWeighted {
    Leaf* leaf = const_cast<Leaf*>(it.leaf_);
    uint64_t& slot = leaf->weights[it.pos_];
    const uint64_t old = slot;
    slot = w;
    if (ReplaceInMax(&leaf->max, old, w, [leaf] { return LeafMax(leaf); })) PropagateUp(leaf);
  }
  // Checks every node's largest weight and its parent's copy of it (tests). O(n).
  bool WeightsConsistent() const requires kWeighted { return Consistent(root_); }

 private:
  // An empty tree allocates nothing (most segments never hold an extent): its root is the
  // shared empty leaf, which only the first insert replaces and nothing ever writes.
  static constinit inline Leaf empty_leaf_{};
  Leaf* EmptyLeaf() const { return const_cast<Leaf*>(&empty_leaf_); }
  void Reset() {
    root_ = first_ = last_ = EmptyLeaf();
    size_ = 0;
  }
  void Steal(AddressBtree& other) {
    root_ = other.root_;
    first_ = other.first_;
    last_ = other.last_;
    size_ = other.size_;
    other.Reset();
  }
  void Destroy(Node* node) {
    if (node->leaf) {
      if (node != EmptyLeaf()) delete static_cast<Leaf*>(node);
      return;
    }
    Inner* inner = static_cast<Inner*>(node);
    for (int i = 0; i <= inner->count; ++i) Destroy(inner->children[i]);
    delete inner;
  }

  // The leaf whose key range holds x.
  Leaf* LeafFor(uint64_t x) const {
    Node* node = root_;
    while (!node->leaf) {
      const Inner* inner = static_cast<const Inner*>(node);
      node = inner->children[CountLessEq(inner->keys, inner->count, x)];
    }
    return static_cast<Leaf*>(node);
  }
  static int ChildIndex(const Inner* parent, const Node* child) {
    int i = 0;
    while (parent->children[i] != child) ++i;
    return i;
  }

  // Puts (key, V(args...)) at position i of `leaf`, where it keeps the order of the leaf and of
  // the whole tree with the entries before and after.
  template <typename... Args>
  iterator InsertAt(Leaf* leaf, int i, uint64_t key, Args&&... args) {
    if (leaf == EmptyLeaf()) [[unlikely]] {
      leaf = new Leaf;
      root_ = first_ = last_ = leaf;
    }
    bool split = false;
    if (leaf->count == kLeafSlots) {
      split = true;
      // Keys that arrive in order (a sub-allocator carving a segment from one end) go past
      // the last leaf or before the first: that full leaf stays full and the new key starts a
      // leaf of its own, where halves would leave every leaf half empty for good.
      int keep = kLeafSlots / 2;
      if (i == kLeafSlots && leaf == last_) keep = kLeafSlots;
      if (i == 0 && leaf == first_) keep = 0;
      Leaf* right = SplitLeaf(leaf, keep, key);
      if (i > keep || (i == keep && keep == kLeafSlots)) {
        i -= keep;
        leaf = right;
      }
    }
    const int n = leaf->count;
    ShiftUp(leaf, i, n);
    leaf->keys[i] = key;
    leaf->values[i] = V(std::forward<Args>(args)...);
    if constexpr (kWeighted) leaf->weights[i] = 0;  // changes no largest weight
    leaf->count = n + 1;
    ++size_;
    if constexpr (kWeighted) {
      if (split) FixUpFull(leaf);  // the split's nodes on this leaf's path
    }
    // A new first key of a leaf may lie below the separator that routes to it (an insert at
    // position 0 from a hint): lower that separator to it.
    if (i == 0 && leaf != first_) LowerSeparator(leaf, key);
    return iterator(leaf, i);
  }
  // The separator on the path to `node` that bounds it from below (in the nearest ancestor
  // where the path does not go to the first child) becomes at most `key`.
  static void LowerSeparator(Node* node, uint64_t key) {
    for (Inner* p = node->parent; p != nullptr; node = p, p = p->parent) {
      const int c = ChildIndex(p, node);
      if (c > 0) {
        p->keys[c - 1] = std::min(p->keys[c - 1], key);
        return;
      }
    }
  }

  // Moves the entries from `keep` on of a full leaf into a new leaf after it (none when keep is
  // the whole leaf: then `key`, about to go there, is its first); returns the new leaf.
  Leaf* SplitLeaf(Leaf* leaf, int keep, uint64_t key) {
    Leaf* right = new Leaf;
    const int moved = leaf->count - keep;
    std::move(leaf->keys + keep, leaf->keys + leaf->count, right->keys);
    std::move(leaf->values + keep, leaf->values + leaf->count, right->values);
    if constexpr (kWeighted) {
      std::copy(leaf->weights.data() + keep, leaf->weights.data() + leaf->count,
                right->weights.data());
    }
    std::fill(leaf->keys + keep, leaf->keys + leaf->count, kNoKey);
    for (int j = keep; j < leaf->count; ++j) leaf->values[j] = V();
    leaf->count = keep;
    right->count = moved;
    if constexpr (kWeighted) {
      leaf->max = LeafMax(leaf);
      right->max = LeafMax(right);
    }
    right->prev = leaf;
    right->next = leaf->next;
    if (leaf->next != nullptr) leaf->next->prev = right;
    leaf->next = right;
    if (last_ == leaf) last_ = right;
    InsertChild(leaf, moved > 0 ? right->keys[0] : key, right);
    return right;
  }
  // Puts `right` (keys >= separator) into the tree right after `left`.
  void InsertChild(Node* left, uint64_t separator, Node* right) {
    Inner* parent = left->parent;
    if (parent == nullptr) {  // a new root
      Inner* root = new Inner;
      root->keys[0] = separator;
      root->children[0] = left;
      root->children[1] = right;
      root->count = 1;
      if constexpr (kWeighted) {
        root->child_max[0] = left->max;
        root->child_max[1] = right->max;
        root->max = std::max(left->max, right->max);
      }
      left->parent = right->parent = root;
      root_ = root;
      return;
    }
    int c = ChildIndex(parent, left);
    // `left` may have changed: its entry first, so that a split below sees it. The node that
    // takes `right` is on the path of both, which the caller fixes up after.
    if constexpr (kWeighted) parent->child_max[c] = left->max;
    if (parent->count == kInnerSlots) {
      Inner* sibling = SplitInner(parent);
      if (c > parent->count) {
        c -= parent->count + 1;
        parent = sibling;
      }
    }
    const int n = parent->count;
    std::move_backward(parent->keys + c, parent->keys + n, parent->keys + n + 1);
    std::move_backward(parent->children + c + 1, parent->children + n + 1,
                       parent->children + n + 2);
    if constexpr (kWeighted) {
      std::copy_backward(parent->child_max.data() + c + 1, parent->child_max.data() + n + 1,
                         parent->child_max.data() + n + 2);
      parent->child_max[c + 1] = right->max;
    }
    parent->keys[c] = separator;
    parent->children[c + 1] = right;
    parent->count = n + 1;
    right->parent = parent;
  }
  // Moves the upper half of a full inner node into a new node after it (the middle key goes up
  // to the parent); returns the new node.
  Inner* SplitInner(Inner* node) {
    Inner* right = new Inner;
    const int keep = kInnerSlots / 2;  // keys that stay; keys[keep] goes up
    const uint64_t up = node->keys[keep];
    const int moved = node->count - keep - 1;
    std::copy(node->keys + keep + 1, node->keys + node->count, right->keys);
    std::copy(node->children + keep + 1, node->children + node->count + 1, right->children);
    if constexpr (kWeighted) {
      std::copy(node->child_max.data() + keep + 1, node->child_max.data() + node->count + 1,
                right->child_max.data());
    }
    for (int j = 0; j <= moved; ++j) right->children[j]->parent = right;
    std::fill(node->keys + keep, node->keys + node->count, kNoKey);
    std::fill(node->children + keep + 1, node->children + node->count + 1, nullptr);
    node->count = keep;
    right->count = moved;
    if constexpr (kWeighted) {
      node->max = InnerMax(node);
      right->max = InnerMax(right);
    }
    InsertChild(node, up, right);
    return right;
  }

  // `leaf` (not the root) fell below kMinLeaf after an erase at `pos`: it borrows from or
  // merges with a sibling. Returns where the entry after the erased one is now.
  iterator RebalanceLeaf(Leaf* leaf, int pos) {
    Inner* parent = leaf->parent;
    const int c = ChildIndex(parent, leaf);
    if (c > 0) {
      Leaf* left = static_cast<Leaf*>(parent->children[c - 1]);
      if (left->count + leaf->count <= kLeafSlots) {
        const int offset = left->count;
        MoveEntries(leaf, 0, leaf->count, left, offset);
        RemoveLeaf(leaf, parent, c);
        if constexpr (kWeighted) FixUpFull(left);
        return iterator(left, offset + pos);
      }
      // Borrow: the last k of the left sibling go to the front of this leaf.
      const int k = (left->count - leaf->count) / 2;
      ShiftRight(leaf, k);
      MoveEntries(left, left->count - k, k, leaf, 0);
      parent->keys[c - 1] = leaf->keys[0];
      if constexpr (kWeighted) {
        left->max = LeafMax(left);
        parent->child_max[c - 1] = left->max;
        FixUpFull(leaf);
      }
      return iterator(leaf, pos + k);
    }
    Leaf* right = static_cast<Leaf*>(parent->children[1]);
    if (leaf->count + right->count <= kLeafSlots) {
      MoveEntries(right, 0, right->count, leaf, leaf->count);
      RemoveLeaf(right, parent, 1);
      if constexpr (kWeighted) FixUpFull(leaf);
      return iterator(leaf, pos);
    }
    // Borrow: the first k of the right sibling go to the end of this leaf.
    const int k = (right->count - leaf->count) / 2;
    MoveEntries(right, 0, k, leaf, leaf->count);
    ShiftLeft(right, k);
    parent->keys[0] = right->keys[0];
    if constexpr (kWeighted) {
      right->max = LeafMax(right);
      parent->child_max[1] = right->max;
      FixUpFull(leaf);
    }
    return iterator(leaf, pos);
  }
  // Moves entries [from, from + k) of `src` to `dst` at `at` (dst has room; for a move that
  // leaves a gap in src, the caller closes it). src's vacated slots get sentinels when they were
  // its last ones.
  static void MoveEntries(Leaf* src, int from, int k, Leaf* dst, int at) {
    std::move(src->keys + from, src->keys + from + k, dst->keys + at);
    std::move(src->values + from, src->values + from + k, dst->values + at);
    if constexpr (kWeighted) {
      std::copy(src->weights.data() + from, src->weights.data() + from + k,
                dst->weights.data() + at);
    }
    dst->count += k;
    if (from + k == src->count) {
      std::fill(src->keys + from, src->keys + from + k, kNoKey);
      for (int j = from; j < from + k; ++j) src->values[j] = V();
      src->count = from;
    }
  }
  // Opens k slots at the front of `leaf`.
  static void ShiftRight(Leaf* leaf, int k) {
    const int n = leaf->count;
    std::move_backward(leaf->keys, leaf->keys + n, leaf->keys + n + k);
    std::move_backward(leaf->values, leaf->values + n, leaf->values + n + k);
    if constexpr (kWeighted) {
      std::copy_backward(leaf->weights.data(), leaf->weights.data() + n,
                         leaf->weights.data() + n + k);
    }
  }
  // Drops the first k entries of `leaf` (already moved out).
  static void ShiftLeft(Leaf* leaf, int k) {
    const int n = leaf->count;
    std::move(leaf->keys + k, leaf->keys + n, leaf->keys);
    std::move(leaf->values + k, leaf->values + n, leaf->values);
    if constexpr (kWeighted) {
      std::copy(leaf->weights.data() + k, leaf->weights.data() + n, leaf->weights.data());
    }
    std::fill(leaf->keys + n - k, leaf->keys + n, kNoKey);
    for (int j = n - k; j < n; ++j) leaf->values[j] = V();
    leaf->count = n - k;
  }
  // Unlinks the emptied leaf parent->children[c] (c > 0) and deletes it.
  void RemoveLeaf(Leaf* leaf, Inner* parent, int c) {
    if (leaf->prev != nullptr) leaf->prev->next = leaf->next;
    if (leaf->next != nullptr) leaf->next->prev = leaf->prev;
    if (last_ == leaf) last_ = leaf->prev;
    delete leaf;
    RemoveChild(parent, c);
  }
  // Removes children[c] (c > 0, already deleted) and the separator before it; then the node
  // borrows or merges if it fell below kMinInner, and a root with one child gives way to it.
  void RemoveChild(Inner* node, int c) {
    const int n = node->count;
    std::move(node->keys + c, node->keys + n, node->keys + c - 1);
    std::move(node->children + c + 1, node->children + n + 1, node->children + c);
    if constexpr (kWeighted) {
      std::copy(node->child_max.data() + c + 1, node->child_max.data() + n + 1,
                node->child_max.data() + c);
    }
    node->keys[n - 1] = kNoKey;
    node->children[n] = nullptr;
    node->count = n - 1;
    // The caller fixes up the path that goes through `node` (merges and rotations below keep
    // it through the node that survives); nodes off that path are settled here.
    if (node == root_) {
      if (node->count == 0) {
        root_ = node->children[0];
        root_->parent = nullptr;
        delete node;
      }
      return;
    }
    if (node->count >= kMinInner) return;
    Inner* parent = node->parent;
    const int p = ChildIndex(parent, node);
    if (p > 0) {
      Inner* left = static_cast<Inner*>(parent->children[p - 1]);
      if (left->count + 1 + node->count <= kInnerSlots) {
        MergeInner(left, parent->keys[p - 1], node);  // the path now goes through `left`
        RemoveChild(parent, p);
        return;
      }
      // Rotate one child from the left sibling through the parent.
      const int m = node->count;
      std::move_backward(node->keys, node->keys + m, node->keys + m + 1);
      std::move_backward(node->children, node->children + m + 1, node->children + m + 2);
      if constexpr (kWeighted) {
        std::copy_backward(node->child_max.data(), node->child_max.data() + m + 1,
                           node->child_max.data() + m + 2);
        node->child_max[0] = left->child_max[left->count];
      }
      node->keys[0] = parent->keys[p - 1];
      node->children[0] = left->children[left->count];
      node->children[0]->parent = node;
      node->count = m + 1;
      parent->keys[p - 1] = left->keys[left->count - 1];
      left->keys[left->count - 1] = kNoKey;
      left->children[left->count] = nullptr;
      --left->count;
      if constexpr (kWeighted) {
        left->max = InnerMax(left);
        parent->child_max[p - 1] = left->max;
      }
      return;
    }
    Inner* right = static_cast<Inner*>(parent->children[1]);
    if (node->count + 1 + right->count <= kInnerSlots) {
      MergeInner(node, parent->keys[0], right);
      RemoveChild(parent, 1);
      return;
    }
    // Rotate one child from the right sibling through the parent.
    const int m = node->count;
    node->keys[m] = parent->keys[0];
    node->children[m + 1] = right->children[0];
    if constexpr (kWeighted) node->child_max[m + 1] = right->child_max[0];
    node->children[m + 1]->parent = node;
    node->count = m + 1;
    parent->keys[0] = right->keys[0];
    const int r = right->count;
    std::move(right->keys + 1, right->keys + r, right->keys);
    std::move(right->children + 1, right->children + r + 1, right->children);
    if constexpr (kWeighted) {
      std::copy(right->child_max.data() + 1, right->child_max.data() + r + 1,
                right->child_max.data());
    }
    right->keys[r - 1] = kNoKey;
    right->children[r] = nullptr;
    right->count = r - 1;
    if constexpr (kWeighted) {
      right->max = InnerMax(right);
      parent->child_max[1] = right->max;
    }
  }
  // Appends `separator` and all of `right` to `left`, then deletes `right`.
  static void MergeInner(Inner* left, uint64_t separator, Inner* right) {
    const int n = left->count;
    left->keys[n] = separator;
    std::copy(right->keys, right->keys + right->count, left->keys + n + 1);
    std::copy(right->children, right->children + right->count + 1, left->children + n + 1);
    if constexpr (kWeighted) {
      std::copy(right->child_max.data(), right->child_max.data() + right->count + 1,
                left->child_max.data() + n + 1);
    }
    for (int j = 0; j <= right->count; ++j) right->children[j]->parent = left;
    left->count = n + 1 + right->count;
    delete right;
  }

  // Weighted trees: the largest weight of a leaf's entries / of an inner node's children.
  static uint64_t LeafMax(const Leaf* leaf) {
    uint64_t m = 0;
    for (int i = 0; i < leaf->count; ++i) m = std::max(m, leaf->weights[i]);
    return m;
  }
  static uint64_t InnerMax(const Inner* inner) {
    uint64_t m = 0;
    for (int i = 0; i <= inner->count; ++i) m = std::max(m, inner->child_max[i]);
    return m;
  }
  // One of a node's items went from `old` to `now`: updates *max, the node's largest, rescanning
  // the node (rescan()) only when its largest item shrank. Returns whether *max changed.
  template <typename Rescan>
  static bool ReplaceInMax(uint64_t* max, uint64_t old, uint64_t now, Rescan rescan) {
    if (now > *max) {
      *max = now;
      return true;
    }
    if (old != *max || now == old) return false;
    const uint64_t again = rescan();
    if (again == *max) return false;
    *max = again;
    return true;
  }
  // `node`'s largest changed (every node is right but its ancestors): carries it up as far as
  // it changes an ancestor's largest.
  static void PropagateUp(Node* node) {
    for (Inner* p = node->parent; p != nullptr; node = p, p = p->parent) {
      uint64_t& entry = p->child_max[ChildIndex(p, node)];
      const uint64_t old = entry;
      entry = node->max;
      if (!ReplaceInMax(&p->max, old, entry, [p] { return InnerMax(p); })) return;
    }
  }
  // After a split, merge or borrow: recomputes `leaf` and every node above it (the nodes off
  // that path that the change touched are already right).
  static void FixUpFull(Leaf* leaf) {
    leaf->max = LeafMax(leaf);
    Node* node = leaf;
    for (Inner* p = node->parent; p != nullptr; node = p, p = p->parent) {
      p->child_max[ChildIndex(p, node)] = node->max;
      p->max = InnerMax(p);
    }
  }
  static bool Consistent(const Node* node) {
    if (node->leaf) return node->max == LeafMax(static_cast<const Leaf*>(node));
    const Inner* inner = static_cast<const Inner*>(node);
    for (int i = 0; i <= inner->count; ++i) {
      const Node* child = inner->children[i];
      if (child->parent != inner || inner->child_max[i] != child->max || !Consistent(child)) {
        return false;
      }
    }
    return node->max == InnerMax(inner);
  }

  Node* root_;
  Leaf* first_;  // the leaves in key order, linked
  Leaf* last_;
  size_type size_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_ADDRESS_BTREE_H_
