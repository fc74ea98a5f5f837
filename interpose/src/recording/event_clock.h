// Event timestamps: CLOCK_MONOTONIC nanoseconds, read from the CPU's time-stamp counter where
// the kernel keeps CLOCK_MONOTONIC on that counter itself (clocksource `tsc`, x86-64), and from
// clock_gettime elsewhere. Every event reads the clock once; in the development VM
// clock_gettime costs 28 ns and rdtsc 13 ns.
//
// How: for its first kCalibrateNs the clock answers with clock_gettime and keeps the first
// (counter, ns) pair; a later call measures the counter's rate from it and publishes a mapping
// (base counter, base ns, ns per tick). Once a counter interval of about kReanchorNs has passed,
// one call re-anchors the mapping to clock_gettime with the rate of that interval, so the two
// clocks never drift apart by more than NTP's slew over one interval (microseconds), and the
// timestamps of different processes on one host stay comparable. A re-anchor may step the clock
// back by that much; event order comes from sequence numbers, never from time.
//
// Thread safety: any thread, also in a signal handler over a hook. Readers never wait: a read
// that meets an update in progress, or a counter behind the mapping's base (another core),
// answers with clock_gettime (async-signal-safe) instead.
#ifndef FRAGSCOPE_INTERPOSE_EVENT_CLOCK_H_
#define FRAGSCOPE_INTERPOSE_EVENT_CLOCK_H_

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace fragscope::agent {

// The published counter -> ns mapping, under a sequence lock (`version` odd while written).
struct TscMapping {
  std::atomic<uint64_t> version{0};
  std::atomic<uint64_t> base_tsc{0};
  std::atomic<uint64_t> base_ns{0};
  std::atomic<uint64_t> mult{0};         // ns per tick, 32.32 fixed point; 0: not calibrated
  std::atomic<uint64_t> reanchor_at{0};  // counter value past which a call re-anchors
  std::atomic<uint64_t> first_tsc{0};    // calibration: the first pair (0: not taken yet)
  std::atomic<uint64_t> first_ns{0};
  std::atomic<int> mode{0};  // 0 undecided, 1 counter, 2 clock_gettime only
};
extern constinit TscMapping g_tsc_mapping;

inline constexpr uint64_t kCalibrateNs = 20'000'000;    // 20 ms
inline constexpr uint64_t kReanchorNs = 1'000'000'000;  // 1 s

// clock_gettime(CLOCK_MONOTONIC) in ns.
uint64_t MonotonicNs();
// The slow path: clock_gettime, and deciding, calibrating or re-anchoring when it is time.
uint64_t EventClockSlow();
// Which source answers: true once the counter mapping is in use (for tests and status).
bool EventClockUsesTsc();

inline uint64_t EventClockNs() {
#if defined(__x86_64__)
  const TscMapping& m = g_tsc_mapping;
  // Acquire loads rather than a fence (free on x86; GCC's TSan rejects fences): a field written
  // by an update in progress makes the version re-check below see that update.
  const uint64_t version = m.version.load(std::memory_order_acquire);
  const uint64_t mult = m.mult.load(std::memory_order_acquire);
  const uint64_t base_tsc = m.base_tsc.load(std::memory_order_acquire);
  const uint64_t base_ns = m.base_ns.load(std::memory_order_acquire);
  const uint64_t reanchor_at = m.reanchor_at.load(std::memory_order_acquire);
  const uint64_t now = __rdtsc();
  if ((version & 1) == 0 && mult != 0 && now >= base_tsc && now < reanchor_at &&
      m.version.load(std::memory_order_relaxed) == version) {
    return base_ns +
           static_cast<uint64_t>((static_cast<unsigned __int128>(now - base_tsc) * mult) >> 32);
  }
#endif
  return EventClockSlow();
}

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_EVENT_CLOCK_H_
