// Helpers shared by the fuzz targets: feeding bytes to a reader through a real file descriptor,
// a property check that aborts (so libFuzzer records a crash), and a strict JSON syntax check
// for rendered reports.
#ifndef FRAGSCOPE_TESTS_FUZZ_FUZZ_UTIL_H_
#define FRAGSCOPE_TESTS_FUZZ_FUZZ_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "google/protobuf/stubs/logging.h"

// A violated property is a finding: abort so the fuzzer saves the input and the replay test
// fails, with the reason on stderr.
#define FUZZ_CHECK(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n");                                                        \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace fragscope::fuzz {

// Protobuf logs every string field with invalid UTF-8 it refuses to parse; under a fuzzer that is
// most inputs, and the noise buries the findings. The refusal itself is what the readers handle.
inline const bool kProtobufQuiet = (google::protobuf::SetLogHandler(nullptr), true);

// An anonymous in-memory file holding `bytes`, positioned at 0: what FrameReader::OpenFile would
// read, without touching the file system (fast, and nothing to clean up after a crash).
inline int MemFdWith(const uint8_t* data, size_t size) {
  int fd = memfd_create("fragscope-fuzz", MFD_CLOEXEC);
  if (fd < 0) {
    std::perror("memfd_create");
    std::abort();
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      std::perror("write memfd");
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  if (lseek(fd, 0, SEEK_SET) != 0) {
    std::perror("lseek memfd");
    std::abort();
  }
  return fd;
}

// Strict RFC 8259 syntax check (no NaN/Infinity, no trailing commas, no control characters in
// strings, one value then only whitespace). Reports promise JSON; a non-finite double printed
// as "nan" or a broken escape is a bug the fuzzer should see. Depth is bounded by the reports'
// own fixed shape, so recursion is fine.
class JsonChecker {
 public:
  explicit JsonChecker(std::string_view text) : s_(text) {}

  // True when the whole text is one valid JSON value. On false, error_offset() says where.
  bool Valid() {
    SkipSpace();
    if (!Value(0)) return false;
    SkipSpace();
    if (i_ != s_.size()) return Fail();
    return true;
  }
  size_t error_offset() const { return error_at_; }

 private:
  static constexpr int kMaxDepth = 512;

  bool Fail() {
    error_at_ = i_;
    return false;
  }
  void SkipSpace() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) {
      ++i_;
    }
  }
  bool Literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return Fail();
    i_ += word.size();
    return true;
  }
  bool Value(int depth) {
    if (depth > kMaxDepth || i_ >= s_.size()) return Fail();
    switch (s_[i_]) {
      case '{':
        return Object(depth);
      case '[':
        return Array(depth);
      case '"':
        return String();
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Number();
    }
  }
  bool Object(int depth) {
    ++i_;  // {
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return true;
    }
    for (;;) {
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] != '"' || !String()) return Fail();
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] != ':') return Fail();
      ++i_;
      SkipSpace();
      if (!Value(depth + 1)) return false;
      SkipSpace();
      if (i_ >= s_.size()) return Fail();
      if (s_[i_] == '}') {
        ++i_;
        return true;
      }
      if (s_[i_] != ',') return Fail();
      ++i_;
    }
  }
  bool Array(int depth) {
    ++i_;  // [
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return true;
    }
    for (;;) {
      SkipSpace();
      if (!Value(depth + 1)) return false;
      SkipSpace();
      if (i_ >= s_.size()) return Fail();
      if (s_[i_] == ']') {
        ++i_;
        return true;
      }
      if (s_[i_] != ',') return Fail();
      ++i_;
    }
  }
  static bool IsHex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  // Length of the valid UTF-8 sequence at s_[i_] (lead byte >= 0x80), 0 if invalid.
  size_t Utf8Length() const {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(s_[k]); };
    const unsigned char c = byte(i_);
    size_t n;
    uint32_t min;
    if ((c & 0xE0) == 0xC0) {
      n = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4, min = 0x10000;
    } else {
      return 0;
    }
    if (i_ + n > s_.size()) return 0;
    uint32_t cp = c & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) {
      if ((byte(i_ + k) & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (byte(i_ + k) & 0x3F);
    }
    if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    return n;
  }
  // Checks escapes, control characters and UTF-8 (RFC 8259 section 8.1: JSON exchanged between
  // systems is UTF-8; trace strings are attacker-chosen bytes).
  bool String() {
    ++i_;  // "
    while (i_ < s_.size()) {
      unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return Fail();
      if (c == '\\') {
        ++i_;
        if (i_ >= s_.size()) return Fail();
        char e = s_[i_];
        if (e == 'u') {
          for (int k = 1; k <= 4; ++k) {
            if (i_ + k >= s_.size() || !IsHex(s_[i_ + k])) return Fail();
          }
          i_ += 5;
          continue;
        }
        if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) return Fail();
      } else if (c >= 0x80) {
        size_t n = Utf8Length();
        if (n == 0) return Fail();
        i_ += n;
        continue;
      }
      ++i_;
    }
    return Fail();
  }
  bool Digits() {
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }
  bool Number() {
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ >= s_.size()) return Fail();
    if (s_[i_] == '0') {
      ++i_;
    } else if (!Digits()) {
      return Fail();
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!Digits()) return Fail();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!Digits()) return Fail();
    }
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
  size_t error_at_ = 0;
};

}  // namespace fragscope::fuzz

#endif  // FRAGSCOPE_TESTS_FUZZ_FUZZ_UTIL_H_
