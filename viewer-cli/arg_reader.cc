#include "arg_reader.h"

#include <cctype>
#include <cstdio>

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

bool ArgReader::Parse() {
  for (std::size_t i = 0; i < args_.size(); ++i) {
    const std::string& a = args_[i];
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
        error_ = "fragscope " + command_ + ": unknown option '" + a + "'";
        return false;
      }
      if (spec->flag != nullptr) {
        if (inline_value) {
          error_ = "fragscope " + command_ + ": option '" + name + "' takes no value";
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
        error_ = "fragscope " + command_ + ": option '" + name + "' needs a value";
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
    std::fprintf(stderr, "%s\n%s", error_.c_str(), usage);
    return kExitUsage;
  }
  if (help) {
    std::fputs(usage, stdout);
    return kExitOk;
  }
  return std::nullopt;
}

std::optional<uint64_t> ArgReader::ParseBytes(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (...) {
    return std::nullopt;
  }
  std::string suffix = text.substr(pos);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix == "i" || (suffix.size() == 2 && suffix[1] == 'i')) suffix = suffix.substr(0, 1);
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
  if (shift > 0 && v > (~0ull >> shift)) return std::nullopt;
  return static_cast<uint64_t>(v) << shift;
}

}  // namespace fragscope::cli
