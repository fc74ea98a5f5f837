// The JSON report: parsed back with a strict recursive-descent parser (RFC 8259 grammar, valid
// UTF-8, no duplicate keys) and checked field by field against the hand-computed scenario.
#include "fragscope/report/report_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fragscope/report/json_writer.h"
#include "report_test_scenario.h"

namespace fragscope {
namespace {

using testing::kGiB;
using testing::kMiB;

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // number as written, or the decoded string
  std::vector<JsonValue> items;
  // Object members as two parallel vectors: a std::pair holding JsonValue would need the type
  // complete here (clang's libstdc++ check rejects it); a vector of it need not.
  std::vector<std::string> keys;
  std::vector<JsonValue> values;

  bool is_null() const { return type == Type::kNull; }
  const JsonValue& operator[](std::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return values[i];
    }
    ADD_FAILURE() << "missing key " << key;
    static const JsonValue kMissing;
    return kMissing;
  }
  const JsonValue& operator[](std::size_t i) const { return items.at(i); }
  bool has(std::string_view key) const {
    for (const std::string& k : keys) {
      if (k == key) return true;
    }
    return false;
  }
  double number() const { return std::stod(text); }
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view in) : in_(in) {}

  // True if `in` is exactly one JSON value (surrounded by whitespace).
  bool Parse(JsonValue* out) {
    SkipSpace();
    if (!Value(out, 0)) return false;
    SkipSpace();
    if (pos_ != in_.size()) return Fail("trailing characters");
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  bool Fail(std::string what) {
    if (error_.empty()) error_ = what + " at offset " + std::to_string(pos_);
    return false;
  }
  void SkipSpace() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\n' || in_[pos_] == '\r' || in_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Literal(std::string_view word) {
    if (in_.substr(pos_, word.size()) != word) return Fail("bad literal");
    pos_ += word.size();
    return true;
  }
  bool Value(JsonValue* v, int depth) {
    if (depth > 64) return Fail("too deep");
    if (pos_ >= in_.size()) return Fail("unexpected end");
    switch (in_[pos_]) {
      case '{':
        return Object(v, depth);
      case '[':
        return Array(v, depth);
      case '"':
        v->type = JsonValue::Type::kString;
        return String(&v->text);
      case 't':
        v->type = JsonValue::Type::kBool;
        v->boolean = true;
        return Literal("true");
      case 'f':
        v->type = JsonValue::Type::kBool;
        return Literal("false");
      case 'n':
        v->type = JsonValue::Type::kNull;
        return Literal("null");
      default:
        v->type = JsonValue::Type::kNumber;
        return Number(&v->text);
    }
  }
  bool Digits() {
    const std::size_t start = pos_;
    while (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }
  bool Number(std::string* out) {
    const std::size_t start = pos_;
    if (pos_ < in_.size() && in_[pos_] == '-') ++pos_;
    if (pos_ < in_.size() && in_[pos_] == '0') {
      ++pos_;  // no leading zeros
    } else if (!Digits()) {
      return Fail("bad number");
    }
    if (pos_ < in_.size() && in_[pos_] == '.') {
      ++pos_;
      if (!Digits()) return Fail("bad fraction");
    }
    if (pos_ < in_.size() && (in_[pos_] == 'e' || in_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < in_.size() && (in_[pos_] == '+' || in_[pos_] == '-')) ++pos_;
      if (!Digits()) return Fail("bad exponent");
    }
    *out = std::string(in_.substr(start, pos_ - start));
    return true;
  }
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  bool Hex4(uint32_t* cp) {
    if (pos_ + 4 > in_.size()) return Fail("short \\u escape");
    *cp = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = in_[pos_++];
      *cp <<= 4;
      if (c >= '0' && c <= '9') {
        *cp |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        *cp |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        *cp |= c - 'A' + 10;
      } else {
        return Fail("bad hex digit");
      }
    }
    return true;
  }
  bool String(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    while (true) {
      if (pos_ >= in_.size()) return Fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(in_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail("raw control character in string");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= in_.size()) return Fail("bad escape");
        const char e = in_[pos_++];
        switch (e) {
          case '"':
          case '\\':
          case '/':
            out->push_back(e);
            break;
          case 'b':
            out->push_back('\b');
            break;
          case 'f':
            out->push_back('\f');
            break;
          case 'n':
            out->push_back('\n');
            break;
          case 'r':
            out->push_back('\r');
            break;
          case 't':
            out->push_back('\t');
            break;
          case 'u': {
            uint32_t cp;
            if (!Hex4(&cp)) return false;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              uint32_t low;
              if (in_.substr(pos_, 2) != "\\u") return Fail("lone high surrogate");
              pos_ += 2;
              if (!Hex4(&low) || low < 0xDC00 || low > 0xDFFF) return Fail("bad low surrogate");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              return Fail("lone low surrogate");
            }
            AppendUtf8(cp, out);
            break;
          }
          default:
            return Fail("bad escape");
        }
        continue;
      }
      // Raw UTF-8: check the sequence.
      std::size_t n = c < 0x80             ? 1
                      : (c & 0xE0) == 0xC0 ? 2
                      : (c & 0xF0) == 0xE0 ? 3
                      : (c & 0xF8) == 0xF0 ? 4
                                           : 0;
      if (n == 0 || pos_ + n > in_.size()) return Fail("invalid UTF-8");
      for (std::size_t k = 1; k < n; ++k) {
        if ((static_cast<unsigned char>(in_[pos_ + k]) & 0xC0) != 0x80) {
          return Fail("invalid UTF-8 continuation");
        }
      }
      if (n == 2 && c < 0xC2) return Fail("overlong UTF-8");
      out->append(in_.substr(pos_, n));
      pos_ += n;
    }
  }
  bool Array(JsonValue* v, int depth) {
    v->type = JsonValue::Type::kArray;
    ++pos_;
    SkipSpace();
    if (pos_ < in_.size() && in_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      v->items.emplace_back();
      if (!Value(&v->items.back(), depth + 1)) return false;
      SkipSpace();
      if (pos_ >= in_.size()) return Fail("unterminated array");
      if (in_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (in_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return Fail("expected , or ]");
    }
  }
  bool Object(JsonValue* v, int depth) {
    v->type = JsonValue::Type::kObject;
    ++pos_;
    SkipSpace();
    if (pos_ < in_.size() && in_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (pos_ >= in_.size() || in_[pos_] != '"') return Fail("expected key");
      std::string key;
      if (!String(&key)) return false;
      if (v->has(key)) return Fail("duplicate key " + key);
      SkipSpace();
      if (pos_ >= in_.size() || in_[pos_] != ':') return Fail("expected :");
      ++pos_;
      SkipSpace();
      JsonValue value;
      if (!Value(&value, depth + 1)) return false;
      v->keys.push_back(std::move(key));
      v->values.push_back(std::move(value));
      SkipSpace();
      if (pos_ >= in_.size()) return Fail("unterminated object");
      if (in_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (in_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return Fail("expected , or }");
    }
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  std::string error_;
};

JsonValue ParseOrFail(const std::string& text) {
  JsonValue v;
  JsonParser parser(text);
  EXPECT_TRUE(parser.Parse(&v)) << parser.error() << "\n" << text.substr(0, 2000);
  return v;
}

// The parser itself must reject what is not JSON, or the tests below prove nothing.
TEST(JsonTestParserTest, RejectsInvalidJson) {
  for (const char* bad : {"{", "{\"a\":1,}", "[1 2]", "\"\x01\"", "01", "{\"a\":1,\"a\":2}",
                          "\"\xff\"", "nul", "1.", "[1]x"}) {
    JsonValue v;
    JsonParser p(bad);
    EXPECT_FALSE(p.Parse(&v)) << bad;
  }
  JsonValue v;
  JsonParser good(R"({"a": [1, -2.5e3, true, null, "\u00e9\ud83d\ude00"]})");
  ASSERT_TRUE(good.Parse(&v)) << good.error();
  EXPECT_EQ(v["a"][4].text, "\xC3\xA9\xF0\x9F\x98\x80");
}

TEST(JsonWriterTest, QuotesAndEscapes) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  // Valid multi-byte UTF-8 passes through; invalid bytes become U+FFFD.
  EXPECT_EQ(JsonQuote("caf\xC3\xA9"), "\"caf\xC3\xA9\"");
  EXPECT_EQ(JsonQuote("a\xFF"
                      "b"),
            "\"a\xEF\xBF\xBD"
            "b\"");
  EXPECT_EQ(JsonQuote("\xC0\xAF"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");                  // overlong '/'
  EXPECT_EQ(JsonQuote("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");  // surrogate
}

TEST(JsonWriterTest, PrettyAndCompactParseTheSame) {
  for (bool pretty : {false, true}) {
    std::ostringstream out;
    JsonWriter w(out, pretty);
    w.BeginObject();
    w.Field("n", uint64_t{18446744073709551615u});
    w.Field("neg", -3);
    w.FieldDouble("ratio", 0.25);
    w.FieldDouble("inf", INFINITY);
    // Microseconds with their nanoseconds: %.6g would give 1.23457e+09.
    w.FieldDoubleExact("ts", 1234567890123.0 / 1000.0);
    w.FieldDoubleExact("nan", NAN);
    w.Key("empty_array");
    w.BeginArray();
    w.EndArray();
    w.Key("empty_object");
    w.BeginObject();
    w.EndObject();
    w.Key("list");
    w.BeginArray();
    w.String("x");
    w.Null();
    w.Bool(false);
    w.EndArray();
    w.EndObject();
    const JsonValue v = ParseOrFail(out.str());
    EXPECT_EQ(v["n"].text, "18446744073709551615");  // integers stay exact
    EXPECT_EQ(v["neg"].text, "-3");
    EXPECT_DOUBLE_EQ(v["ratio"].number(), 0.25);
    EXPECT_TRUE(v["inf"].is_null());
    EXPECT_EQ(v["ts"].number(), 1234567890123.0 / 1000.0);  // reads back as the same double
    EXPECT_EQ(v["ts"].text, "1234567890.123");
    EXPECT_TRUE(v["nan"].is_null());
    EXPECT_TRUE(v["empty_array"].items.empty());
    EXPECT_TRUE(v["empty_object"].keys.empty());
    EXPECT_EQ(v["list"].items.size(), 3u);
  }
}

TEST(ReportJsonTest, FragmentationOomScenario) {
  const ModelSummary summary = testing::FragmentationOomSummary();
  std::ostringstream out;
  RenderJson(summary, out);
  const JsonValue v = ParseOrFail(out.str());
  EXPECT_EQ(v["schema_version"].text, "1");
  EXPECT_EQ(v["process"]["pid"].text, "4242");
  EXPECT_EQ(v["drops"].text, "0");
  ASSERT_EQ(v["devices"].items.size(), 1u);
  const JsonValue& d = v["devices"][0];
  EXPECT_EQ(d["device"].text, "0");
  EXPECT_EQ(d["uuid"].text, "GPU-01010101-0101-0101-0101-010101010101");  // nvidia-smi's form
  EXPECT_EQ(d["reserved_bytes"].text, std::to_string(2 * kGiB));
  EXPECT_EQ(d["allocated_bytes"].text, std::to_string(kGiB));
  EXPECT_EQ(d["opaque_bytes"].text, "0");
  EXPECT_EQ(d["cached_bytes"].text, std::to_string(kGiB));
  EXPECT_EQ(d["largest_free_range_bytes"].text, std::to_string(512 * kMiB));
  EXPECT_DOUBLE_EQ(d["fragmentation"].number(), 0.5);
  EXPECT_TRUE(d["fragmentation_null_reason"].is_null());
  EXPECT_EQ(d["stranded_bytes"].text, std::to_string(512 * kMiB));
  EXPECT_EQ(d["untracked_bytes"].text, std::to_string(16 * kGiB - 256 * kMiB - 2 * kGiB));
  EXPECT_EQ(d["peak_reserved_bytes"].text, std::to_string(2 * kGiB));
  EXPECT_EQ(d["peak_allocated_bytes"].text, std::to_string(2 * kGiB));  // exact before blocks
  EXPECT_DOUBLE_EQ(d["max_fragmentation"].number(), 0.5);
  EXPECT_EQ(d["segments"].text, "2");
  EXPECT_EQ(d["blocks"].text, "2");
  EXPECT_FALSE(d["timeline"].items.empty());

  ASSERT_EQ(v["failed_allocations"].items.size(), 1u);
  const JsonValue& f = v["failed_allocations"][0];
  EXPECT_EQ(f["requested_bytes"].text, std::to_string(768 * kMiB));
  EXPECT_EQ(f["api"].text, "fragscope_alloc_failed");
  EXPECT_EQ(f["device"].text, "0");
  EXPECT_FALSE(f["recovered"].boolean);
  EXPECT_TRUE(f["recovered_by_seq"].is_null());

  ASSERT_EQ(v["ooms"].items.size(), 1u);
  const JsonValue& o = v["ooms"][0];
  EXPECT_EQ(o["class"].text, "fragmentation");
  EXPECT_EQ(o["device"].text, "0");
  EXPECT_EQ(o["requested_bytes"].text, std::to_string(768 * kMiB));
  EXPECT_EQ(o["cached_bytes"].text, std::to_string(kGiB));
  EXPECT_EQ(o["largest_free_range_bytes"].text, std::to_string(512 * kMiB));
  EXPECT_EQ(o["device_free_bytes"].text, std::to_string(256 * kMiB));
  ASSERT_EQ(o["stack"].items.size(), 1u);
  EXPECT_EQ(o["stack"][0]["text"].text, "libtorch_python.so+0x40");
  EXPECT_EQ(o["stack"][0]["module_offset"].text, "0x40");
  EXPECT_FALSE(o["advice"].items.empty());
  EXPECT_EQ(o["sites_at_failure"].items.size(), 2u);
  EXPECT_EQ(o["recent_events"].items.back()["kind"].text, "failed_alloc");
  // Where the cache lay at the failure: two 512 MiB ranges, one in each segment.
  const JsonValue& census = o["free_ranges_at_failure"];
  EXPECT_EQ(census["ranges"].text, "2");
  EXPECT_EQ(census["bytes"].text, std::to_string(kGiB));
  EXPECT_EQ(census["segments"].text, "2");
  EXPECT_EQ(census["segments_with_free"].text, "2");
  EXPECT_EQ(census["segments_left_out"].text, "0");
  ASSERT_EQ(census["by_size"].items.size(), 1u);
  EXPECT_EQ(census["by_size"][0]["bytes"].text, std::to_string(512 * kMiB));
  EXPECT_EQ(census["by_size"][0]["count"].text, "2");
  EXPECT_TRUE(o["map_missing"].is_null());

  // Top-level sites: both blocks, 512 MiB each, with their stacks.
  ASSERT_EQ(v["sites"].items.size(), 2u);
  EXPECT_EQ(v["sites"][0]["live_bytes"].text, std::to_string(512 * kMiB));
  EXPECT_EQ(v["sites"][0]["count"].text, "1");
  ASSERT_EQ(v["sites"][0]["stack"].items.size(), 2u);
  EXPECT_EQ(v["sites"][0]["stack"][0]["text"].text, "libtorch_python.so+0x10");
  EXPECT_EQ(v["sites"][0]["stack"][1]["text"].text, "libtorch_python.so+0x20");
}

TEST(ReportJsonTest, UnknownFiguresAreNullWithReasons) {
  ProcessModel model;
  testing::FrameFeed feed(&model);
  feed.Malloc(0x7f0000000000, 32 * kMiB);
  feed.BlockAlloc(0x7f0000000000, 8 * kMiB);  // 24 MiB cached: below the floor
  std::ostringstream out;
  RenderJson(model.Summarize(), out, {.pretty = false});
  const JsonValue v = ParseOrFail(out.str());
  const JsonValue& d = v["devices"][0];
  EXPECT_TRUE(d["fragmentation"].is_null());
  EXPECT_NE(d["fragmentation_null_reason"].text.find("floor"), std::string::npos);
  EXPECT_TRUE(d["untracked_bytes"].is_null());
  EXPECT_NE(d["untracked_null_reason"].text.find("MemInfo"), std::string::npos);
  EXPECT_TRUE(d["max_fragmentation"].is_null());
  EXPECT_TRUE(d["total_bytes"].is_null());
}

TEST(ReportJsonTest, LostEventsNobodyCountedAreNullNotZero) {
  ProcessModel model;
  v1::Frame drops;
  drops.mutable_drops()->set_dropped_events(4);  // counted: an interval of 4
  model.Apply(drops);
  v1::Frame resync;
  resync.mutable_snapshot()->set_seq(10);
  resync.mutable_snapshot()->set_reason(v1::Snapshot::REASON_RESYNC);
  resync.mutable_snapshot()->set_complete_history(true);
  model.Apply(resync);  // closes it
  resync.mutable_snapshot()->set_seq(20);
  model.Apply(resync);  // a resync with no Drops frame before it: lost, not counted
  std::ostringstream out;
  RenderJson(model.Summarize(), out, {.pretty = false});
  const JsonValue v = ParseOrFail(out.str());
  const JsonValue& intervals = v["approximate_intervals"];
  ASSERT_EQ(intervals.items.size(), 2u);
  EXPECT_EQ(intervals[0]["dropped_events"].text, "4");
  EXPECT_EQ(intervals[0]["to_seq"].text, "10");
  EXPECT_TRUE(intervals[1]["dropped_events"].is_null());
  EXPECT_EQ(intervals[1]["to_seq"].text, "20");
}

TEST(ReportJsonTest, BlocksKnownAtSyncsOnlyAreSaidToBeSo) {
  std::ostringstream followed;
  RenderJson(testing::FragmentationOomSummary(), followed, {.pretty = false});
  const JsonValue f = ParseOrFail(followed.str());
  EXPECT_EQ(f["block_syncs"].text, "0");
  EXPECT_TRUE(f["blocks_known_at_end"].boolean);
  EXPECT_TRUE(f["ooms"][0]["blocks_synced_at_seq"].is_null());

  ProcessModel model;
  testing::FrameFeed feed(&model);
  feed.Device(0, 16 * kGiB);
  feed.Malloc(0x7f0000000000, kGiB);
  feed.BlockAlloc(0x7f0000000000, 512 * kMiB);
  feed.Mark("PyTorch blocks synced (start)", /*blocks_synced=*/true);  // seq 3
  feed.Malloc(0x7f0100000000, 2 * kMiB);
  feed.Failed(768 * kMiB, 0, /*from_sub_allocator=*/false, 256 * kMiB, 16 * kGiB);
  std::ostringstream out;
  RenderJson(model.Summarize(), out, {.pretty = false});
  const JsonValue v = ParseOrFail(out.str());
  EXPECT_EQ(v["block_syncs"].text, "1");
  EXPECT_EQ(v["last_block_sync_seq"].text, "3");
  EXPECT_FALSE(v["blocks_known_at_end"].boolean);
  ASSERT_EQ(v["ooms"].items.size(), 1u);
  EXPECT_EQ(v["ooms"][0]["blocks_synced_at_seq"].text, "3");
  EXPECT_EQ(v["ooms"][0]["class"].text, "unknown");
}

TEST(ReportJsonTest, HostileStringsStayValidJson) {
  ProcessModel model;
  v1::Frame hello;
  hello.mutable_hello()->set_exe("/tmp/\"evil\"\n\x01\xFF\\path");
  hello.mutable_hello()->set_host("h\xC3");
  model.Apply(hello);
  std::ostringstream out;
  RenderJson(model.Summarize(), out);
  const JsonValue v = ParseOrFail(out.str());
  EXPECT_EQ(v["process"]["exe"].text, "/tmp/\"evil\"\n\x01\xEF\xBF\xBD\\path");
  EXPECT_EQ(v["process"]["host"].text, "h\xEF\xBF\xBD");
}

}  // namespace
}  // namespace fragscope
