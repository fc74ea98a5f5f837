// PickleWriter output read back by fragscope's restricted reader and by Python's own pickle
// (with every global refused), including the integer encodings at their boundaries.
#include "fragscope/export/pickle_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "fragscope/torch/pickle_reader.h"
#include "python_check.h"

namespace fragscope::exporter {
namespace {

using torch::PickleReader;
using torch::PickleValue;
using Kind = PickleValue::Kind;

const uint64_t kUnsigned[] = {0,
                              1,
                              255,
                              256,
                              65535,
                              65536,
                              uint64_t{INT32_MAX},
                              uint64_t{INT32_MAX} + 1,
                              uint64_t{1} << 40,
                              uint64_t{INT64_MAX},
                              uint64_t{INT64_MAX} + 1,
                              std::numeric_limits<uint64_t>::max()};
const int64_t kSigned[] = {-1, -256, INT32_MIN, int64_t{INT32_MIN} - 1, INT64_MIN};

std::string Sample() {
  PickleWriter w;
  w.BeginDict();
  w.String("unsigned");
  w.BeginList();
  for (uint64_t v : kUnsigned) w.Uint(v);
  w.EndList();
  w.String("signed");
  w.BeginList();
  for (int64_t v : kSigned) w.Int(v);
  w.EndList();
  w.String("text");
  w.String(
      "gr\xc3\xb6\xc3\x9f"
      "e \xe2\x86\x92 \"quoted\"");
  w.String("flags");
  w.BeginList();
  w.Bool(true);
  w.Bool(false);
  w.None();
  w.EndList();
  w.String("pair");
  w.BeginPair();
  w.Uint(0);
  w.Uint(3);
  w.EndPair();
  w.String("ratio");
  w.Float(0.375);
  w.String("empty");
  w.BeginDict();
  w.EndDict();
  w.EndDict();
  return w.Finish();
}

TEST(PickleWriterTest, StartsWithProtocolTwo) {
  const std::string bytes = Sample();
  ASSERT_GE(bytes.size(), 3u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x80);
  EXPECT_EQ(bytes[1], 2);
  EXPECT_EQ(bytes.back(), '.');
}

TEST(PickleWriterTest, FragscopeReaderReadsEveryValue) {
  auto doc = PickleReader().Parse(Sample(), "sample");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->protocol(), 2);
  const PickleValue& root = doc->root();
  ASSERT_EQ(root.kind(), Kind::kDict);

  const PickleValue* u = root.Find("unsigned");
  ASSERT_NE(u, nullptr);
  ASSERT_EQ(u->items().size(), std::size(kUnsigned));
  for (std::size_t i = 0; i < std::size(kUnsigned); ++i) {
    ASSERT_EQ(u->items()[i]->kind(), Kind::kInt);
    EXPECT_EQ(u->items()[i]->int_value(), absl::int128(kUnsigned[i])) << i;
  }
  const PickleValue* s = root.Find("signed");
  ASSERT_EQ(s->items().size(), std::size(kSigned));
  for (std::size_t i = 0; i < std::size(kSigned); ++i) {
    EXPECT_EQ(s->items()[i]->int_value(), absl::int128(kSigned[i])) << i;
  }
  EXPECT_EQ(root.Find("text")->string_value(),
            "gr\xc3\xb6\xc3\x9f"
            "e \xe2\x86\x92 \"quoted\"");
  const PickleValue* flags = root.Find("flags");
  ASSERT_EQ(flags->items().size(), 3u);
  EXPECT_TRUE(flags->items()[0]->bool_value());
  EXPECT_FALSE(flags->items()[1]->bool_value());
  EXPECT_TRUE(flags->items()[2]->is_none());
  const PickleValue* pair = root.Find("pair");
  ASSERT_EQ(pair->kind(), Kind::kTuple);
  ASSERT_EQ(pair->items().size(), 2u);
  EXPECT_EQ(pair->items()[1]->int_value(), 3);
  EXPECT_EQ(root.Find("ratio")->float_value(), 0.375);
  EXPECT_TRUE(root.Find("empty")->dict_items().empty());
}

TEST(PickleWriterTest, PythonReadsItWithGlobalsRefused) {
  if (!PythonAvailable()) GTEST_SKIP() << "python3 not found on PATH: cannot cross-check";
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) /
      ("pickle_writer_sample." + std::to_string(getpid()) + ".pickle");
  std::ofstream(path, std::ios::binary) << Sample();
  // repr() of what Python reads; a refused global would raise and exit non-zero.
  PythonResult r = RunRestrictedPython(path.string(),
                                       "v = load()\n"
                                       "print(v['unsigned'])\n"
                                       "print(v['signed'])\n"
                                       "print(ascii(v['text']), v['flags'], v['pair'], "
                                       "v['ratio'], v['empty'])\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "[0, 1, 255, 256, 65535, 65536, 2147483647, 2147483648, 1099511627776, "
            "9223372036854775807, 9223372036854775808, 18446744073709551615]\n"
            "[-1, -256, -2147483648, -2147483649, -9223372036854775808]\n"
            "'gr\\xf6\\xdfe \\u2192 \"quoted\"' [True, False, None] (0, 3) 0.375 {}\n");
}

TEST(PickleWriterDeathTest, RefusesADictKeyWithoutValue) {
  EXPECT_DEATH(
      {
        PickleWriter w;
        w.BeginDict();
        w.String("key");
        w.EndDict();
      },
      "dict key without a value");
}

}  // namespace
}  // namespace fragscope::exporter
