#include "config.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace fakecuda {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

uint64_t ByteSizeFromEnv(const char* name, uint64_t fallback) {
  std::string text = Env(name);
  if (text.empty()) return fallback;
  std::optional<uint64_t> parsed = ParseByteSize(text);
  if (!parsed) {
    std::fprintf(stderr, "fakecuda: ignoring malformed %s=%s\n", name, text.c_str());
    return fallback;
  }
  return *parsed;
}

std::vector<uint64_t> ParseNumberList(const std::string& text) {
  std::vector<uint64_t> numbers;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    char* end = nullptr;
    unsigned long long value = std::strtoull(item.c_str(), &end, 10);
    if (end != item.c_str() && *end == '\0' && value > 0) numbers.push_back(value);
  }
  return numbers;
}

}  // namespace

std::optional<uint64_t> ParseByteSize(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  std::string suffix(end);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (!suffix.empty() && (suffix.back() == 'i')) suffix.pop_back();
  int shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      default:
        return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  if (shift > 0 && value > (~0ull >> shift)) return std::nullopt;
  return static_cast<uint64_t>(value) << shift;
}

Config ReadConfigFromEnvironment() {
  Config config;
  std::string devices = Env("FAKECUDA_DEVICES");
  if (!devices.empty()) {
    int count = std::atoi(devices.c_str());
    if (count >= 0 && count <= 8) {
      config.physical_devices = count;
    } else {
      std::fprintf(stderr, "fakecuda: FAKECUDA_DEVICES must be 0..8, got %s\n", devices.c_str());
    }
  }
  // CUDA_VISIBLE_DEVICES renumbers devices per process, as on a real machine; only the
  // integer form is understood (UUID forms hide every device, as an unmatched list does).
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible) {
    std::stringstream stream(visible);
    std::string item;
    while (std::getline(stream, item, ',')) {
      char* end = nullptr;
      long ordinal = std::strtol(item.c_str(), &end, 10);
      if (end == item.c_str() || *end != '\0' || ordinal < 0 ||
          ordinal >= config.physical_devices) {
        break;  // the real driver stops at the first invalid entry
      }
      config.visible.push_back(static_cast<int>(ordinal));
    }
  } else {
    for (int i = 0; i < config.physical_devices; ++i) config.visible.push_back(i);
  }
  config.capacity_bytes = ByteSizeFromEnv("FAKECUDA_CAPACITY", config.capacity_bytes);
  config.ctx_overhead_bytes = ByteSizeFromEnv("FAKECUDA_CTX_OVERHEAD", config.ctx_overhead_bytes);
  config.other_used_bytes = ByteSizeFromEnv("FAKECUDA_OTHER_USED", config.other_used_bytes);
  config.fail_at = ParseNumberList(Env("FAKECUDA_FAIL_AT"));
  {
    std::stringstream stream(Env("FAKECUDA_FAIL_CALLS"));
    std::string item;
    while (std::getline(stream, item, ',')) {
      size_t colon = item.find(':');
      if (colon == std::string::npos) continue;
      unsigned long long n = std::strtoull(item.c_str() + colon + 1, nullptr, 10);
      if (n > 0) config.fail_calls.emplace_back(item.substr(0, colon), n);
    }
  }
  if (std::string wait = Env("FAKECUDA_FREE_WAIT"); !wait.empty()) {
    const size_t colon = wait.find(':');
    const unsigned long long n =
        colon == std::string::npos ? 0 : std::strtoull(wait.c_str(), nullptr, 10);
    if (n == 0 || colon + 1 >= wait.size()) {
      std::fprintf(stderr, "fakecuda: FAKECUDA_FREE_WAIT must be N:PATH (N >= 1), got %s\n",
                   wait.c_str());
    } else {
      config.free_wait_at = n;
      config.free_wait_path = wait.substr(colon + 1);
    }
  }
  config.null_mode = Env("FAKECUDA_NULL") == "1";
  config.live_dump_path = Env("FAKECUDA_LIVE_DUMP");
  config.lookup_log_path = Env("FAKECUDA_LOOKUP_LOG");
  return config;
}

}  // namespace fakecuda
