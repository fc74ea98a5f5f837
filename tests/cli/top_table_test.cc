// `fragscope top`'s table from a collector answer: one row per process and device, rates
// between refreshes, and figures that are not measured now never shown as if they were.
#include "top_table.h"

#include <optional>

#include "fragscope/report/job_summary.h"
#include "gtest/gtest.h"

namespace fragscope::cli {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

nlohmann::json Stream(uint64_t pid, uint64_t events) {
  nlohmann::json device = {{"device", 0},
                           {"reserved_bytes", 96 * kMiB},
                           {"allocated_bytes", 40 * kMiB},
                           {"largest_free_range_bytes", 20 * kMiB},
                           {"fragmentation", 0.25},
                           {"oom_count", 0}};
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
  EXPECT_NE(table.find("25.0%    0         -"), std::string::npos) << table;
  EXPECT_NE(table.find("96.00 MiB   40.00 MiB   20.00 MiB   25.0%"), std::string::npos) << table;
  EXPECT_EQ(table.find('*'), std::string::npos) << table;
  doc["streams"][0]["report"]["events"] = 400;
  table = TopTable(doc, 41, &rates, 3.0);  // 300 events in 2 s, pid 42 filtered out
  EXPECT_NE(table.find("  150  "), std::string::npos) << table;
  EXPECT_EQ(table.find("\n42 "), std::string::npos) << table;
  // An ended stream of the same pid (a stream resumed after a collector restart) has no rate
  // and does not disturb the live one's.
  nlohmann::json ended = Stream(41, 50);
  ended["connected"] = false;
  doc["streams"].push_back(ended);
  doc["streams"][0]["report"]["events"] = 600;
  table = TopTable(doc, 41, &rates, 4.0);  // 200 events in 1 s
  EXPECT_NE(table.find("  200  "), std::string::npos) << table;
  EXPECT_NE(table.find("        -   (ended)\n"), std::string::npos) << table;
  doc["streams"][0]["report"]["events"] = 800;
  table = TopTable(doc, 41, &rates, 5.0);  // 200 more in 1 s, not 800 - 50
  EXPECT_NE(table.find("  200  "), std::string::npos) << table;
  const std::string empty = TopTable({{"streams", nlohmann::json::array()}}, 0, &rates, 6.0);
  EXPECT_NE(empty.find("(no process with device memory yet)"), std::string::npos) << empty;
}

// The ranks of a distributed job get a column of their own, which a single process goes without.
TEST(TopTable, RanksOfAJobHaveAColumn) {
  TopRates rates;
  nlohmann::json rank1 = Stream(51, 10);
  rank1["report"]["process"] = {{"pid", 51}, {"rank", 1}, {"world_size", 2}};
  nlohmann::json rank0 = Stream(52, 10);
  rank0["report"]["process"] = {{"pid", 52}, {"rank", 0}, {"world_size", 2}};
  nlohmann::json loner = Stream(53, 10);
  loner["report"]["process"] = {{"pid", 53}, {"rank", nullptr}};
  std::string table = TopTable({{"streams", {rank1, rank0, loner}}}, 0, &rates, 1.0);
  EXPECT_EQ(table.rfind("RANK  PID", 0), 0u) << table;
  EXPECT_NE(table.find("\n1     51       python3"), std::string::npos) << table;
  EXPECT_NE(table.find("\n0     52       python3"), std::string::npos) << table;
  EXPECT_NE(table.find("\n-     53       python3"), std::string::npos) << table;
  // In rank order, whatever order the collector listed them in; processes without a rank last.
  EXPECT_LT(table.find("\n0     52 "), table.find("\n1     51 ")) << table;
  EXPECT_LT(table.find("\n1     51 "), table.find("\n-     53 ")) << table;
  table = TopTable({{"streams", {loner}}}, 0, &rates, 2.0);
  EXPECT_EQ(table.rfind("PID", 0), 0u) << table;
}

// A site is known by its first frame outside fragscope: annotate.h's inline functions are the
// innermost frames of every annotated block, and name no site of the program's. Unsymbolized
// frames (no debug information) read as module+offset, never as a blank.
TEST(TopTable, TopSiteIsTheFirstFrameOutsideFragscope) {
  TopRates rates;
  nlohmann::json doc = {{"streams", {Stream(41, 100), Stream(42, 5)}}};
  doc["streams"][0]["report"]["devices"][0]["sites"] = {
      {{"stack",
        {{{"function", "fragscope_annotate_block_alloc"}, {"module", "/opt/app/bin/train"}},
         {{"function", ""}, {"module", "/opt/fs/lib/libfragscope.so"}, {"text", "x"}},
         {{"function", "Pool::Allocate(unsigned long)"}, {"module", "/opt/app/bin/train"}}}}}};
  doc["streams"][1]["report"]["devices"][0]["sites"] = {
      {{"stack", {{{"function", ""}, {"module", "/opt/app/bin/hold"}, {"text", "hold+0x11aa"}}}}}};
  const std::string table = TopTable(doc, 0, &rates, 1.0);
  EXPECT_NE(table.find("  Pool::Allocate(unsigned long)\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  hold+0x11aa\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("fragscope_annotate"), std::string::npos) << table;
}

// A PyTorch tensor not yet named by its Python line: the adapter's extension is fragscope's own
// (skipped like the agent), and the long C++ name that follows loses its parameters.
TEST(TopTable, AdapterFramesAreSkippedAndLongNamesShortened) {
  TopRates rates;
  nlohmann::json doc = {{"streams", {Stream(41, 100), Stream(42, 5)}}};
  const std::string ext = "/root/.cache/fragscope/fragscope_torch_adapter_2_15_0_cu132.so";
  doc["streams"][0]["report"]["devices"][0]["sites"] = {
      {{"stack",
        {{{"function", "fragscope_annotate_block_alloc"}, {"module", ext}},
         {{"function",
           "(anonymous namespace)::OnTrace(c10::CachingDeviceAllocator::TraceEntry "
           "const&)"},
          {"module", ext}},
         {{"function",
           "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::record_trace(c10::"
           "CachingDeviceAllocator::TraceEntry::Action, unsigned long, unsigned long) const"},
          {"module", "/venv/torch/lib/libc10_cuda.so"}}}}}};
  doc["streams"][1]["report"]["devices"][0]["sites"] = {
      {{"stack",
        {{{"function", "std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>()"},
          {"module", "/opt/app/bin/train"}}}}}};
  const std::string table = TopTable(doc, 0, &rates, 1.0);
  EXPECT_NE(table.find("  c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::"
                       "record_trace(...) const\n"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("OnTrace"), std::string::npos) << table;
  EXPECT_NE(table.find("_M_realloc_insert<int const&>()\n"), std::string::npos)
      << "no parameters to shorten: " << table;
}

// A PyTorch tensor's Python site (a text frame, no pc): the function with its file and line.
TEST(TopTable, PythonSiteShowsItsFileAndLine) {
  TopRates rates;
  nlohmann::json doc = {{"streams", {Stream(41, 100)}}};
  doc["streams"][0]["report"]["devices"][0]["sites"] = {
      {{"stack",
        {{{"pc", nullptr},
          {"function", "forward"},
          {"file", "/home/u/proj/model.py"},
          {"line", 42},
          {"module", ""}},
         {{"pc", nullptr}, {"function", "<module>"}, {"file", "train.py"}, {"line", 7}}}}}};
  const std::string table = TopTable(doc, 0, &rates, 1.0);
  EXPECT_NE(table.find("  forward (model.py:42)\n"), std::string::npos) << table;
}

// Which process hit OOMs, and on which device: the collector's per-device count
// (DeviceSummary::oom_count, whose rule ModelOomTest.OomCountPerDeviceIsTheAnalyzersRule
// checks); "-" from a collector too old to send one, never a count made up here.
TEST(TopTable, OomsAreThePerDeviceCount) {
  TopRates rates;
  nlohmann::json doc = {{"streams", {Stream(41, 100)}}};
  nlohmann::json& r = doc["streams"][0]["report"];
  nlohmann::json device1 = r["devices"][0];
  device1["device"] = 1;
  device1["oom_count"] = 2;
  r["devices"][0]["oom_count"] = 1;
  r["devices"].push_back(device1);
  nlohmann::json older = r["devices"][0];
  older["device"] = 2;
  older.erase("oom_count");
  r["devices"].push_back(older);
  const std::string table = TopTable(doc, 0, &rates, 1.0);
  EXPECT_NE(table.find("41       python3              0 "), std::string::npos) << table;
  EXPECT_NE(table.find("25.0%    1         -"), std::string::npos) << table;  // device 0
  EXPECT_NE(table.find("25.0%    2         -"), std::string::npos) << table;  // device 1
  EXPECT_NE(table.find("25.0%    -         -"), std::string::npos) << table;  // device 2
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

// Processes that hold memory on one physical GPU at once (same host and UUID) are said to share
// it, once per GPU; a GPU each, an ended stream or a device without a UUID says nothing.
TEST(TopTable, ProcessesOnOneGpuAreSaidToShareIt) {
  TopRates rates;
  const std::string uuid = "0123456789abcdef0123456789abcdef";
  auto on = [&](uint64_t pid, const std::string& gpu, std::optional<int> rank) {
    nlohmann::json s = Stream(pid, 10);
    s["report"]["devices"][0]["uuid"] = gpu;
    s["report"]["process"] = {{"pid", pid}, {"host", "node1"}};
    if (rank) s["report"]["process"]["rank"] = *rank;
    return s;
  };
  nlohmann::json doc = {{"streams", {on(61, uuid, 0), on(62, uuid, 1)}}};
  std::string table = TopTable(doc, 0, &rates, 1.0);
  EXPECT_NE(table.find("shared GPU GPU-01234567-89ab-cdef-0123-456789abcdef on node1: rank 0 "
                       "(pid 61), rank 1 (pid 62) hold memory on it at once"),
            std::string::npos)
      << table;
  EXPECT_NE(TopTable(doc, 62, &rates, 2.0).find("shared GPU"), std::string::npos);
  doc["streams"].push_back(on(63, std::string(32, 'f'), std::nullopt));
  EXPECT_EQ(TopTable(doc, 63, &rates, 3.0).find("shared GPU"), std::string::npos)
      << "a view of pid 63 alone: it shares nothing";
  doc["streams"][1]["connected"] = false;  // rank 1 ended
  EXPECT_EQ(TopTable(doc, 0, &rates, 4.0).find("shared GPU"), std::string::npos);
  doc["streams"][1]["connected"] = true;
  doc["streams"][1]["report"]["devices"][0]["uuid"] = "";
  EXPECT_EQ(TopTable(doc, 0, &rates, 5.0).find("shared GPU"), std::string::npos);
}

// A collector writes nvidia-smi's form; one from before wrote bare hex. Either way one GPU.
TEST(TopTable, AGpuIsOneWhicheverFormItsUuidCameIn) {
  TopRates rates;
  nlohmann::json a = Stream(71, 10), b = Stream(72, 10);
  a["report"]["devices"][0]["uuid"] = "GPU-01234567-89ab-cdef-0123-456789abcdef";
  b["report"]["devices"][0]["uuid"] = "0123456789ABCDEF0123456789abcdef";
  const std::string table = TopTable({{"streams", {a, b}}}, 0, &rates, 1.0);
  EXPECT_NE(table.find("shared GPU GPU-01234567-89ab-cdef-0123-456789abcdef: pid 71, pid 72"),
            std::string::npos)
      << table;
  EXPECT_EQ(GpuUuidHex("GPU-01234567-89ab-cdef-0123-456789abcdef"),
            "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(GpuUuidHex("GPU-0123456789ab-cdef-0123-456789abcdef"), "");  // dashes misplaced
  EXPECT_EQ(GpuUuidHex("MIG-01234567-89ab-cdef-0123-456789abcdef"), "");
  EXPECT_EQ(GpuUuidHex(""), "");
}

TEST(TopTable, FitToWidthCutsLongLinesOnly) {
  EXPECT_EQ(FitToWidth("abcdef\nabc\n", 4), "abc\u2026\nabc\n");
  EXPECT_EQ(FitToWidth("abcd\n", 4), "abcd\n");
  // Display columns, not bytes: "é" is one column.
  EXPECT_EQ(FitToWidth("\u00e9t\u00e9s", 4), "\u00e9t\u00e9s");
  EXPECT_EQ(FitToWidth("\u00e9t\u00e9s!", 4), "\u00e9t\u00e9\u2026");
  EXPECT_EQ(FitToWidth("abcdef", 0), "abcdef");  // no terminal: whole lines
}

}  // namespace
}  // namespace fragscope::cli
