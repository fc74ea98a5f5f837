// MaxMultiset: the lazy-deletion heap behind the largest-free-range summaries, against
// std::multiset.
#include "fragscope/model/max_multiset.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <random>
#include <set>

namespace fragscope {
namespace {

TEST(MaxMultisetTest, MatchesAMultisetAndStaysSmall) {
  std::mt19937_64 rng(7);
  MaxMultiset m;
  std::multiset<uint64_t> ref;
  for (int step = 0; step < 50000; ++step) {
    if (ref.empty() || rng() % 3 != 0 || (step / 5000) % 2 == 1) {
      // Phases of mostly erasures (odd thousands) grow the erased heap and force rebuilds.
      if ((step / 5000) % 2 == 1 && !ref.empty() && rng() % 4 != 0) {
        auto it = std::next(ref.begin(), static_cast<long>(rng() % ref.size()));
        m.Erase(*it);
        ref.erase(it);
        if (m.Wasteful()) m.Compact();
      } else {
        const uint64_t v = rng() % 1000;
        m.Insert(v);
        ref.insert(v);
      }
    } else {
      auto it = std::next(ref.begin(), static_cast<long>(rng() % ref.size()));
      m.Erase(*it);
      ref.erase(it);
      if (m.Wasteful()) m.Compact();
    }
    ASSERT_EQ(m.Max(), ref.empty() ? 0u : *ref.rbegin()) << "step " << step;
    ASSERT_EQ(m.empty(), ref.empty());
  }
  m.Clear();
  EXPECT_EQ(m.Max(), 0u);
  EXPECT_TRUE(m.empty());
}

// Replace(from, to) is Erase(from) + Insert(to), whichever of its paths it takes: from the top
// or from below it, to a larger, equal or smaller value, with erasures waiting in between.
TEST(MaxMultisetTest, ReplaceMatchesEraseThenInsert) {
  std::mt19937_64 rng(11);
  MaxMultiset m;
  std::multiset<uint64_t> ref;
  int replaced_top = 0;
  for (int step = 0; step < 100000; ++step) {
    const uint32_t r = rng() % 10;
    if (ref.empty() || r < 2) {
      const uint64_t v = rng() % 500;
      m.Insert(v);
      ref.insert(v);
    } else if (r < 3) {
      auto it = std::next(ref.begin(), static_cast<long>(rng() % ref.size()));
      m.Erase(*it);
      ref.erase(it);
    } else {
      // Half the time the largest value (the in-place paths), else any.
      auto it = rng() % 2 == 0 ? std::prev(ref.end())
                               : std::next(ref.begin(), static_cast<long>(rng() % ref.size()));
      const uint64_t from = *it;
      const uint64_t to = rng() % 3 == 0 ? from : rng() % 500;
      if (from == *ref.rbegin()) ++replaced_top;
      m.Replace(from, to);
      ref.erase(it);
      ref.insert(to);
    }
    if (m.Wasteful()) m.Compact();
    ASSERT_EQ(m.Max(), ref.empty() ? 0u : *ref.rbegin()) << "step " << step;
    ASSERT_EQ(m.empty(), ref.empty()) << "step " << step;
  }
  EXPECT_GT(replaced_top, 10000);  // the in-place paths ran
  // Everything left can still be erased, down to an empty set.
  while (!ref.empty()) {
    m.Erase(*ref.begin());
    ref.erase(ref.begin());
    if (m.Wasteful()) m.Compact();
    ASSERT_EQ(m.Max(), ref.empty() ? 0u : *ref.rbegin());
  }
  EXPECT_TRUE(m.empty());
}

// Replacing the top by a smaller value must surface a value erased below it correctly: the
// erased copy may become the top, and must not be reported.
TEST(MaxMultisetTest, ReplaceTopDownPastAnErasedValue) {
  MaxMultiset m;
  m.Insert(10);
  m.Insert(8);
  m.Insert(5);
  m.Erase(8);  // waits below the top
  m.Replace(10, 3);
  EXPECT_EQ(m.Max(), 5u);
  m.Replace(5, 9);  // the top, to a larger value
  EXPECT_EQ(m.Max(), 9u);
  m.Replace(9, 9);
  EXPECT_EQ(m.Max(), 9u);
  m.Erase(9);
  EXPECT_EQ(m.Max(), 3u);
  m.Erase(3);
  EXPECT_EQ(m.Max(), 0u);
  EXPECT_TRUE(m.empty());
}

// An erasure of a value that is not there (a caller's bug) must not crash or grow without end.
TEST(MaxMultisetTest, ToleratesErasingAbsentValues) {
  MaxMultiset m;
  m.Insert(5);
  m.Erase(9);  // larger than everything: dropped at once
  EXPECT_EQ(m.Max(), 5u);
  for (int i = 0; i < 1000; ++i) {
    m.Erase(1);  // smaller than the top: waits in the erased heap until compacted
    if (m.Wasteful()) m.Compact();
  }
  EXPECT_EQ(m.Max(), 5u);
  m.Erase(5);
  EXPECT_EQ(m.Max(), 0u);
}

}  // namespace
}  // namespace fragscope
