// A restricted unpickler: reads Python pickles (protocols 2-5) made of builtin data types only
// (None, bool, int, float, str, bytes, tuple, list, dict) into a small value graph.
//
// Why not a general unpickler: a pickle is a program, and its GLOBAL/REDUCE/BUILD family of
// opcodes import and call arbitrary Python callables. PyTorch memory snapshots never need them,
// so every such opcode is refused (with its name and byte offset); nothing is ever executed.
// Every size read from the input is checked against what is left of the input and against
// PickleLimits before anything is allocated, so a crafted file cannot make the reader allocate
// unbounded memory or recurse without bound.
#ifndef FRAGSCOPE_TORCH_PICKLE_READER_H_
#define FRAGSCOPE_TORCH_PICKLE_READER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/status/statusor.h"

namespace fragscope::torch {

namespace internal {
class PickleParser;
}  // namespace internal

// Bounds applied while reading. Every limit is checked before the memory it guards is
// allocated; exceeding one is an error naming the limit, the value and the byte offset.
struct PickleLimits {
  uint64_t max_input_bytes = uint64_t{1} << 30;         // whole pickle, bytes
  uint32_t max_depth = 256;                             // container nesting of the result
  uint64_t max_container_elements = uint64_t{1} << 26;  // items in one list/tuple/dict
  uint64_t max_string_bytes = uint64_t{1} << 28;        // one str or bytes value
  uint64_t max_values = uint64_t{1} << 27;              // values created in total
  uint64_t max_memo_entries = uint64_t{1} << 26;
};

// One value of the graph. Values are owned by their PickleDocument; containers hold
// non-owning pointers into the same document. The memo lets one value appear in several
// containers (a DAG); cycles are rejected when reading, so recursing over a document is safe
// up to PickleLimits::max_depth levels. Immutable once the document is returned; safe to read
// from several threads.
class PickleValue {
 public:
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTuple, kList, kDict };
  using Items = std::vector<const PickleValue*>;
  using DictItems = std::vector<std::pair<const PickleValue*, const PickleValue*>>;

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_sequence() const { return kind_ == Kind::kTuple || kind_ == Kind::kList; }

  // Accessors require the matching kind; callers test kind() first (a mismatch throws
  // std::bad_variant_access, a programming error, never a property of the input).
  bool bool_value() const { return std::get<bool>(data_); }
  // Ints are kept exactly in [-2^63, 2^64 - 1]; wider ints are refused when reading.
  absl::int128 int_value() const { return std::get<absl::int128>(data_); }
  double float_value() const { return std::get<double>(data_); }
  // kString: UTF-8 as written by Python (not re-validated). kBytes: raw bytes.
  const std::string& string_value() const { return std::get<std::string>(data_); }
  // kTuple, kList.
  const Items& items() const { return std::get<Items>(data_); }
  // kDict, in insertion order. A key written twice appears twice; Find returns the last one,
  // as Python's dict would keep.
  const DictItems& dict_items() const { return std::get<DictItems>(data_); }

  // For a kDict: the value stored under the str key `key`, or nullptr when absent (or when this
  // is not a dict).
  const PickleValue* Find(std::string_view key) const;

  // Short human-readable name of the kind ("int", "dict", ...), for error messages.
  static const char* KindName(Kind kind);

 private:
  friend class internal::PickleParser;
  using Data =
      std::variant<std::monostate, bool, absl::int128, double, std::string, Items, DictItems>;
  PickleValue(Kind kind, Data data) : kind_(kind), data_(std::move(data)) {}

  Kind kind_;
  Data data_;
  // Containers nested below this value, filled by the reader's final check; kUnvisited before.
  mutable uint32_t depth_ = kUnvisited;
  static constexpr uint32_t kUnvisited = ~uint32_t{0};
  static constexpr uint32_t kVisiting = ~uint32_t{0} - 1;
};

// The result of reading one pickle: owns every value. Movable; pointers to values stay valid
// across moves (the values live in a std::deque whose elements are never relocated).
class PickleDocument {
 public:
  const PickleValue& root() const { return *root_; }
  uint64_t value_count() const { return values_.size(); }
  int protocol() const { return protocol_; }  // from the PROTO opcode; 0 if absent

 private:
  friend class internal::PickleParser;
  std::deque<PickleValue> values_;
  const PickleValue* root_ = nullptr;
  int protocol_ = 0;
};

// Stateless apart from its limits; one reader can parse many inputs, from any number of
// threads at once.
class PickleReader {
 public:
  explicit PickleReader(PickleLimits limits = {}) : limits_(limits) {}

  // Parses one pickle that must end with STOP. `source_name` (a file name, "<memory>") starts
  // every error message; errors also give the byte offset and the opcode involved.
  // Status codes: kInvalidArgument for malformed or refused input, kResourceExhausted when a
  // limit is exceeded.
  absl::StatusOr<PickleDocument> Parse(std::string_view bytes,
                                       std::string_view source_name = "<memory>") const;

  // Reads the whole file (refusing files over max_input_bytes before reading them) and parses
  // it. kNotFound / kPermissionDenied / kUnavailable-style errors name the file.
  absl::StatusOr<PickleDocument> ParseFile(const std::string& path) const;

  const PickleLimits& limits() const { return limits_; }

 private:
  PickleLimits limits_;
};

}  // namespace fragscope::torch

#endif  // FRAGSCOPE_TORCH_PICKLE_READER_H_
