// PickleReader: every supported opcode family, refusal of code-running opcodes, limits, and
// survival of corrupted input. Expected values come from the Python source that wrote the
// pickle (tests/torch/data/make_protocol_pickles.py) or from the hand-assembled bytes.
#include "fragscope/torch/pickle_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>

namespace fragscope::torch {
namespace {

using Kind = PickleValue::Kind;

const std::string kData = FRAGSCOPE_TORCH_TEST_DATA;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Bytes from a list of values; opcodes are written as their ASCII characters where they have
// one, so the tests read like pickletools output.
std::string P(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

absl::StatusOr<PickleDocument> Parse(const std::string& bytes, PickleLimits limits = {}) {
  return PickleReader(limits).Parse(bytes, "test.pickle");
}

int64_t Int(const PickleValue* v) {
  EXPECT_EQ(v->kind(), Kind::kInt);
  return static_cast<int64_t>(v->int_value());
}

// --- Real pickles written by CPython ---------------------------------------------------------

class PythonProtocolTest : public testing::TestWithParam<int> {};

TEST_P(PythonProtocolTest, ReadsWhatCPythonWrote) {
  const int protocol = GetParam();
  const std::string path = kData + "/python-protocol" + std::to_string(protocol) + ".pickle";
  absl::StatusOr<PickleDocument> doc = PickleReader().ParseFile(path);
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->protocol(), protocol);
  const PickleValue& root = doc->root();
  ASSERT_EQ(root.kind(), Kind::kDict);

  const PickleValue* ints = root.Find("ints");
  ASSERT_NE(ints, nullptr);
  ASSERT_EQ(ints->kind(), Kind::kList);
  const absl::int128 expected[] = {0,
                                   1,
                                   -1,
                                   255,
                                   256,
                                   65535,
                                   65536,
                                   2147483647,
                                   -2147483648LL,
                                   absl::int128(1) << 40,
                                   -(absl::int128(1) << 63),
                                   (absl::int128(1) << 64) - 1,
                                   -(absl::int128(1) << 40)};
  ASSERT_EQ(ints->items().size(), std::size(expected));
  for (size_t i = 0; i < std::size(expected); ++i) {
    ASSERT_EQ(ints->items()[i]->kind(), Kind::kInt);
    EXPECT_EQ(ints->items()[i]->int_value(), expected[i]) << "ints[" << i << "]";
  }

  const PickleValue* misc = root.Find("misc");
  ASSERT_NE(misc, nullptr);
  ASSERT_EQ(misc->kind(), Kind::kTuple);
  ASSERT_EQ(misc->items().size(), 5u);
  EXPECT_TRUE(misc->items()[0]->is_none());
  EXPECT_TRUE(misc->items()[1]->bool_value());
  EXPECT_FALSE(misc->items()[2]->bool_value());
  EXPECT_EQ(misc->items()[3]->float_value(), 1.5);
  EXPECT_EQ(misc->items()[4]->float_value(), -2.25);

  ASSERT_NE(root.Find("s"), nullptr);
  EXPECT_EQ(root.Find("s")->string_value(), "h\xc3\xa9llo");
  EXPECT_EQ(root.Find("long")->string_value(), std::string(300, 'y'));
  for (int n = 1; n <= 4; ++n) {
    const PickleValue* t = root.Find("t" + std::to_string(n));
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->kind(), Kind::kTuple);
    ASSERT_EQ(t->items().size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) EXPECT_EQ(Int(t->items()[i]), i + 1);
  }
  const PickleValue* empty = root.Find("empty");
  ASSERT_EQ(empty->items().size(), 3u);
  EXPECT_EQ(empty->items()[0]->kind(), Kind::kTuple);
  EXPECT_TRUE(empty->items()[0]->items().empty());
  EXPECT_EQ(empty->items()[1]->kind(), Kind::kList);
  EXPECT_EQ(empty->items()[2]->kind(), Kind::kDict);
  EXPECT_TRUE(empty->items()[2]->dict_items().empty());

  // [shared, shared]: the memo makes both entries the same object, as in Python.
  const PickleValue* shared = root.Find("shared");
  ASSERT_EQ(shared->items().size(), 2u);
  EXPECT_EQ(shared->items()[0], shared->items()[1]);
  ASSERT_EQ(shared->items()[0]->items().size(), 1u);
  EXPECT_EQ(Int(shared->items()[0]->items()[0]), 7);

  if (protocol >= 3) {
    const PickleValue* b = root.Find("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->kind(), Kind::kBytes);
    EXPECT_EQ(b->string_value(), std::string("\x00\x01\xff", 3));
  }
  if (protocol >= 5) {
    const PickleValue* ba = root.Find("ba");
    ASSERT_NE(ba, nullptr);
    EXPECT_EQ(ba->kind(), Kind::kBytes);
    EXPECT_EQ(ba->string_value(), "ab");
  }
}

INSTANTIATE_TEST_SUITE_P(Protocols, PythonProtocolTest, testing::Values(2, 3, 4, 5));

TEST(PickleReaderRefusal, RefusesCPythonPicklesThatImportCode) {
  absl::StatusOr<PickleDocument> doc =
      PickleReader().ParseFile(kData + "/python-protocol2-bytes.pickle");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument);
  // pickletools puts GLOBAL at offset 13 in this file.
  EXPECT_NE(doc.status().message().find("opcode GLOBAL (0x63) at offset 13"), std::string::npos)
      << doc.status();
  EXPECT_NE(doc.status().message().find("python-protocol2-bytes.pickle"), std::string::npos);

  doc = PickleReader().ParseFile(kData + "/python-protocol4-ordereddict.pickle");
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("opcode STACK_GLOBAL (0x93) at offset 39"),
            std::string::npos)
      << doc.status();
}

TEST(PickleReaderRefusal, RefusesEveryOpcodeThatRunsCode) {
  const std::pair<int, const char*> refused[] = {
      {'c', "GLOBAL"}, {0x93, "STACK_GLOBAL"}, {'R', "REDUCE"},  {'b', "BUILD"},
      {'i', "INST"},   {'o', "OBJ"},           {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"},
      {'P', "PERSID"}, {'Q', "BINPERSID"},     {0x82, "EXT1"},   {0x83, "EXT2"},
      {0x84, "EXT4"}};
  for (const auto& [op, name] : refused) {
    // A plausible prefix, so the refusal is about the opcode and not an empty stack.
    absl::StatusOr<PickleDocument> doc = Parse(P({0x80, 4, 'N', 'N', op, '.'}));
    ASSERT_FALSE(doc.ok()) << name;
    EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(doc.status().message().find(std::string("opcode ") + name + " ("), std::string::npos)
        << doc.status();
    EXPECT_NE(doc.status().message().find("at offset 4"), std::string::npos) << doc.status();
    EXPECT_NE(doc.status().message().find("refused"), std::string::npos) << doc.status();
  }
}

TEST(PickleReaderRefusal, RefusesTextSetAndBufferOpcodes) {
  for (int op : std::initializer_list<int>{'I', 'L', 'F', 'S', 'T', 'U', 'V', 'p', 'g', 0x8f, 0x90,
                                           0x91, 0x97, 0xff}) {
    absl::StatusOr<PickleDocument> doc = Parse(P({0x80, 2, op, '.'}));
    ASSERT_FALSE(doc.ok()) << op;
    EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(doc.status().message().find("at offset 2"), std::string::npos) << doc.status();
  }
  absl::StatusOr<PickleDocument> doc = Parse(P({0x80, 6, 'N', '.'}));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("protocol 6"), std::string::npos) << doc.status();
}

// --- Scalars ---------------------------------------------------------------------------------

TEST(PickleReaderScalars, Integers) {
  // BININT is signed 32-bit; BININT1 and BININT2 are unsigned.
  EXPECT_EQ(Int(&Parse(P({'J', 0xfe, 0xff, 0xff, 0xff, '.'}))->root()), -2);
  EXPECT_EQ(Int(&Parse(P({'K', 0xff, '.'}))->root()), 255);
  EXPECT_EQ(Int(&Parse(P({'M', 0x34, 0x12, '.'}))->root()), 0x1234);
  // LONG1: little-endian two's complement; zero bytes is 0.
  EXPECT_EQ(Int(&Parse(P({0x8a, 0, '.'}))->root()), 0);
  EXPECT_EQ(Int(&Parse(P({0x8a, 1, 0xff, '.'}))->root()), -1);
  EXPECT_EQ(Parse(P({0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, '.'}))
                ->root()
                .int_value(),
            (absl::int128(1) << 64) - 1);
  EXPECT_EQ(Parse(P({0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x80, '.'}))->root().int_value(),
            -(absl::int128(1) << 63));
  // LONG4 with sign-extension bytes beyond 16: still -5.
  std::string long4 = P({0x8b, 20, 0, 0, 0, 0xfb});
  long4 += std::string(19, '\xff');
  long4 += ".";
  EXPECT_EQ(Int(&Parse(long4)->root()), -5);
}

TEST(PickleReaderScalars, IntegersWiderThan64BitsAreRefused) {
  // 2^64: 9 bytes 00..00 01.
  absl::StatusOr<PickleDocument> doc = Parse(P({0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, '.'}));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("LONG1"), std::string::npos) << doc.status();
  // -2^63 - 1.
  doc = Parse(P({0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, '.'}));
  EXPECT_FALSE(doc.ok());
  // 2^200 in LONG4: a non-sign byte past the 16th.
  std::string wide = P({0x8b, 26, 0, 0, 0});
  wide += std::string(25, '\0');
  wide += "\x01.";
  doc = Parse(wide);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("wider than 64 bits"), std::string::npos);
  // Negative LONG4 byte count.
  doc = Parse(P({0x8b, 0xff, 0xff, 0xff, 0xff, '.'}));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("negative"), std::string::npos) << doc.status();
}

TEST(PickleReaderScalars, NoneBoolFloat) {
  EXPECT_TRUE(Parse(P({'N', '.'}))->root().is_none());
  EXPECT_TRUE(Parse(P({0x88, '.'}))->root().bool_value());
  EXPECT_FALSE(Parse(P({0x89, '.'}))->root().bool_value());
  // BINFLOAT is big-endian: 0x400921FB54442D18 is pi.
  EXPECT_DOUBLE_EQ(
      Parse(P({'G', 0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18, '.'}))->root().float_value(),
      3.141592653589793);
}

TEST(PickleReaderScalars, StringsAndBytesOfEveryWidth) {
  struct Case {
    std::string bytes;
    Kind kind;
  };
  const Case cases[] = {
      {P({0x8c, 2, 'h', 'i', '.'}), Kind::kString},                            // SHORT_BINUNICODE
      {P({'X', 2, 0, 0, 0, 'h', 'i', '.'}), Kind::kString},                    // BINUNICODE
      {P({0x8d, 2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i', '.'}), Kind::kString},       // BINUNICODE8
      {P({'C', 2, 'h', 'i', '.'}), Kind::kBytes},                              // SHORT_BINBYTES
      {P({'B', 2, 0, 0, 0, 'h', 'i', '.'}), Kind::kBytes},                     // BINBYTES
      {P({0x8e, 2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i', '.'}), Kind::kBytes},        // BINBYTES8
      {P({0x96, 2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i', 0x98, '.'}), Kind::kBytes},  // BYTEARRAY8
  };
  for (const Case& c : cases) {
    absl::StatusOr<PickleDocument> doc = Parse(c.bytes);
    ASSERT_TRUE(doc.ok()) << doc.status();
    EXPECT_EQ(doc->root().kind(), c.kind);
    EXPECT_EQ(doc->root().string_value(), "hi");
  }
}

TEST(PickleReaderScalars, HugeLengthFieldIsAnErrorNotAnAllocation) {
  // BINUNICODE8 claiming 2^62 bytes: refused by the string limit, or (limit lifted) because the
  // input is shorter, never by trying to allocate.
  const std::string bytes = P({0x8d, 0, 0, 0, 0, 0, 0, 0, 0x40, 'h', 'i', '.'});
  absl::StatusOr<PickleDocument> doc = Parse(bytes);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(doc.status().message().find("max_string_bytes"), std::string::npos);
  PickleLimits lifted;
  lifted.max_string_bytes = ~uint64_t{0};
  doc = Parse(bytes, lifted);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(doc.status().message().find("truncated"), std::string::npos) << doc.status();
}

// --- Containers, stack and memo --------------------------------------------------------------

TEST(PickleReaderContainers, MarkBasedAndDirectForms) {
  // (K1 K2 t  -> (1, 2);  (K1 l -> [1];  (K1 K2 d -> {1: 2}
  absl::StatusOr<PickleDocument> doc = Parse(P({'(', 'K', 1, 'K', 2, 't', '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->root().kind(), Kind::kTuple);
  EXPECT_EQ(doc->root().items().size(), 2u);
  doc = Parse(P({'(', 'K', 1, 'l', '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->root().kind(), Kind::kList);
  EXPECT_EQ(Int(doc->root().items()[0]), 1);
  doc = Parse(P({'(', 'K', 1, 'K', 2, 'd', '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_EQ(doc->root().dict_items().size(), 1u);
  EXPECT_EQ(Int(doc->root().dict_items()[0].second), 2);
  // ] ( K1 K2 K3 e -> [1, 2, 3]; then K4 a -> [1, 2, 3, 4]
  doc = Parse(P({']', '(', 'K', 1, 'K', 2, 'K', 3, 'e', 'K', 4, 'a', '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_EQ(doc->root().items().size(), 4u);
  EXPECT_EQ(Int(doc->root().items()[3]), 4);
  // POP, POP_MARK and DUP: K9 ( K1 K2 1 2 t3? -> build (9, 9) from K9 DUP TUPLE2
  doc = Parse(P({'K', 9, '(', 'K', 1, 'K', 2, '1', '2', 0x86, 'K', 5, '0', '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_EQ(doc->root().kind(), Kind::kTuple);
  ASSERT_EQ(doc->root().items().size(), 2u);
  EXPECT_EQ(doc->root().items()[0], doc->root().items()[1]);
  EXPECT_EQ(Int(doc->root().items()[0]), 9);
}

TEST(PickleReaderContainers, DictKeepsLastValueForRepeatedKey) {
  // } ( 'a' K1 'a' K2 u s? -> {'a': 1, 'a': 2} => Find("a") == 2
  absl::StatusOr<PickleDocument> doc = Parse(P(
      {'}', '(', 0x8c, 1, 'a', 'K', 1, 0x8c, 1, 'a', 'K', 2, 'u', 0x8c, 1, 'b', 'K', 3, 's', '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_NE(doc->root().Find("a"), nullptr);
  EXPECT_EQ(Int(doc->root().Find("a")), 2);
  EXPECT_EQ(Int(doc->root().Find("b")), 3);
  EXPECT_EQ(doc->root().Find("c"), nullptr);
  EXPECT_EQ(doc->root().Find("a")->Find("x"), nullptr);  // not a dict: no crash, no value
}

TEST(PickleReaderContainers, StackMisuseIsAnError) {
  const std::string bad[] = {
      P({'a', '.'}),                             // APPEND on an empty stack
      P({']', 'K', 1, 'e', '.'}),                // APPENDS without MARK
      P({'}', '(', 'K', 1, 'u', '.'}),           // SETITEMS with an odd count
      P({'.'}),                                  // STOP on an empty stack
      P({'}', 'K', 1, 'a', '.'}),                // APPEND to a dict
      P({']', '(', 'K', 1, 'a', '.'}),           // APPEND reaching below a MARK
      P({0x85, '.'}),                            // TUPLE1 with nothing
      P({'}', ']', 'K', 1, 's', '.'}),           // unhashable (list) key
      P({']', '(', 'K', 1, 'K', 2, 0x87, '.'}),  // TUPLE3 reaching below a MARK
      P({'1', '.'}),                             // POP_MARK with no MARK
      P({')', 'K', 1, 'a', '.'}),                // APPEND to a tuple
  };
  for (const std::string& bytes : bad) {
    absl::StatusOr<PickleDocument> doc = Parse(bytes);
    ASSERT_FALSE(doc.ok()) << testing::PrintToString(bytes);
    EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(doc.status().message().find("test.pickle: opcode "), std::string::npos)
        << doc.status();
  }
}

TEST(PickleReaderMemo, AllPutAndGetFormsShareTheObject) {
  // ] BINPUT 3; POP; BINGET 3; K5 APPEND -> the memoized list itself is mutated: [5]
  absl::StatusOr<PickleDocument> doc = Parse(P({']', 'q', 3, '0', 'h', 3, 'K', 5, 'a', '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_EQ(doc->root().items().size(), 1u);
  EXPECT_EQ(Int(doc->root().items()[0]), 5);
  // LONG_BINPUT / LONG_BINGET with the largest index: a sparse memo, not a 4-billion array.
  doc = Parse(P({'K', 7, 'r', 0xff, 0xff, 0xff, 0xff, '0', 'j', 0xff, 0xff, 0xff, 0xff, '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(Int(&doc->root()), 7);
  // MEMOIZE numbers entries 0, 1, ...; PUT over an index replaces it.
  doc = Parse(
      P({'K', 1, 0x94, 'K', 2, 0x94, 'K', 3, 'q', 0, '0', '0', '0', 'h', 1, 'h', 0, 0x86, '.'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(Int(doc->root().items()[0]), 2);
  EXPECT_EQ(Int(doc->root().items()[1]), 3);
  // GET of an index never stored.
  doc = Parse(P({'h', 4, '.'}));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("memo key 4 was never stored"), std::string::npos)
      << doc.status();
}

TEST(PickleReaderShape, CycleThroughMemoIsRefused) {
  // ] MEMOIZE BINGET 0 APPEND: a list containing itself.
  absl::StatusOr<PickleDocument> doc = Parse(P({']', 0x94, 'h', 0, 'a', '.'}));
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(doc.status().message().find("contains itself"), std::string::npos) << doc.status();
}

std::string NestedLists(int depth) {
  std::string s(depth, ']');
  s += std::string(depth - 1, 'a');
  s += '.';
  return s;
}

TEST(PickleReaderShape, NestingDepthIsBounded) {
  PickleLimits limits;
  limits.max_depth = 300;
  EXPECT_TRUE(Parse(NestedLists(300), limits).ok());
  absl::StatusOr<PickleDocument> doc = Parse(NestedLists(301), limits);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(doc.status().message().find("max_depth"), std::string::npos) << doc.status();
  // Default: 256.
  EXPECT_TRUE(Parse(NestedLists(256)).ok());
  EXPECT_FALSE(Parse(NestedLists(257)).ok());
  // Far deeper than any C++ stack would survive if the reader recursed.
  EXPECT_FALSE(Parse(NestedLists(200000)).ok());
}

TEST(PickleReaderShape, SharedValuesAreNotExpanded) {
  // level0 = []; level(i+1) = [level(i), level(i)] for 100 levels: 2^100 paths, 101 values.
  std::string s = P({']', 0x94});
  for (int i = 0; i < 100; ++i) {
    s += P({']', '(', 'h', i, 'h', i, 'e', 0x94});  // memo index i holds level i
  }
  s += '.';
  PickleLimits limits;
  limits.max_depth = 128;
  absl::StatusOr<PickleDocument> doc = Parse(s, limits);
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->value_count(), 101u);
  const PickleValue* v = &doc->root();
  int depth = 0;
  while (!v->items().empty()) {
    EXPECT_EQ(v->items()[0], v->items()[1]);
    v = v->items()[0];
    ++depth;
  }
  EXPECT_EQ(depth, 100);
}

// --- Limits and truncation -------------------------------------------------------------------

TEST(PickleReaderLimits, EachLimitIsEnforced) {
  PickleLimits limits;
  limits.max_container_elements = 3;
  EXPECT_TRUE(Parse(P({']', '(', 'K', 1, 'K', 2, 'K', 3, 'e', '.'}), limits).ok());
  absl::StatusOr<PickleDocument> doc =
      Parse(P({']', '(', 'K', 1, 'K', 2, 'K', 3, 'e', 'K', 4, 'a', '.'}), limits);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("max_container_elements"), std::string::npos);

  limits = {};
  limits.max_string_bytes = 2;
  EXPECT_TRUE(Parse(P({0x8c, 2, 'h', 'i', '.'}), limits).ok());
  doc = Parse(P({0x8c, 3, 'h', 'i', 'j', '.'}), limits);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("max_string_bytes"), std::string::npos);

  limits = {};
  limits.max_values = 2;
  EXPECT_FALSE(Parse(P({'K', 1, 'K', 2, 0x86, '.'}), limits).ok());
  EXPECT_TRUE(Parse(P({'K', 1, 'K', 2, '0', '.'}), limits).ok());

  limits = {};
  limits.max_memo_entries = 1;
  EXPECT_TRUE(Parse(P({'N', 'q', 1, 'q', 1, '.'}), limits).ok());  // overwrite: still one
  doc = Parse(P({'N', 'q', 1, 'q', 2, '.'}), limits);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("max_memo_entries"), std::string::npos);

  limits = {};
  limits.max_input_bytes = 3;
  EXPECT_TRUE(Parse(P({'K', 1, '.'}), limits).ok());
  doc = Parse(P({'N', 'N', '0', '.'}), limits);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PickleReaderLimits, FileLimitIsCheckedBeforeReading) {
  PickleLimits limits;
  limits.max_input_bytes = 1000;
  absl::StatusOr<PickleDocument> doc =
      PickleReader(limits).ParseFile(kData + "/current-format.pickle");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(doc.status().message().find("114672 bytes"), std::string::npos) << doc.status();

  doc = PickleReader().ParseFile(kData + "/no-such-file.pickle");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(doc.status().message().find("no-such-file.pickle"), std::string::npos);

  doc = PickleReader().ParseFile(kData);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("not a regular file"), std::string::npos);
}

TEST(PickleReaderTruncation, EveryPrefixIsACleanError) {
  const std::string full = ReadFile(kData + "/python-protocol5.pickle");
  ASSERT_TRUE(Parse(full).ok());
  for (size_t n = 0; n < full.size(); ++n) {
    absl::StatusOr<PickleDocument> doc = Parse(full.substr(0, n));
    ASSERT_FALSE(doc.ok()) << "prefix of " << n << " bytes";
    EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument) << doc.status();
  }
  // A FRAME claiming more than is left.
  absl::StatusOr<PickleDocument> doc =
      Parse(P({0x80, 4, 0x95, 100, 0, 0, 0, 0, 0, 0, 0, 'N', '.'}));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("FRAME"), std::string::npos) << doc.status();
}

TEST(PickleReaderTruncation, BytesAfterStopAreIgnored) {
  // As CPython does: a file may hold several pickles; only the first is read.
  absl::StatusOr<PickleDocument> doc = Parse(P({'K', 1, '.', 'c', 'x'}));
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(Int(&doc->root()), 1);
}

// --- Corrupted real files --------------------------------------------------------------------

TEST(PickleReaderFuzz, BitFlipsInRealSnapshotsNeverCrash) {
  for (const char* name : {"/current-format.pickle", "/legacy-history-oom.pickle"}) {
    const std::string original = ReadFile(kData + name);
    ASSERT_FALSE(original.empty());
    std::mt19937_64 rng(12345);
    int ok = 0, failed = 0;
    for (int iteration = 0; iteration < 600; ++iteration) {
      std::string bytes = original;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
      }
      if (iteration % 10 == 0) bytes.resize(rng() % bytes.size());
      absl::StatusOr<PickleDocument> doc = Parse(bytes);
      (doc.ok() ? ok : failed)++;
      if (!doc.ok()) {
        EXPECT_FALSE(doc.status().message().empty());
      }
    }
    // Both outcomes occur: flips in string payloads stay valid, flips in opcodes do not.
    EXPECT_GT(failed, 0) << name;
    EXPECT_GT(ok, 0) << name;
  }
}

}  // namespace
}  // namespace fragscope::torch
