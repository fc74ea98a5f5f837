// Human-readable byte counts for reports and post-mortem headlines.
#ifndef FRAGSCOPE_MODEL_FORMAT_BYTES_H_
#define FRAGSCOPE_MODEL_FORMAT_BYTES_H_

#include <cstdint>
#include <string>

namespace fragscope {

// Binary units with two decimals: "512 B", "1.50 KiB", "1.20 GiB". Thread-safe.
std::string FormatBytes(uint64_t bytes);

// "37.5 %" (one decimal) for a fraction in [0, 1].
std::string FormatPercent(double fraction);

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_FORMAT_BYTES_H_
