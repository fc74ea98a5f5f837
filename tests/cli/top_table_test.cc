// `fragscope top`'s table from a collector answer: one row per process and device, rates
// between refreshes, and figures that are not measured now never shown as if they were.
#include "top_table.h"

#include "gtest/gtest.h"

namespace fragscope::cli {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

nlohmann::json Stream(uint64_t pid, uint64_t events) {
  nlohmann::json device = {{"device", 0},
                           {"reserved_bytes", 96 * kMiB},
                           {"allocated_bytes", 40 * kMiB},
                           {"largest_free_range_bytes", 20 * kMiB},
                           {"fragmentation", 0.25}};
  return {{"pid", pid},
          {"exe", "/usr/bin/python3"},
          {"connected", true},
          {"report", {{"events", events}, {"devices", {device}}}}};
}

TEST(TopTable, RowsAndRates) {
  TopRates rates;
  nlohmann::json doc = {{"streams", {Stream(41, 100), Stream(42, 7)}}};
  std::string table = TopTable(doc, 0, &rates, 1.0);
  EXPECT_NE(table.find("41       python3"), std::string::npos) << table;
  // One look gives no rate: unknown, not 0.
  EXPECT_NE(table.find("25.0%         -"), std::string::npos) << table;
  EXPECT_NE(table.find("96.00 MiB   40.00 MiB   20.00 MiB   25.0%"), std::string::npos) << table;
  EXPECT_EQ(table.find('*'), std::string::npos) << table;
  doc["streams"][0]["report"]["events"] = 400;
  table = TopTable(doc, 41, &rates, 3.0);  // 300 events in 2 s, pid 42 filtered out
  EXPECT_NE(table.find("  150  "), std::string::npos) << table;
  EXPECT_EQ(table.find("\n42 "), std::string::npos) << table;
  const std::string empty = TopTable({{"streams", nlohmann::json::array()}}, 0, &rates, 4.0);
  EXPECT_NE(empty.find("(no process with device memory yet)"), std::string::npos) << empty;
}

// A site is known by its first frame outside fragscope: annotate.h's inline functions are the
// innermost frames of every annotated block, and name no site of the program's. Unsymbolized
// frames (no debug information) read as module+offset, never as a blank.
TEST(TopTable, TopSiteIsTheFirstFrameOutsideFragscope) {
  TopRates rates;
  nlohmann::json doc = {{"streams", {Stream(41, 100), Stream(42, 5)}}};
  doc["streams"][0]["report"]["sites"] = {
      {{"stack",
        {{{"function", "fragscope_annotate_block_alloc"}, {"module", "/opt/app/bin/train"}},
         {{"function", ""}, {"module", "/opt/fs/lib/libfragscope.so"}, {"text", "x"}},
         {{"function", "Pool::Allocate(unsigned long)"}, {"module", "/opt/app/bin/train"}}}}}};
  doc["streams"][1]["report"]["sites"] = {
      {{"stack", {{{"function", ""}, {"module", "/opt/app/bin/hold"}, {"text", "hold+0x11aa"}}}}}};
  const std::string table = TopTable(doc, 0, &rates, 1.0);
  EXPECT_NE(table.find("  Pool::Allocate(unsigned long)\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  hold+0x11aa\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("fragscope_annotate"), std::string::npos) << table;
}

TEST(TopTable, BlocksFromAnOlderSyncAreStarredAndSaidSo) {
  TopRates rates;
  nlohmann::json doc = {{"streams", {Stream(41, 100)}}};
  doc["streams"][0]["report"]["block_syncs"] = 2;
  doc["streams"][0]["report"]["blocks_known_at_end"] = true;  // right after a sync
  EXPECT_EQ(TopTable(doc, 0, &rates, 1.0).find('*'), std::string::npos);
  doc["streams"][0]["report"]["blocks_known_at_end"] = false;
  const std::string table = TopTable(doc, 0, &rates, 2.0);
  EXPECT_NE(table.find("96.00 MiB  40.00 MiB*  20.00 MiB*  25.0%*"), std::string::npos) << table;
  EXPECT_NE(table.find("* PyTorch's blocks as of its last sync"), std::string::npos) << table;
}

}  // namespace
}  // namespace fragscope::cli
