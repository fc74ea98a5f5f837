// The project's one JSON writer (reports, job summaries, trace-event exports, the collector's
// status): streaming, so output of any size costs no document in memory; correct escaping,
// valid UTF-8 out whatever bytes come in, optional indentation, keys in the order written.
// No dependency beyond the standard library and Abseil's formatting. (nlohmann::json is used
// only to read JSON: baselines, the collector's status.)
#ifndef FRAGSCOPE_REPORT_JSON_WRITER_H_
#define FRAGSCOPE_REPORT_JSON_WRITER_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace fragscope {

// Not thread-safe; writes to `out`, which must outlive it. Misuse (a value where a key is due)
// is a programming error checked only by tests.
class JsonWriter {
 public:
  JsonWriter(std::ostream& out, bool pretty);

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  void Key(std::string_view key);

  void String(std::string_view value);
  void Uint(uint64_t value);
  void Int(int64_t value);
  void Double(double value);  // 6 significant digits; non-finite values are written as null
  // The shortest form that reads back as the same double (times in microseconds with their
  // nanoseconds); non-finite values are written as null.
  void DoubleExact(double value);
  void Bool(bool value);
  void Null();
  // A value rendered elsewhere (one complete JSON value, e.g. another writer's object), copied
  // as it is; when pretty, its lines are indented to this level.
  void RawValue(std::string_view json);

  // Key + value shorthands.
  void Field(std::string_view key, std::string_view value) {
    Key(key);
    String(value);
  }
  void Field(std::string_view key, const char* value) {
    Key(key);
    String(value);
  }
  void Field(std::string_view key, uint64_t value) {
    Key(key);
    Uint(value);
  }
  void Field(std::string_view key, int value) {
    Key(key);
    Int(value);
  }
  void Field(std::string_view key, bool value) {
    Key(key);
    Bool(value);
  }
  void FieldDouble(std::string_view key, double value) {
    Key(key);
    Double(value);
  }
  void FieldDoubleExact(std::string_view key, double value) {
    Key(key);
    DoubleExact(value);
  }
  void FieldNull(std::string_view key) {
    Key(key);
    Null();
  }
  // An array of strings.
  void FieldStrings(std::string_view key, const std::vector<std::string>& values) {
    Key(key);
    BeginArray();
    for (const std::string& v : values) String(v);
    EndArray();
  }
  // The value, or null when there is none.
  void FieldOrNull(std::string_view key, std::optional<uint64_t> value) {
    Key(key);
    if (value) {
      Uint(*value);
    } else {
      Null();
    }
  }

 private:
  void BeforeValue();
  void Newline();

  std::ostream& out_;
  bool pretty_;
  struct Level {
    bool object;
    bool empty;
  };
  std::vector<Level> levels_;
  bool after_key_ = false;
};

// `value` as a JSON string literal (quotes included); invalid UTF-8 becomes U+FFFD.
std::string JsonQuote(std::string_view value);

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_JSON_WRITER_H_
