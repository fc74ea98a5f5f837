#include "fragscope/model/format_bytes.h"

#include <time.h>

#include "absl/strings/str_format.h"

namespace fragscope {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

std::string FormatPercent(double fraction) { return absl::StrFormat("%.1f %%", fraction * 100.0); }

std::string FormatWallTime(uint64_t unix_ns) {
  const time_t seconds = static_cast<time_t>(unix_ns / 1000000000);
  struct tm utc {};
  if (gmtime_r(&seconds, &utc) == nullptr) return absl::StrFormat("%d ns since 1970", unix_ns);
  return absl::StrFormat("%04d-%02d-%02d %02d:%02d:%02d.%03d UTC", utc.tm_year + 1900,
                         utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                         static_cast<int>(unix_ns / 1000000 % 1000));
}

}  // namespace fragscope
