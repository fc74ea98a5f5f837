// Human-readable figures for reports and post-mortem headlines: byte counts, ratios, times.
#ifndef FRAGSCOPE_MODEL_FORMAT_BYTES_H_
#define FRAGSCOPE_MODEL_FORMAT_BYTES_H_

#include <cstdint>
#include <string>

namespace fragscope {

// Binary units with two decimals: "512 B", "1.50 KiB", "1.20 GiB". Thread-safe.
std::string FormatBytes(uint64_t bytes);

// "37.5 %" (one decimal) for a fraction in [0, 1].
std::string FormatPercent(double fraction);

// "2026-12-06 03:12:45.123 UTC" for nanoseconds since the Unix epoch (UTC, so a report reads
// the same wherever it is opened). Thread-safe.
std::string FormatWallTime(uint64_t unix_ns);

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_FORMAT_BYTES_H_
