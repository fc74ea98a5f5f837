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
