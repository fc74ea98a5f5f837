// Fuzz target: the restricted unpickler (fragscope/torch/pickle_reader.h).
//
// Each input is parsed twice: with the default limits (what `fragscope import` uses) and with
// tiny ones, so the limit checks themselves are reached. Beyond surviving, a parsed document
// must keep the header's promises: the limits hold for what was returned, every container is
// acyclic and no deeper than max_depth, errors carry the documented status codes, and lowering
// limits can only turn a success into kResourceExhausted.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "fragscope/torch/pickle_reader.h"
#include "fuzz_util.h"

namespace {

using fragscope::torch::PickleDocument;
using fragscope::torch::PickleLimits;
using fragscope::torch::PickleReader;
using fragscope::torch::PickleValue;

// Walks the document once per distinct value (the memo makes it a DAG: a naive walk can be
// exponential), returning the container nesting of `v` as the reader counts it (a scalar 0, a
// container 1 + its deepest child) and checking every value against the limits it was read with.
class Walker {
 public:
  explicit Walker(const PickleLimits& limits) : limits_(limits) {}

  uint32_t Depth(const PickleValue* v, uint32_t stack_depth) {
    FUZZ_CHECK(v != nullptr, "null value in a container");
    // An unfinished value on the current path would be a cycle, which the reader refuses.
    auto [it, inserted] = depth_.try_emplace(v, kOnPath);
    if (!inserted) {
      FUZZ_CHECK(it->second != kOnPath, "cycle through a %s", PickleValue::KindName(v->kind()));
      return it->second;
    }
    FUZZ_CHECK(stack_depth <= limits_.max_depth + 1, "walk deeper than max_depth %u",
               limits_.max_depth);
    uint32_t below = 0;
    switch (v->kind()) {
      case PickleValue::Kind::kNone:
        break;
      case PickleValue::Kind::kBool:
        (void)v->bool_value();
        break;
      case PickleValue::Kind::kInt:
        (void)v->int_value();
        break;
      case PickleValue::Kind::kFloat:
        (void)v->float_value();
        break;
      case PickleValue::Kind::kString:
      case PickleValue::Kind::kBytes:
        FUZZ_CHECK(v->string_value().size() <= limits_.max_string_bytes,
                   "%zu-byte string, limit %llu", v->string_value().size(),
                   static_cast<unsigned long long>(limits_.max_string_bytes));
        break;
      case PickleValue::Kind::kTuple:
      case PickleValue::Kind::kList:
        FUZZ_CHECK(v->items().size() <= limits_.max_container_elements, "%zu items, limit %llu",
                   v->items().size(),
                   static_cast<unsigned long long>(limits_.max_container_elements));
        below = 1;
        for (const PickleValue* item : v->items()) {
          below = std::max(below, 1 + Depth(item, stack_depth + 1));
        }
        break;
      case PickleValue::Kind::kDict:
        FUZZ_CHECK(v->dict_items().size() <= limits_.max_container_elements,
                   "%zu dict items, limit %llu", v->dict_items().size(),
                   static_cast<unsigned long long>(limits_.max_container_elements));
        below = 1;
        for (const auto& [key, value] : v->dict_items()) {
          below = std::max(below, 1 + Depth(key, stack_depth + 1));
          below = std::max(below, 1 + Depth(value, stack_depth + 1));
          // Find must agree with the items: the last occurrence of a str key wins.
          if (key->kind() == PickleValue::Kind::kString) {
            const PickleValue* found = v->Find(key->string_value());
            FUZZ_CHECK(found != nullptr, "Find misses a present key");
          }
        }
        break;
    }
    depth_[v] = below;
    return below;
  }

 private:
  static constexpr uint32_t kOnPath = ~uint32_t{0};
  const PickleLimits& limits_;
  std::unordered_map<const PickleValue*, uint32_t> depth_;
};

void CheckDocument(const PickleDocument& doc, const PickleLimits& limits) {
  FUZZ_CHECK(doc.value_count() <= limits.max_values, "%llu values, limit %llu",
             static_cast<unsigned long long>(doc.value_count()),
             static_cast<unsigned long long>(limits.max_values));
  FUZZ_CHECK(doc.protocol() >= 0 && doc.protocol() <= 5, "protocol %d", doc.protocol());
  Walker walker(limits);
  const uint32_t depth = walker.Depth(&doc.root(), 0);
  FUZZ_CHECK(depth <= limits.max_depth, "document depth %u, limit %u", depth, limits.max_depth);
}

void CheckError(const absl::Status& status) {
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument ||
                 status.code() == absl::StatusCode::kResourceExhausted,
             "undocumented status: %s", status.ToString().c_str());
  FUZZ_CHECK(!status.message().empty(), "error without a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  const PickleLimits defaults;
  absl::StatusOr<PickleDocument> full = PickleReader(defaults).Parse(bytes, "fuzz.pickle");
  if (full.ok()) {
    CheckDocument(*full, defaults);
  } else {
    CheckError(full.status());
  }

  PickleLimits tiny;
  tiny.max_depth = 3;
  tiny.max_container_elements = 6;
  tiny.max_string_bytes = 12;
  tiny.max_values = 40;
  tiny.max_memo_entries = 5;
  absl::StatusOr<PickleDocument> small = PickleReader(tiny).Parse(bytes, "fuzz.pickle");
  if (small.ok()) {
    CheckDocument(*small, tiny);
    FUZZ_CHECK(full.ok(), "accepted under tiny limits but refused under the defaults: %s",
               full.status().ToString().c_str());
  } else {
    CheckError(small.status());
    if (full.ok()) {
      FUZZ_CHECK(small.status().code() == absl::StatusCode::kResourceExhausted,
                 "lower limits turned a success into %s", small.status().ToString().c_str());
    }
  }
  return 0;
}
