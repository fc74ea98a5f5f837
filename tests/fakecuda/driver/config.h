// Configuration of the simulated GPUs, read from FAKECUDA_* environment variables.
// Not thread-safe by itself: the driver reads it under its state lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fakecuda {

struct Config {
  int physical_devices = 1;                    // FAKECUDA_DEVICES
  std::vector<int> visible;                    // CUDA_VISIBLE_DEVICES as physical ordinals
  uint64_t capacity_bytes = 16ull << 30;       // FAKECUDA_CAPACITY, per device
  uint64_t ctx_overhead_bytes = 300ull << 20;  // FAKECUDA_CTX_OVERHEAD, per context
  uint64_t other_used_bytes = 0;               // FAKECUDA_OTHER_USED, per device
  std::vector<uint64_t> fail_at;               // FAKECUDA_FAIL_AT: 1-based allocation call numbers
  std::vector<std::pair<std::string, uint64_t>> fail_calls;  // FAKECUDA_FAIL_CALLS=api:n,...
  // FAKECUDA_FREE_WAIT=N:PATH: the N-th successful cuMemFree returns only once PATH exists
  // (a thread held up inside a release that already took effect).
  uint64_t free_wait_at = 0;
  std::string free_wait_path;
  bool null_mode = false;       // FAKECUDA_NULL=1
  std::string live_dump_path;   // FAKECUDA_LIVE_DUMP
  std::string lookup_log_path;  // FAKECUDA_LOOKUP_LOG
};

// Parses "123", "4K", "300M", "16G", "1T" (binary multiples). nullopt on junk or overflow.
std::optional<uint64_t> ParseByteSize(const std::string& text);

// Reads the environment now. Malformed values fall back to defaults with a message on stderr,
// because a test double that silently ignores its knobs is worse than a noisy one.
Config ReadConfigFromEnvironment();

}  // namespace fakecuda
