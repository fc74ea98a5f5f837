// Restricted unpickler. The opcode semantics follow CPython's Lib/pickle.py (the reference
// for protocols 2-5); everything that would import or call Python code is refused.
#include "fragscope/torch/pickle_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope::torch {

const PickleValue* PickleValue::Find(std::string_view key) const {
  if (kind_ != Kind::kDict) return nullptr;
  const DictItems& entries = dict_items();
  // Last match wins, as in a Python dict built by SETITEMS.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->first->kind_ == Kind::kString && it->first->string_value() == key) return it->second;
  }
  return nullptr;
}

const char* PickleValue::KindName(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kBytes:
      return "bytes";
    case Kind::kTuple:
      return "tuple";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
  }
  return "?";
}

namespace internal {
namespace {

// Opcode bytes, named as in CPython's pickle module.
enum Op : uint8_t {
  MARK = '(',
  STOP = '.',
  POP = '0',
  POP_MARK = '1',
  DUP = '2',
  FLOAT = 'F',
  INT = 'I',
  BININT = 'J',
  BININT1 = 'K',
  LONG = 'L',
  BININT2 = 'M',
  NONE = 'N',
  PERSID = 'P',
  BINPERSID = 'Q',
  REDUCE = 'R',
  STRING = 'S',
  BINSTRING = 'T',
  SHORT_BINSTRING = 'U',
  UNICODE = 'V',
  BINUNICODE = 'X',
  APPEND = 'a',
  BUILD = 'b',
  GLOBAL = 'c',
  DICT = 'd',
  EMPTY_DICT = '}',
  APPENDS = 'e',
  GET = 'g',
  BINGET = 'h',
  INST = 'i',
  LONG_BINGET = 'j',
  LIST = 'l',
  EMPTY_LIST = ']',
  OBJ = 'o',
  PUT = 'p',
  BINPUT = 'q',
  LONG_BINPUT = 'r',
  SETITEM = 's',
  TUPLE = 't',
  EMPTY_TUPLE = ')',
  SETITEMS = 'u',
  BINFLOAT = 'G',
  BINBYTES = 'B',
  SHORT_BINBYTES = 'C',
  PROTO = 0x80,
  NEWOBJ = 0x81,
  EXT1 = 0x82,
  EXT2 = 0x83,
  EXT4 = 0x84,
  TUPLE1 = 0x85,
  TUPLE2 = 0x86,
  TUPLE3 = 0x87,
  NEWTRUE = 0x88,
  NEWFALSE = 0x89,
  LONG1 = 0x8a,
  LONG4 = 0x8b,
  SHORT_BINUNICODE = 0x8c,
  BINUNICODE8 = 0x8d,
  BINBYTES8 = 0x8e,
  EMPTY_SET = 0x8f,
  ADDITEMS = 0x90,
  FROZENSET = 0x91,
  NEWOBJ_EX = 0x92,
  STACK_GLOBAL = 0x93,
  MEMOIZE = 0x94,
  FRAME = 0x95,
  BYTEARRAY8 = 0x96,
  NEXT_BUFFER = 0x97,
  READONLY_BUFFER = 0x98,
};

const char* OpName(uint8_t op) {
  switch (op) {
#define FRAGSCOPE_OP_NAME(name) \
  case name:                    \
    return #name;
    FRAGSCOPE_OP_NAME(MARK)
    FRAGSCOPE_OP_NAME(STOP)
    FRAGSCOPE_OP_NAME(POP)
    FRAGSCOPE_OP_NAME(POP_MARK)
    FRAGSCOPE_OP_NAME(DUP)
    FRAGSCOPE_OP_NAME(FLOAT)
    FRAGSCOPE_OP_NAME(INT)
    FRAGSCOPE_OP_NAME(BININT)
    FRAGSCOPE_OP_NAME(BININT1)
    FRAGSCOPE_OP_NAME(LONG)
    FRAGSCOPE_OP_NAME(BININT2)
    FRAGSCOPE_OP_NAME(NONE)
    FRAGSCOPE_OP_NAME(PERSID)
    FRAGSCOPE_OP_NAME(BINPERSID)
    FRAGSCOPE_OP_NAME(REDUCE)
    FRAGSCOPE_OP_NAME(STRING)
    FRAGSCOPE_OP_NAME(BINSTRING)
    FRAGSCOPE_OP_NAME(SHORT_BINSTRING)
    FRAGSCOPE_OP_NAME(UNICODE)
    FRAGSCOPE_OP_NAME(BINUNICODE)
    FRAGSCOPE_OP_NAME(APPEND)
    FRAGSCOPE_OP_NAME(BUILD)
    FRAGSCOPE_OP_NAME(GLOBAL)
    FRAGSCOPE_OP_NAME(DICT)
    FRAGSCOPE_OP_NAME(EMPTY_DICT)
    FRAGSCOPE_OP_NAME(APPENDS)
    FRAGSCOPE_OP_NAME(GET)
    FRAGSCOPE_OP_NAME(BINGET)
    FRAGSCOPE_OP_NAME(INST)
    FRAGSCOPE_OP_NAME(LONG_BINGET)
    FRAGSCOPE_OP_NAME(LIST)
    FRAGSCOPE_OP_NAME(EMPTY_LIST)
    FRAGSCOPE_OP_NAME(OBJ)
    FRAGSCOPE_OP_NAME(PUT)
    FRAGSCOPE_OP_NAME(BINPUT)
    FRAGSCOPE_OP_NAME(LONG_BINPUT)
    FRAGSCOPE_OP_NAME(SETITEM)
    FRAGSCOPE_OP_NAME(TUPLE)
    FRAGSCOPE_OP_NAME(EMPTY_TUPLE)
    FRAGSCOPE_OP_NAME(SETITEMS)
    FRAGSCOPE_OP_NAME(BINFLOAT)
    FRAGSCOPE_OP_NAME(BINBYTES)
    FRAGSCOPE_OP_NAME(SHORT_BINBYTES)
    FRAGSCOPE_OP_NAME(PROTO)
    FRAGSCOPE_OP_NAME(NEWOBJ)
    FRAGSCOPE_OP_NAME(EXT1)
    FRAGSCOPE_OP_NAME(EXT2)
    FRAGSCOPE_OP_NAME(EXT4)
    FRAGSCOPE_OP_NAME(TUPLE1)
    FRAGSCOPE_OP_NAME(TUPLE2)
    FRAGSCOPE_OP_NAME(TUPLE3)
    FRAGSCOPE_OP_NAME(NEWTRUE)
    FRAGSCOPE_OP_NAME(NEWFALSE)
    FRAGSCOPE_OP_NAME(LONG1)
    FRAGSCOPE_OP_NAME(LONG4)
    FRAGSCOPE_OP_NAME(SHORT_BINUNICODE)
    FRAGSCOPE_OP_NAME(BINUNICODE8)
    FRAGSCOPE_OP_NAME(BINBYTES8)
    FRAGSCOPE_OP_NAME(EMPTY_SET)
    FRAGSCOPE_OP_NAME(ADDITEMS)
    FRAGSCOPE_OP_NAME(FROZENSET)
    FRAGSCOPE_OP_NAME(NEWOBJ_EX)
    FRAGSCOPE_OP_NAME(STACK_GLOBAL)
    FRAGSCOPE_OP_NAME(MEMOIZE)
    FRAGSCOPE_OP_NAME(FRAME)
    FRAGSCOPE_OP_NAME(BYTEARRAY8)
    FRAGSCOPE_OP_NAME(NEXT_BUFFER)
    FRAGSCOPE_OP_NAME(READONLY_BUFFER)
#undef FRAGSCOPE_OP_NAME
  }
  return nullptr;
}

constexpr int kHighestProtocol = 5;

}  // namespace

// One parse. Not reusable; PickleReader::Parse makes a fresh one per call.
class PickleParser {
 public:
  using Kind = PickleValue::Kind;

  PickleParser(std::string_view bytes, std::string_view source, const PickleLimits& limits)
      : data_(reinterpret_cast<const uint8_t*>(bytes.data())),
        size_(bytes.size()),
        source_(source),
        limits_(limits) {}

  absl::StatusOr<PickleDocument> Run() {
    if (size_ > limits_.max_input_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s: pickle is %d bytes, over the limit of %d bytes (PickleLimits::max_input_bytes)",
          source_, size_, limits_.max_input_bytes));
    }
    while (true) {
      if (pos_ >= size_) {
        return Invalid(pos_, "input ends before the STOP opcode (truncated pickle?)");
      }
      op_offset_ = pos_;
      op_ = data_[pos_++];
      if (op_ == STOP) break;
      if (absl::Status s = Step(); !s.ok()) return s;
    }
    if (stack_.empty()) return Invalid(op_offset_, "STOP with an empty stack");
    PickleValue* root = stack_.back();
    if (absl::Status s = CheckShape(root); !s.ok()) return s;
    doc_.root_ = root;
    return std::move(doc_);
  }

 private:
  // --- errors ---------------------------------------------------------------------------
  std::string Where(size_t offset) const {
    const char* name = OpName(op_);
    std::string op = name != nullptr
                         ? absl::StrCat(name, " (0x", absl::Hex(op_, absl::kZeroPad2), ")")
                         : absl::StrCat("0x", absl::Hex(op_, absl::kZeroPad2));
    if (offset == op_offset_)
      return absl::StrFormat("%s: opcode %s at offset %d", source_, op, offset);
    return absl::StrFormat("%s: byte offset %d (inside opcode %s at offset %d)", source_, offset,
                           op, op_offset_);
  }
  absl::Status Invalid(size_t offset, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(offset), ": ", what));
  }
  absl::Status OverLimit(const char* what, uint64_t value, uint64_t limit,
                         const char* limit_name) const {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: %s %d exceeds the limit %d (PickleLimits::%s)", Where(op_offset_),
                        what, value, limit, limit_name));
  }

  // --- input ----------------------------------------------------------------------------
  absl::Status Need(uint64_t n) const {
    if (n > size_ - pos_) {
      return Invalid(pos_, absl::StrFormat("needs %d more bytes, only %d left (truncated pickle?)",
                                           n, size_ - pos_));
    }
    return absl::OkStatus();
  }
  // Little-endian unsigned integer of `n` bytes (n <= 8); caller checked Need(n).
  uint64_t ReadLe(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{data_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  absl::StatusOr<uint64_t> ReadLeChecked(int n) {
    if (absl::Status s = Need(n); !s.ok()) return s;
    return ReadLe(n);
  }

  // --- values ---------------------------------------------------------------------------
  absl::StatusOr<PickleValue*> New(Kind kind, PickleValue::Data data) {
    if (doc_.values_.size() >= limits_.max_values) {
      return OverLimit("value count", doc_.values_.size() + 1, limits_.max_values, "max_values");
    }
    doc_.values_.push_back(PickleValue(kind, std::move(data)));
    return &doc_.values_.back();
  }
  absl::Status Push(Kind kind, PickleValue::Data data) {
    absl::StatusOr<PickleValue*> v = New(kind, std::move(data));
    if (!v.ok()) return v.status();
    stack_.push_back(*v);
    return absl::OkStatus();
  }
  absl::StatusOr<PickleValue*> Pop() {
    if (stack_.size() <= Floor())
      return Invalid(op_offset_, "needs a value but the stack is empty");
    PickleValue* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  absl::StatusOr<PickleValue*> Top() {
    if (stack_.size() <= Floor())
      return Invalid(op_offset_, "needs a value but the stack is empty");
    return stack_.back();
  }
  // Values below the innermost MARK belong to an outer level: opcodes may not consume them.
  size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops everything above the innermost MARK, in stack order.
  absl::StatusOr<std::vector<PickleValue*>> PopMark() {
    if (marks_.empty()) return Invalid(op_offset_, "needs a MARK but none is open");
    size_t start = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue*> items(stack_.begin() + static_cast<ptrdiff_t>(start), stack_.end());
    stack_.resize(start);
    return items;
  }
  absl::Status CheckElements(uint64_t count) const {
    if (count > limits_.max_container_elements) {
      return OverLimit("container element count", count, limits_.max_container_elements,
                       "max_container_elements");
    }
    return absl::OkStatus();
  }
  absl::Status PushTuple(std::vector<PickleValue*> items) {
    if (absl::Status s = CheckElements(items.size()); !s.ok()) return s;
    PickleValue::Items out(items.begin(), items.end());
    return Push(Kind::kTuple, std::move(out));
  }
  absl::Status PushTupleOfTop(size_t n) {
    if (stack_.size() - Floor() < n) {
      return Invalid(op_offset_, absl::StrFormat("needs %d values on the stack", n));
    }
    std::vector<PickleValue*> items(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return PushTuple(std::move(items));
  }
  absl::Status PushString(Kind kind, uint64_t length) {
    if (length > limits_.max_string_bytes) {
      return OverLimit(kind == Kind::kString ? "str length" : "bytes length", length,
                       limits_.max_string_bytes, "max_string_bytes");
    }
    if (absl::Status s = Need(length); !s.ok()) return s;
    std::string text(reinterpret_cast<const char*>(data_ + pos_), length);
    pos_ += length;
    return Push(kind, std::move(text));
  }
  // LONG1/LONG4 payload: little-endian two's complement of `n` bytes.
  absl::Status PushLong(uint64_t n) {
    if (absl::Status s = Need(n); !s.ok()) return s;
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    if (n == 0) return Push(Kind::kInt, absl::int128(0));
    const bool negative = (p[n - 1] & 0x80) != 0;
    const uint8_t fill = negative ? 0xff : 0x00;
    // Bytes past the 16th can only be sign extension for a value that fits; check them first.
    for (uint64_t i = 16; i < n; ++i) {
      if (p[i] != fill) return Invalid(op_offset_, "int wider than 64 bits is not supported");
    }
    unsigned __int128 bits = 0;
    const uint64_t used = std::min<uint64_t>(n, 16);
    for (uint64_t i = 0; i < used; ++i) bits |= static_cast<unsigned __int128>(p[i]) << (8 * i);
    if (negative && used < 16) bits |= ~static_cast<unsigned __int128>(0) << (8 * used);
    const __int128 value = static_cast<__int128>(bits);
    const __int128 kMin = -(static_cast<__int128>(1) << 63);
    const __int128 kMax = (static_cast<__int128>(1) << 64) - 1;
    if (value < kMin || value > kMax) {
      return Invalid(op_offset_, "int outside [-2^63, 2^64-1] is not supported");
    }
    return Push(Kind::kInt,
                absl::MakeInt128(static_cast<int64_t>(value >> 64), static_cast<uint64_t>(value)));
  }

  // --- memo -----------------------------------------------------------------------------
  absl::Status Put(uint64_t index) {
    absl::StatusOr<PickleValue*> top = Top();
    if (!top.ok()) return top.status();
    if (!memo_.contains(index) && memo_.size() >= limits_.max_memo_entries) {
      return OverLimit("memo entry count", memo_.size() + 1, limits_.max_memo_entries,
                       "max_memo_entries");
    }
    memo_[index] = *top;
    return absl::OkStatus();
  }
  absl::Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) {
      return Invalid(op_offset_, absl::StrFormat("memo key %d was never stored", index));
    }
    stack_.push_back(it->second);
    return absl::OkStatus();
  }

  // --- containers -----------------------------------------------------------------------
  absl::Status Append(PickleValue* list, const std::vector<PickleValue*>& items) {
    if (list->kind_ != Kind::kList) {
      return Invalid(op_offset_, absl::StrCat("appends to a ", PickleValue::KindName(list->kind_),
                                              ", expected a list"));
    }
    auto& out = std::get<PickleValue::Items>(list->data_);
    if (absl::Status s = CheckElements(out.size() + items.size()); !s.ok()) return s;
    out.insert(out.end(), items.begin(), items.end());
    return absl::OkStatus();
  }
  absl::Status SetItems(PickleValue* dict, const std::vector<PickleValue*>& kv) {
    if (dict->kind_ != Kind::kDict) {
      return Invalid(op_offset_,
                     absl::StrCat("sets items on a ", PickleValue::KindName(dict->kind_),
                                  ", expected a dict"));
    }
    if (kv.size() % 2 != 0) return Invalid(op_offset_, "odd number of values for key/value pairs");
    auto& out = std::get<PickleValue::DictItems>(dict->data_);
    if (absl::Status s = CheckElements(out.size() + kv.size() / 2); !s.ok()) return s;
    for (size_t i = 0; i < kv.size(); i += 2) {
      // Python refuses unhashable keys; so do we (they also could not be looked up).
      if (kv[i]->kind_ == Kind::kList || kv[i]->kind_ == Kind::kDict) {
        return Invalid(op_offset_, absl::StrCat("unhashable dict key of type ",
                                                PickleValue::KindName(kv[i]->kind_)));
      }
      out.emplace_back(kv[i], kv[i + 1]);
    }
    return absl::OkStatus();
  }

  // --- one opcode -----------------------------------------------------------------------
  absl::Status Step() {
    switch (op_) {
      case PROTO: {
        absl::StatusOr<uint64_t> v = ReadLeChecked(1);
        if (!v.ok()) return v.status();
        if (*v > kHighestProtocol) {
          return Invalid(op_offset_, absl::StrFormat("unsupported pickle protocol %d (this reader "
                                                     "knows protocols up to %d)",
                                                     *v, kHighestProtocol));
        }
        doc_.protocol_ = static_cast<int>(*v);
        return absl::OkStatus();
      }
      case FRAME: {
        // Protocol 4 framing only groups opcodes for buffered reading; the length must fit.
        absl::StatusOr<uint64_t> len = ReadLeChecked(8);
        if (!len.ok()) return len.status();
        if (*len > size_ - pos_) {
          return Invalid(op_offset_, absl::StrFormat("frame of %d bytes, only %d left "
                                                     "(truncated pickle?)",
                                                     *len, size_ - pos_));
        }
        return absl::OkStatus();
      }
      case MARK:
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case POP:
        if (stack_.size() > Floor()) {
          stack_.pop_back();
          return absl::OkStatus();
        }
        // CPython pops a MARK when the stack above it is empty.
        return PopMark().status();
      case POP_MARK:
        return PopMark().status();
      case DUP: {
        absl::StatusOr<PickleValue*> top = Top();
        if (!top.ok()) return top.status();
        stack_.push_back(*top);
        return absl::OkStatus();
      }
      case NONE:
        return Push(Kind::kNone, std::monostate{});
      case NEWTRUE:
        return Push(Kind::kBool, true);
      case NEWFALSE:
        return Push(Kind::kBool, false);
      case BININT: {
        absl::StatusOr<uint64_t> v = ReadLeChecked(4);
        if (!v.ok()) return v.status();
        return Push(Kind::kInt, absl::int128(static_cast<int32_t>(static_cast<uint32_t>(*v))));
      }
      case BININT1:
      case BININT2: {
        absl::StatusOr<uint64_t> v = ReadLeChecked(op_ == BININT1 ? 1 : 2);
        if (!v.ok()) return v.status();
        return Push(Kind::kInt, absl::int128(*v));
      }
      case LONG1: {
        absl::StatusOr<uint64_t> n = ReadLeChecked(1);
        if (!n.ok()) return n.status();
        return PushLong(*n);
      }
      case LONG4: {
        absl::StatusOr<uint64_t> n = ReadLeChecked(4);
        if (!n.ok()) return n.status();
        const int32_t signed_n = static_cast<int32_t>(static_cast<uint32_t>(*n));
        if (signed_n < 0) return Invalid(op_offset_, "negative byte count");
        if (static_cast<uint64_t>(signed_n) > limits_.max_string_bytes) {
          return OverLimit("int byte count", signed_n, limits_.max_string_bytes,
                           "max_string_bytes");
        }
        return PushLong(static_cast<uint64_t>(signed_n));
      }
      case BINFLOAT: {
        if (absl::Status s = Need(8); !s.ok()) return s;
        uint64_t bits = 0;  // big-endian IEEE 754 double
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | data_[pos_ + i];
        pos_ += 8;
        double d;
        std::memcpy(&d, &bits, sizeof d);
        return Push(Kind::kFloat, d);
      }
      case SHORT_BINUNICODE:
      case BINUNICODE:
      case BINUNICODE8:
      case SHORT_BINBYTES:
      case BINBYTES:
      case BINBYTES8:
      case BYTEARRAY8: {
        const int width = (op_ == SHORT_BINUNICODE || op_ == SHORT_BINBYTES) ? 1
                          : (op_ == BINUNICODE || op_ == BINBYTES)           ? 4
                                                                             : 8;
        absl::StatusOr<uint64_t> len = ReadLeChecked(width);
        if (!len.ok()) return len.status();
        const bool text = op_ == SHORT_BINUNICODE || op_ == BINUNICODE || op_ == BINUNICODE8;
        return PushString(text ? Kind::kString : Kind::kBytes, *len);
      }
      case READONLY_BUFFER: {
        // Marks the buffer on top read-only: nothing to do for a value we never mutate.
        absl::StatusOr<PickleValue*> top = Top();
        return top.status();
      }
      case EMPTY_TUPLE:
        return Push(Kind::kTuple, PickleValue::Items{});
      case TUPLE1:
        return PushTupleOfTop(1);
      case TUPLE2:
        return PushTupleOfTop(2);
      case TUPLE3:
        return PushTupleOfTop(3);
      case TUPLE: {
        absl::StatusOr<std::vector<PickleValue*>> items = PopMark();
        if (!items.ok()) return items.status();
        return PushTuple(std::move(*items));
      }
      case EMPTY_LIST:
        return Push(Kind::kList, PickleValue::Items{});
      case LIST: {
        absl::StatusOr<std::vector<PickleValue*>> items = PopMark();
        if (!items.ok()) return items.status();
        if (absl::Status s = Push(Kind::kList, PickleValue::Items{}); !s.ok()) return s;
        return Append(stack_.back(), *items);
      }
      case APPEND: {
        absl::StatusOr<PickleValue*> item = Pop();
        if (!item.ok()) return item.status();
        absl::StatusOr<PickleValue*> list = Top();
        if (!list.ok()) return list.status();
        return Append(*list, {*item});
      }
      case APPENDS: {
        absl::StatusOr<std::vector<PickleValue*>> items = PopMark();
        if (!items.ok()) return items.status();
        absl::StatusOr<PickleValue*> list = Top();
        if (!list.ok()) return list.status();
        return Append(*list, *items);
      }
      case EMPTY_DICT:
        return Push(Kind::kDict, PickleValue::DictItems{});
      case DICT: {
        absl::StatusOr<std::vector<PickleValue*>> kv = PopMark();
        if (!kv.ok()) return kv.status();
        if (absl::Status s = Push(Kind::kDict, PickleValue::DictItems{}); !s.ok()) return s;
        return SetItems(stack_.back(), *kv);
      }
      case SETITEM: {
        absl::StatusOr<PickleValue*> value = Pop();
        if (!value.ok()) return value.status();
        absl::StatusOr<PickleValue*> key = Pop();
        if (!key.ok()) return key.status();
        absl::StatusOr<PickleValue*> dict = Top();
        if (!dict.ok()) return dict.status();
        return SetItems(*dict, {*key, *value});
      }
      case SETITEMS: {
        absl::StatusOr<std::vector<PickleValue*>> kv = PopMark();
        if (!kv.ok()) return kv.status();
        absl::StatusOr<PickleValue*> dict = Top();
        if (!dict.ok()) return dict.status();
        return SetItems(*dict, *kv);
      }
      case BINPUT:
      case LONG_BINPUT: {
        absl::StatusOr<uint64_t> index = ReadLeChecked(op_ == BINPUT ? 1 : 4);
        if (!index.ok()) return index.status();
        return Put(*index);
      }
      case MEMOIZE:
        return Put(memo_.size());
      case BINGET:
      case LONG_BINGET: {
        absl::StatusOr<uint64_t> index = ReadLeChecked(op_ == BINGET ? 1 : 4);
        if (!index.ok()) return index.status();
        return Get(*index);
      }
      case GLOBAL:
      case STACK_GLOBAL:
      case REDUCE:
      case BUILD:
      case INST:
      case OBJ:
      case NEWOBJ:
      case NEWOBJ_EX:
      case PERSID:
      case BINPERSID:
      case EXT1:
      case EXT2:
      case EXT4:
        return Invalid(op_offset_,
                       "refused: this opcode imports or calls Python code; only pickles of "
                       "builtin data types (None, bool, int, float, str, bytes, tuple, list, "
                       "dict) are read");
      case INT:
      case LONG:
      case FLOAT:
      case STRING:
      case BINSTRING:
      case SHORT_BINSTRING:
      case UNICODE:
      case PUT:
      case GET:
        return Invalid(op_offset_,
                       "unsupported protocol 0/1 text or Python 2 opcode; write the pickle "
                       "with Python 3 and protocol 2 or newer");
      case EMPTY_SET:
      case ADDITEMS:
      case FROZENSET:
        return Invalid(op_offset_, "set and frozenset values are not supported");
      case NEXT_BUFFER:
        return Invalid(op_offset_,
                       "out-of-band buffers (protocol 5 NEXT_BUFFER) are not supported");
      default:
        return Invalid(op_offset_, "unknown opcode (not a pickle, or a corrupt one)");
    }
  }

  // Computes every reachable container's nesting depth once (memoized, so shared values cost
  // nothing extra), refusing cycles and nesting beyond max_depth. Iterative: the input decides
  // the depth, so recursion here could overflow the C++ stack.
  absl::Status CheckShape(const PickleValue* root) const {
    struct Visit {
      const PickleValue* value;
      size_t next_child;  // for a dict, counts keys and values: 2*i is key i, 2*i+1 value i
      uint32_t max_child_depth;
    };
    auto child_count = [](const PickleValue* v) -> size_t {
      if (v->kind_ == Kind::kTuple || v->kind_ == Kind::kList) return v->items().size();
      if (v->kind_ == Kind::kDict) return 2 * v->dict_items().size();
      return 0;
    };
    auto child = [](const PickleValue* v, size_t i) -> const PickleValue* {
      if (v->kind_ == Kind::kDict) {
        const auto& kv = v->dict_items()[i / 2];
        return i % 2 == 0 ? kv.first : kv.second;
      }
      return v->items()[i];
    };
    auto is_container = [](const PickleValue* v) {
      return v->kind_ == Kind::kTuple || v->kind_ == Kind::kList || v->kind_ == Kind::kDict;
    };
    auto too_deep = [&]() {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: values nest deeper than %d containers, or refer to themselves "
                          "(PickleLimits::max_depth)",
                          source_, limits_.max_depth));
    };
    if (!is_container(root)) return absl::OkStatus();
    std::vector<Visit> path;
    root->depth_ = PickleValue::kVisiting;
    path.push_back({root, 0, 0});
    while (!path.empty()) {
      Visit& top = path.back();
      if (top.next_child < child_count(top.value)) {
        const PickleValue* c = child(top.value, top.next_child++);
        if (!is_container(c)) continue;
        if (c->depth_ == PickleValue::kVisiting) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: a %s contains itself (cyclic reference through the memo); snapshots never "
              "do this",
              source_, PickleValue::KindName(c->kind_)));
        }
        if (c->depth_ != PickleValue::kUnvisited) {
          top.max_child_depth = std::max(top.max_child_depth, c->depth_);
          continue;
        }
        if (path.size() >= limits_.max_depth) return too_deep();
        c->depth_ = PickleValue::kVisiting;
        path.push_back({c, 0, 0});
        continue;
      }
      const uint32_t depth = top.max_child_depth + 1;
      if (depth > limits_.max_depth) return too_deep();
      top.value->depth_ = depth;
      path.pop_back();
      if (!path.empty()) path.back().max_child_depth = std::max(path.back().max_child_depth, depth);
    }
    return absl::OkStatus();
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;
  uint8_t op_ = 0;
  std::string source_;
  const PickleLimits& limits_;
  PickleDocument doc_;
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;  // stack heights at each open MARK
  absl::flat_hash_map<uint64_t, PickleValue*> memo_;
};

}  // namespace internal

absl::StatusOr<PickleDocument> PickleReader::Parse(std::string_view bytes,
                                                   std::string_view source_name) const {
  return internal::PickleParser(bytes, source_name, limits_).Run();
}

absl::StatusOr<PickleDocument> PickleReader::ParseFile(const std::string& path) const {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    std::string what = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(what);
    if (err == EACCES) return absl::PermissionDeniedError(what);
    return absl::UnavailableError(what);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > limits_.max_input_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: file is %d bytes, over the limit of %d bytes (PickleLimits::max_input_bytes)", path,
        st.st_size, limits_.max_input_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for reading"));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size())) {
    return absl::UnavailableError(
        absl::StrFormat("%s: read %d of %d bytes (file changed while "
                        "reading?)",
                        path, in.gcount(), bytes.size()));
  }
  return Parse(bytes, path);
}

}  // namespace fragscope::torch
