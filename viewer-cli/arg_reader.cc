#include "arg_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "exit_codes.h"

namespace fragscope::cli {

void ArgReader::Option(const std::string& long_name, const std::string& short_name,
                       std::string* value) {
  specs_.push_back(Spec{long_name, short_name, value, nullptr});
}

void ArgReader::Flag(const std::string& long_name, bool* value) {
  specs_.push_back(Spec{long_name, "", nullptr, value});
}

const ArgReader::Spec* ArgReader::Find(const std::string& name) const {
  for (const Spec& s : specs_) {
    if (name == "--" + s.long_name || (!s.short_name.empty() && name == "-" + s.short_name)) {
      return &s;
    }
  }
  return nullptr;
}

namespace {

// Edits (insert, delete, replace, swap of neighbours) between two short words.
std::size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string ArgReader::UsageError(const std::string& command, const std::string& message) {
  return "fragscope " + command + ": " + message + " (fragscope " + command + " --help)";
}

bool ArgReader::Parse() {
  for (std::size_t i = 0; i < args_.size(); ++i) {
    const std::string& a = args_[i];
    if (command_follows_ && (a.empty() || a[0] != '-')) {
      after_dashdash_.assign(args_.begin() + static_cast<long>(i), args_.end());
      return true;
    }
    if (a == "--") {
      saw_dashdash_ = true;
      after_dashdash_.assign(args_.begin() + static_cast<long>(i) + 1, args_.end());
      return true;
    }
    if (a.size() > 1 && a[0] == '-') {
      std::string name = a;
      std::optional<std::string> inline_value;
      if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
      const Spec* spec = Find(name);
      if (spec == nullptr) {
        // The nearest option by spelling, when it is near enough to be the one meant.
        const std::string bare = name.substr(name.find_first_not_of('-'));
        std::string best;
        std::size_t best_distance = bare.size() <= 3 ? 1 : 2;
        for (const Spec& s : specs_) {
          const std::size_t d = EditDistance(bare, s.long_name);
          if (d <= best_distance && (best.empty() || d < best_distance)) {
            best = s.long_name;
            best_distance = d;
          }
        }
        error_ = UsageError(command_, "unknown option " + name +
                                          (best.empty() ? "" : "; did you mean --" + best + "?"));
        return false;
      }
      if (spec->flag != nullptr) {
        if (inline_value) {
          error_ = UsageError(command_,
                              "option " + name + " takes no value (given '" + *inline_value + "')");
          return false;
        }
        *spec->flag = true;
        continue;
      }
      if (inline_value) {
        *spec->value = *inline_value;
      } else if (i + 1 < args_.size()) {
        *spec->value = args_[++i];
      } else {
        error_ = UsageError(command_, "option " + name + " needs a value");
        return false;
      }
      continue;
    }
    positionals_.push_back(a);
  }
  return true;
}

std::optional<int> ArgReader::ParseOrExit(const char* usage) {
  bool help = false;
  Flag("help", &help);
  if (!Parse()) {
    // The one wrong thing and where the rest is: the whole usage would bury it.
    std::fprintf(stderr, "%s\n", error_.c_str());
    return kExitUsage;
  }
  if (help) {
    std::fputs(usage, stdout);
    return kExitOk;
  }
  return std::nullopt;
}

namespace {

// Digits with an optional decimal part, as the start of `text`; what follows is left in *rest.
// Nothing else (signs, spaces, hex, exponents, inf/nan) is a number here: strtod would take
// them, and `0x1p3` for 8 or ` 5` for 5 are more likely mistakes than intent.
std::optional<double> LeadingDecimal(const std::string& text, std::string* rest) {
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t digits = i;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    digits += i - digits - 1;
  }
  if (digits == 0) return std::nullopt;
  *rest = text.substr(i);
  return std::strtod(text.substr(0, i).c_str(), nullptr);
}

}  // namespace

std::optional<uint64_t> ArgReader::ParseBytes(const std::string& text) {
  std::string suffix;
  std::optional<double> number = LeadingDecimal(text, &suffix);
  if (!number) return std::nullopt;
  const std::string digits = text.substr(0, text.size() - suffix.size());
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && suffix[1] == 'i') suffix = suffix.substr(0, 1);
  int shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "K" || suffix == "k") {
    shift = 10;
  } else if (suffix == "M" || suffix == "m") {
    shift = 20;
  } else if (suffix == "G" || suffix == "g") {
    shift = 30;
  } else if (suffix == "T" || suffix == "t") {
    shift = 40;
  } else {
    return std::nullopt;
  }
  if (digits.find('.') == std::string::npos) {
    // Whole numbers exactly, up to 2^64 - 1 (a double would round them).
    unsigned long long v = 0;
    try {
      v = std::stoull(digits);
    } catch (...) {
      return std::nullopt;
    }
    if (shift > 0 && v > (~0ull >> shift)) return std::nullopt;
    return static_cast<uint64_t>(v) << shift;
  }
  const double bytes = std::ldexp(*number, shift);
  if (!(bytes < 18446744073709551616.0)) return std::nullopt;  // 2^64
  return static_cast<uint64_t>(bytes);
}

std::optional<double> ArgReader::ParseFraction(const std::string& text, double lo, double hi) {
  std::string rest;
  std::optional<double> number = LeadingDecimal(text, &rest);
  if (!number) return std::nullopt;
  if (rest == "%") {
    *number /= 100.0;
  } else if (!rest.empty()) {
    return std::nullopt;
  }
  if (!(*number >= lo && *number <= hi)) return std::nullopt;
  return number;
}

}  // namespace fragscope::cli
