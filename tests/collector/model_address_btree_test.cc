// AddressBtree against std::map: random inserts (plain and from hints), erases, searches and
// walks in both directions, at node sizes small enough that a few thousand keys build trees of
// four levels and every split, borrow, merge and root change runs many times.
#include "fragscope/model/address_btree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace fragscope {
namespace {

// Checks every lookup of `key` on both maps, then a full walk forward and backward.
template <typename Tree>
void ExpectSame(const Tree& tree, const std::map<uint64_t, uint64_t>& ref) {
  ASSERT_EQ(tree.size(), ref.size());
  ASSERT_EQ(tree.empty(), ref.empty());
  auto it = tree.begin();
  for (const auto& [k, v] : ref) {
    ASSERT_NE(it, tree.end());
    ASSERT_EQ(it->first, k);
    ASSERT_EQ(it->second, v);
    ++it;
  }
  ASSERT_EQ(it, tree.end());
  auto rit = ref.rbegin();
  while (it != tree.begin()) {
    --it;
    ASSERT_EQ(it->first, rit->first);
    ++rit;
  }
  ASSERT_EQ(rit, ref.rend());
}

template <typename Tree>
void ExpectSameLookups(const Tree& tree, const std::map<uint64_t, uint64_t>& ref, uint64_t key) {
  auto lb = tree.lower_bound(key);
  auto rlb = ref.lower_bound(key);
  ASSERT_EQ(lb == tree.end(), rlb == ref.end()) << key;
  if (rlb != ref.end()) {
    ASSERT_EQ(lb->first, rlb->first) << key;
  }
  auto ub = tree.upper_bound(key);
  auto rub = ref.upper_bound(key);
  ASSERT_EQ(ub == tree.end(), rub == ref.end()) << key;
  if (rub != ref.end()) {
    ASSERT_EQ(ub->first, rub->first) << key;
  }
  auto f = tree.find(key);
  ASSERT_EQ(f == tree.end(), !ref.contains(key)) << key;
  if (f != tree.end()) {
    ASSERT_EQ(f->second, ref.at(key));
  }
  ASSERT_EQ(tree.contains(key), ref.contains(key));
}

template <int kLeaf, int kInner>
void RunRandom(uint32_t seed, uint64_t key_space, int steps) {
  AddressBtree<uint64_t, kLeaf, kInner> tree;
  std::map<uint64_t, uint64_t> ref;
  std::mt19937_64 rng(seed);
  for (int step = 0; step < steps; ++step) {
    // Phases that grow and shrink the tree, so that it is built up and torn down again.
    const bool growing = (step / 3000) % 2 == 0;
    const uint64_t key = rng() % key_space;
    const int op = static_cast<int>(rng() % 10);
    if (op < (growing ? 5 : 2)) {
      auto [it, inserted] = tree.try_emplace(key, key * 3 + 1);
      const bool ref_inserted = ref.try_emplace(key, key * 3 + 1).second;
      ASSERT_EQ(inserted, ref_inserted);
      ASSERT_EQ(it->first, key);
    } else if (op < (growing ? 7 : 4)) {
      // From a hint: right (upper_bound, as the model inserts), or wrong on purpose.
      auto hint = rng() % 4 == 0 ? tree.begin() : tree.upper_bound(key);
      if (!ref.contains(key)) {
        auto it = tree.emplace_hint(hint, key, key * 3 + 1);
        ref.emplace(key, key * 3 + 1);
        ASSERT_EQ(it->first, key);
      }
    } else if (op < 9) {
      // Erase the entry at or after `key`; the returned iterator is the next entry.
      auto it = tree.lower_bound(key);
      auto rit = ref.lower_bound(key);
      if (rit == ref.end()) continue;
      ASSERT_EQ(it->first, rit->first);
      auto next = tree.erase(it);
      auto rnext = ref.erase(rit);
      ASSERT_EQ(next == tree.end(), rnext == ref.end());
      if (rnext != ref.end()) {
        ASSERT_EQ(next->first, rnext->first);
      }
    } else {
      ExpectSameLookups(tree, ref, key);
      tree.insert_or_assign(key + 1, key);
      ref.insert_or_assign(key + 1, key);
      // Values change in place through an iterator.
      if (auto it = tree.find(key); it != tree.end()) {
        it->second += 7;
        ref[key] += 7;
      }
    }
    if (step % 997 == 0) ExpectSame(tree, ref);
  }
  ExpectSame(tree, ref);
  for (uint64_t key = 0; key < std::min<uint64_t>(key_space, 2000); ++key) {
    ExpectSameLookups(tree, ref, key);
  }
  // Erase everything from the front: the tree shrinks back to one leaf.
  while (!ref.empty()) {
    auto next = tree.erase(tree.begin());
    ref.erase(ref.begin());
    ASSERT_EQ(next, tree.begin());
  }
  ExpectSame(tree, ref);
}

TEST(AddressBtreeTest, MatchesStdMapWithSmallNodes) {
  for (uint32_t seed = 1; seed <= 4; ++seed) RunRandom<8, 8>(seed, 3000, 60000);
}

TEST(AddressBtreeTest, MatchesStdMapWithDefaultNodes) {
  for (uint32_t seed = 1; seed <= 2; ++seed) RunRandom<32, 32>(seed, 20000, 60000);
}

TEST(AddressBtreeTest, SparseKeysAndTheLargestKey) {
  RunRandom<8, 8>(7, UINT64_MAX, 20000);
  AddressBtree<int, 8, 8> tree;
  tree.try_emplace(UINT64_MAX, 1);
  tree.try_emplace(0, 2);
  ASSERT_EQ(tree.size(), 2u);
  EXPECT_EQ(tree.find(UINT64_MAX)->second, 1);
  EXPECT_EQ(tree.upper_bound(UINT64_MAX), tree.end());
  EXPECT_EQ(tree.lower_bound(UINT64_MAX)->first, UINT64_MAX);
  EXPECT_EQ(tree.upper_bound(0)->first, UINT64_MAX);
  EXPECT_EQ(std::prev(tree.end())->first, UINT64_MAX);
}

TEST(AddressBtreeTest, AscendingAndDescendingInsertsFromHints) {
  // The model places most entries from a hint (upper_bound of the new key): ascending keys go
  // at the end, descending ones at the front of a leaf, where the separator above must follow.
  AddressBtree<uint64_t, 8, 8> tree;
  std::map<uint64_t, uint64_t> ref;
  for (uint64_t k = 1000; k < 3000; k += 2) {
    tree.emplace_hint(tree.upper_bound(k), k, k);
    ref.emplace(k, k);
  }
  for (int64_t i = 999; i > 0; i -= 2) {
    const uint64_t k = static_cast<uint64_t>(i);
    tree.emplace_hint(tree.upper_bound(k), k, k);
    ref.emplace(k, k);
  }
  for (uint64_t k = 2000; k < 2400; ++k) {
    if (ref.contains(k)) continue;
    tree.emplace_hint(tree.lower_bound(k), k, k);
    ref.emplace(k, k);
  }
  ExpectSame(tree, ref);
  for (uint64_t k = 0; k < 3100; ++k) ExpectSameLookups(tree, ref, k);
}

TEST(AddressBtreeTest, KeysInOrderFillTheirLeaves) {
  // Ascending keys (appended past the last leaf) and descending ones (before the first) leave
  // full leaves behind them, not half-full ones.
  AddressBtree<uint64_t, 8, 8> up;
  AddressBtree<uint64_t, 8, 8> down;
  std::map<uint64_t, uint64_t> ref;
  for (uint64_t k = 1; k <= 800; ++k) {
    up.emplace_hint(up.end(), k, k);
    down.emplace_hint(down.begin(), 801 - k, 801 - k);
    ref.emplace(k, k);
  }
  EXPECT_EQ(up.leaf_count(), 100u);
  EXPECT_EQ(down.leaf_count(), 100u);
  ExpectSame(up, ref);
  ExpectSame(down, ref);
  for (uint64_t k = 0; k < 810; ++k) {
    ExpectSameLookups(up, ref, k);
    ExpectSameLookups(down, ref, k);
  }
  // Random keys keep every leaf but the first and last at least a quarter full.
  AddressBtree<uint64_t, 8, 8> random;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 5000; ++i) random.try_emplace(rng() % 100000, 0);
  for (int i = 0; i < 4000; ++i) {
    auto it = random.lower_bound(rng() % 100000);
    if (it != random.end()) random.erase(it);
  }
  EXPECT_LE(random.leaf_count(), random.size() / 2 + 2);
}

TEST(AddressBtreeTest, HoldsMoveOnlyValuesAndReleasesThem) {
  auto counter = std::make_shared<int>(0);
  struct Counted {
    std::shared_ptr<int> owner;
  };
  {
    AddressBtree<std::unique_ptr<Counted>, 8, 8> tree;
    for (uint64_t k = 0; k < 500; ++k) {
      tree.try_emplace(k * 5, std::make_unique<Counted>(Counted{counter}));
    }
    EXPECT_EQ(counter.use_count(), 501);
    for (uint64_t k = 0; k < 500; k += 2) tree.erase(tree.find(k * 5));
    EXPECT_EQ(counter.use_count(), 251);
    AddressBtree<std::unique_ptr<Counted>, 8, 8> moved(std::move(tree));
    EXPECT_TRUE(tree.empty());
    EXPECT_EQ(moved.size(), 250u);
    EXPECT_EQ(counter.use_count(), 251);
    moved.clear();
    EXPECT_EQ(counter.use_count(), 1);
    for (uint64_t k = 0; k < 100; ++k) {
      moved.try_emplace(k, std::make_unique<Counted>(Counted{counter}));
    }
  }
  EXPECT_EQ(counter.use_count(), 1);  // the destructor released the rest
}

// Weighted trees: after every insert, erase and weight change, max_weight() is the largest
// weight of a reference map and every node's stored largest agrees with what is below it.
template <int kLeaf, int kInner>
void RunWeighted(uint32_t seed, uint64_t key_space, int steps) {
  AddressBtree<uint64_t, kLeaf, kInner, /*kWeighted=*/true> tree;
  std::map<uint64_t, uint64_t> weight;  // key -> weight
  std::mt19937_64 rng(seed);
  auto largest = [&] {
    uint64_t m = 0;
    for (const auto& [k, w] : weight) m = std::max(m, w);
    return m;
  };
  for (int step = 0; step < steps; ++step) {
    const bool growing = (step / 2000) % 2 == 0;
    const uint64_t key = rng() % key_space;
    // Weights from a small range often tie with the largest; from a wide one rarely.
    const uint64_t w = rng() % 3 == 0 ? rng() % 4 : rng() % 1000000;
    const int op = static_cast<int>(rng() % 10);
    if (op < (growing ? 4 : 2)) {
      auto hint = tree.upper_bound(key);
      if (!weight.contains(key)) {
        auto it = tree.emplace_hint(hint, key, key);
        ASSERT_EQ(it.weight(), 0u);  // new entries weigh nothing
        weight[key] = 0;
        tree.set_weight(it, w);
        weight[key] = w;
      }
    } else if (op < 6) {
      auto it = tree.lower_bound(key);
      if (it == tree.end()) continue;
      ASSERT_EQ(it.weight(), weight.at(it->first));
      weight.erase(it->first);
      auto next = tree.erase(it);
      if (next != tree.end()) {
        ASSERT_EQ(next.weight(), weight.at(next->first));
      }
    } else {
      auto it = tree.lower_bound(key);
      if (it == tree.end()) continue;
      // Sometimes lower the largest, the change that makes a node rescan.
      const uint64_t to = rng() % 2 == 0 && weight.at(it->first) == largest() ? w / 2 : w;
      tree.set_weight(it, to);
      weight[it->first] = to;
    }
    ASSERT_EQ(tree.max_weight(), largest()) << "step " << step;
    if (step % 101 == 0) {
      ASSERT_TRUE(tree.WeightsConsistent()) << "step " << step;
    }
  }
  ASSERT_TRUE(tree.WeightsConsistent());
  // Entries keep their weights through every split, merge and borrow.
  ASSERT_EQ(tree.size(), weight.size());
  auto it = tree.begin();
  for (const auto& [k, w] : weight) {
    ASSERT_EQ(it->first, k);
    ASSERT_EQ(it.weight(), w);
    ++it;
  }
  while (!weight.empty()) {
    tree.erase(tree.begin());
    weight.erase(weight.begin());
    ASSERT_EQ(tree.max_weight(), largest());
    if (weight.size() % 53 == 0) {
      ASSERT_TRUE(tree.WeightsConsistent());
    }
  }
  EXPECT_EQ(tree.max_weight(), 0u);
}

TEST(AddressBtreeTest, WeightedKeepsTheLargestWeightWithSmallNodes) {
  for (uint32_t seed = 1; seed <= 3; ++seed) RunWeighted<8, 8>(seed, 3000, 40000);
}

TEST(AddressBtreeTest, WeightedKeepsTheLargestWeightWithDefaultNodes) {
  RunWeighted<32, 32>(5, 20000, 40000);
}

TEST(AddressBtreeTest, WeightedKeysInOrder) {
  // Ascending and descending inserts (uneven splits at the ends) and a clear.
  AddressBtree<int, 8, 8, true> tree;
  for (uint64_t k = 1; k <= 500; ++k) tree.set_weight(tree.emplace_hint(tree.end(), k, 0), k);
  EXPECT_EQ(tree.max_weight(), 500u);
  for (uint64_t k = 1000; k > 500; --k) {
    tree.set_weight(tree.emplace_hint(tree.lower_bound(k), k, 0), 2000 - k);
  }
  EXPECT_EQ(tree.max_weight(), 1499u);  // key 501's
  EXPECT_TRUE(tree.WeightsConsistent());
  tree.set_weight(tree.find(501), 0);
  EXPECT_EQ(tree.max_weight(), 1498u);
  tree.clear();
  EXPECT_EQ(tree.max_weight(), 0u);
}

}  // namespace
}  // namespace fragscope
