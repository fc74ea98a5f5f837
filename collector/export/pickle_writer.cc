#include "fragscope/export/pickle_writer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fragscope::exporter {
namespace {

// Opcodes (CPython Lib/pickle.py names).
constexpr char kProto = '\x80';
constexpr char kStop = '.';
constexpr char kNone = 'N';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kBinInt1 = 'K';   // 1-byte unsigned
constexpr char kBinInt2 = 'M';   // 2-byte unsigned
constexpr char kBinInt = 'J';    // 4-byte signed
constexpr char kLong1 = '\x8a';  // n-byte two's complement, little-endian
constexpr char kBinFloat = 'G';  // 8-byte big-endian double
constexpr char kBinUnicode = 'X';
constexpr char kEmptyList = ']';
constexpr char kEmptyDict = '}';
constexpr char kTuple2 = '\x86';
constexpr char kMark = '(';
constexpr char kAppends = 'e';
constexpr char kSetItems = 'u';

}  // namespace

PickleWriter::PickleWriter() {
  Op(kProto);
  out_.push_back(static_cast<char>(kProtocol));
}

void PickleWriter::Fail(const char* what) const {
  std::fprintf(stderr, "PickleWriter misuse: %s\n", what);
  std::abort();
}

void PickleWriter::Le(uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PickleWriter::Value() {
  if (open_.empty()) {
    ++top_level_values_;
    return;
  }
  Frame& f = open_.back();
  if (f.kind == Open::kPair && f.items == 2) Fail("a pair holds two values");
  ++f.items;
}

void PickleWriter::None() {
  Value();
  Op(kNone);
}

void PickleWriter::Bool(bool v) {
  Value();
  Op(v ? kNewTrue : kNewFalse);
}

void PickleWriter::Int(int64_t v) {
  if (v >= 0) {
    Uint(static_cast<uint64_t>(v));
    return;
  }
  Value();
  if (v >= INT32_MIN) {
    Op(kBinInt);
    Le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    return;
  }
  Op(kLong1);
  out_.push_back(8);
  Le(static_cast<uint64_t>(v), 8);
}

void PickleWriter::Uint(uint64_t v) {
  Value();
  if (v <= 0xff) {
    Op(kBinInt1);
    Le(v, 1);
  } else if (v <= 0xffff) {
    Op(kBinInt2);
    Le(v, 2);
  } else if (v <= INT32_MAX) {
    Op(kBinInt);
    Le(v, 4);
  } else {
    // Shortest two's complement form that keeps the sign bit clear.
    int n = 1;
    while (n < 8 && (v >> (8 * n - 1)) != 0) ++n;
    if (n == 8 && (v >> 63) != 0) n = 9;
    Op(kLong1);
    out_.push_back(static_cast<char>(n));
    Le(v, n > 8 ? 8 : n);
    if (n == 9) out_.push_back('\0');
  }
}

void PickleWriter::Float(double v) {
  Value();
  Op(kBinFloat);
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void PickleWriter::String(std::string_view utf8) {
  Value();
  if (utf8.size() > UINT32_MAX) Fail("string longer than 4 GiB");
  Op(kBinUnicode);
  Le(utf8.size(), 4);
  out_.append(utf8);
}

void PickleWriter::BeginList() {
  Value();
  Op(kEmptyList);
  Op(kMark);
  open_.push_back({Open::kList});
}

void PickleWriter::EndList() {
  if (open_.empty() || open_.back().kind != Open::kList) Fail("EndList without BeginList");
  Op(kAppends);
  open_.pop_back();
}

void PickleWriter::BeginDict() {
  Value();
  Op(kEmptyDict);
  Op(kMark);
  open_.push_back({Open::kDict});
}

void PickleWriter::EndDict() {
  if (open_.empty() || open_.back().kind != Open::kDict) Fail("EndDict without BeginDict");
  if (open_.back().items % 2 != 0) Fail("a dict key without a value");
  Op(kSetItems);
  open_.pop_back();
}

void PickleWriter::BeginPair() {
  Value();
  open_.push_back({Open::kPair});
}

void PickleWriter::EndPair() {
  if (open_.empty() || open_.back().kind != Open::kPair) Fail("EndPair without BeginPair");
  if (open_.back().items != 2) Fail("a pair holds two values");
  Op(kTuple2);
  open_.pop_back();
}

std::string PickleWriter::Finish() {
  if (!open_.empty()) Fail("Finish with containers open");
  if (top_level_values_ != 1) Fail("a pickle holds exactly one top-level value");
  Op(kStop);
  std::string out = std::move(out_);
  out_.clear();
  Op(kProto);
  out_.push_back(static_cast<char>(kProtocol));
  top_level_values_ = 0;
  return out;
}

}  // namespace fragscope::exporter
