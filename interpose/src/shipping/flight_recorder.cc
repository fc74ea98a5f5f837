#include "shipping/flight_recorder.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "recording/agent_log.h"

namespace fragscope::agent {
namespace {

constexpr uint64_t kMaxFlightMb = uint64_t{1} << 20;
constexpr uint64_t kUnread = ~uint64_t{0};

constinit std::atomic<uint64_t> g_segment_bytes{kUnread};

uint64_t ReadFromEnvironment() {
  const char* text = getenv("FRAGSCOPE_FLIGHT_MB");
  const uint64_t mb = ParseFlightMb(text);
  if (mb == 0 && text != nullptr && strcmp(text, "0") != 0 && text[0] != '\0') {
    AgentLog("ignoring FRAGSCOPE_FLIGHT_MB=%.64s (not a valid value)", text);
  }
  const uint64_t bytes = mb * (uint64_t{1} << 20) / 2;
  g_segment_bytes.store(bytes, std::memory_order_release);
  return bytes;
}

// Read at load time, while the program is single-threaded (a later setenv cannot race it).
__attribute__((constructor)) void ReadAtLoad() { ReadFromEnvironment(); }

}  // namespace

uint64_t ParseFlightMb(const char* text) {
  if (text == nullptr || *text == '\0') return 0;
  uint64_t value = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return 0;
    value = value * 10 + static_cast<uint64_t>(*p - '0');
    if (value > kMaxFlightMb) return 0;
  }
  return value;
}

uint64_t FlightSegmentBytes() {
  const uint64_t bytes = g_segment_bytes.load(std::memory_order_acquire);
  return bytes != kUnread ? bytes : ReadFromEnvironment();
}

}  // namespace fragscope::agent
