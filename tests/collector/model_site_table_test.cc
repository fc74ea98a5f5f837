// SiteTable: live bytes by site, and the table as it was at the latest Mark (the device's peak)
// kept site by site as sites change afterwards.
#include "fragscope/model/site_table.h"

#include <gtest/gtest.h>

#include <vector>

namespace fragscope {
namespace {

std::vector<std::pair<uint64_t, uint64_t>> Bytes(const std::vector<SiteEntry>& entries) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const SiteEntry& e : entries) out.emplace_back(e.stack_id, e.live_bytes);
  return out;
}

TEST(SiteTableTest, TopAtMarkIsTheTableAtTheMark) {
  SiteTable t;
  EXPECT_TRUE(TopSites(t.AllAtMark(), 10).empty()) << "no mark yet";
  t.Add(1, 100);
  t.Add(2, 50);
  t.Mark();
  t.Add(1, 10);
  t.Remove(2, 50);  // dead now, live at the mark
  t.Add(3, 500);    // born after the mark
  EXPECT_EQ(Bytes(TopSites(t.AllAtMark(), 10)),
            (std::vector<std::pair<uint64_t, uint64_t>>{{1, 100}, {2, 50}}));
  EXPECT_EQ(Bytes(TopSites(t.All(), 10)),
            (std::vector<std::pair<uint64_t, uint64_t>>{{3, 500}, {1, 110}}));
  t.Mark();
  EXPECT_EQ(Bytes(TopSites(t.AllAtMark(), 10)), Bytes(TopSites(t.All(), 10)));
}

// A site learned after the fact (BlockEvent.OP_SITE): the bytes move now, and at the mark too
// when the allocation was live there; one that came after the mark leaves the mark as it was.
TEST(SiteTableTest, MovedSitesMoveAtTheMarkOnlyWhenLiveThere) {
  using Table = std::vector<std::pair<uint64_t, uint64_t>>;
  SiteTable t;
  t.Add(1, 100);  // two blocks under the adapter's callback site
  t.Add(1, 30);
  t.Mark();
  t.Add(1, 7);  // born after the mark
  t.Move(1, 9, 100, /*live_at_mark=*/true);
  t.Move(1, 9, 7, /*live_at_mark=*/false);
  EXPECT_EQ(Bytes(TopSites(t.All(), 10)), (Table{{9, 107}, {1, 30}}));
  EXPECT_EQ(Bytes(TopSites(t.AllAtMark(), 10)), (Table{{9, 100}, {1, 30}}));
  t.Move(1, 8, 30, /*live_at_mark=*/true);  // the last one: site 1 is gone now and at the mark
  EXPECT_EQ(Bytes(TopSites(t.All(), 10)), (Table{{9, 107}, {8, 30}}));
  EXPECT_EQ(Bytes(TopSites(t.AllAtMark(), 10)), (Table{{9, 100}, {8, 30}}));
  t.Move(8, 8, 30, true);  // to itself: nothing
  EXPECT_EQ(Bytes(TopSites(t.AllAtMark(), 10)), (Table{{9, 100}, {8, 30}}));
}

// Removals need not match the sizes added (a stream that lost events): a site that dies keeps
// no leftover bytes, also when it is kept only because it was live at the mark.
TEST(SiteTableTest, ADeadSiteKeptForTheMarkStartsAgainFromZero) {
  SiteTable t;
  t.Add(1, 1000);
  t.Mark();
  t.Remove(1, 10);  // count 0, 990 bytes unaccounted for
  t.Remove(1, 10);  // not live: nothing to remove
  t.Add(1, 5);
  EXPECT_EQ(Bytes(TopSites(t.All(), 10)), (std::vector<std::pair<uint64_t, uint64_t>>{{1, 5}}));
  EXPECT_EQ(Bytes(TopSites(t.AllAtMark(), 10)),
            (std::vector<std::pair<uint64_t, uint64_t>>{{1, 1000}}));
}

TEST(SiteTableTest, ClearKeepsTheMark) {
  SiteTable t;
  t.Add(1, 100);
  t.Mark();
  t.Add(2, 7);
  t.ClearKeepingMark();
  EXPECT_TRUE(TopSites(t.All(), 10).empty());
  EXPECT_EQ(Bytes(TopSites(t.AllAtMark(), 10)),
            (std::vector<std::pair<uint64_t, uint64_t>>{{1, 100}}));
  t.Add(2, 3);
  EXPECT_EQ(Bytes(TopSites(t.All(), 10)), (std::vector<std::pair<uint64_t, uint64_t>>{{2, 3}}));
}

}  // namespace
}  // namespace fragscope
