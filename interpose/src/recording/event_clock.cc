#include "recording/event_clock.h"

#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

namespace fragscope::agent {

constinit TscMapping g_tsc_mapping;

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

#if defined(__x86_64__)
namespace {

// The counter is trusted only where the kernel trusts it for CLOCK_MONOTONIC: it then checked
// that the counter is invariant and synchronized across CPUs, and it switches away (to another
// clocksource) when that stops holding, which a new process sees here.
int DecideMode() {
  int mode = 2;
  const int saved_errno = errno;
  int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char text[16] = {};
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n == 4 && memcmp(text, "tsc\n", 4) == 0) mode = 1;
  }
  errno = saved_errno;
  int expected = 0;
  g_tsc_mapping.mode.compare_exchange_strong(expected, mode, std::memory_order_acq_rel);
  return g_tsc_mapping.mode.load(std::memory_order_acquire);
}

// A (counter, ns) pair read together: the counter at the middle of the clock_gettime call.
// A thread preempted inside would pair a time with a counter milliseconds away (a mapping off by
// that much, which a test under load saw): such pairs are read again, and after a few tries the
// caller gives up until a later call.
bool ReadPair(uint64_t* tsc, uint64_t* ns) {
  constexpr uint64_t kMaxPairTicks = 4096;  // ~2 us at 2 GHz; clock_gettime takes ~70 ticks
  for (int attempt = 0; attempt < 8; ++attempt) {
    const uint64_t before = __rdtsc();
    *ns = MonotonicNs();
    const uint64_t after = __rdtsc();
    if (after >= before && after - before <= kMaxPairTicks) {
      *tsc = before + (after - before) / 2;
      return true;
    }
  }
  return false;
}

// Publishes a mapping anchored at (tsc, ns) with `mult` ns per tick (32.32), valid for
// `interval_ns`.
void Publish(uint64_t version, uint64_t tsc, uint64_t ns, uint64_t mult, uint64_t interval_ns) {
  TscMapping& m = g_tsc_mapping;
  // Release stores (no fence, see event_clock.h): a reader that sees one of them also sees the
  // odd version stored before it, and retries. The caller's acq_rel compare-exchange to the odd
  // version keeps these stores after it.
  m.base_tsc.store(tsc, std::memory_order_release);
  m.base_ns.store(ns, std::memory_order_release);
  m.mult.store(mult, std::memory_order_release);
  // Ticks in the interval: ns << 32 / mult.
  const uint64_t ticks =
      static_cast<uint64_t>((static_cast<unsigned __int128>(interval_ns) << 32) / mult);
  m.reanchor_at.store(tsc + ticks, std::memory_order_release);
  m.version.store(version + 2, std::memory_order_release);
}

// ns per tick (32.32) between two pairs; 0 if they are unusable.
uint64_t Rate(uint64_t tsc0, uint64_t ns0, uint64_t tsc1, uint64_t ns1) {
  if (tsc1 <= tsc0 || ns1 <= ns0) return 0;
  return static_cast<uint64_t>((static_cast<unsigned __int128>(ns1 - ns0) << 32) / (tsc1 - tsc0));
}

void Update(uint64_t now_ns) {
  TscMapping& m = g_tsc_mapping;
  // Cheap checks first, without the lock: most calls here have nothing to do. (`now_ns` may be
  // older than a first pair another thread just took: no wrap-around.)
  {
    const bool calibrated = m.mult.load(std::memory_order_relaxed) != 0;
    const uint64_t first_ns = m.first_ns.load(std::memory_order_relaxed);
    if (!calibrated && first_ns != 0 && (now_ns < first_ns || now_ns - first_ns < kCalibrateNs)) {
      return;
    }
    // Calibrated: only a counter past the interval re-anchors (this call may be here because an
    // update was in progress, or because this core's counter read a little behind the base).
    if (calibrated && __rdtsc() < m.reanchor_at.load(std::memory_order_relaxed)) return;
  }
  uint64_t version = m.version.load(std::memory_order_relaxed);
  if ((version & 1) != 0 ||
      !m.version.compare_exchange_strong(version, version + 1, std::memory_order_acq_rel)) {
    return;  // another thread is at it
  }
  // Holding the odd version: nobody else writes now. What was read before the lock may be stale
  // (another thread may have calibrated or re-anchored meanwhile), so read it again.
  auto release = [&] { m.version.store(version, std::memory_order_release); };
  const bool calibrated = m.mult.load(std::memory_order_relaxed) != 0;
  if (calibrated && __rdtsc() < m.reanchor_at.load(std::memory_order_relaxed)) return release();
  uint64_t tsc = 0, ns = 0;
  if (!ReadPair(&tsc, &ns)) return release();  // nothing published: back to even
  if (!calibrated) {
    const uint64_t first_ns = m.first_ns.load(std::memory_order_relaxed);
    if (first_ns == 0) {
      m.first_tsc.store(tsc, std::memory_order_relaxed);
      m.first_ns.store(ns, std::memory_order_relaxed);
      return release();
    }
    // The rate needs the whole calibration span: over microseconds the pairs' own error
    // (~1 us each) would make it wrong by percents.
    if (ns < first_ns || ns - first_ns < kCalibrateNs) return release();
    const uint64_t mult = Rate(m.first_tsc.load(std::memory_order_relaxed), first_ns, tsc, ns);
    if (mult == 0) {
      m.mode.store(2, std::memory_order_release);  // a counter that does not advance
      return release();
    }
    // The rate of a 20 ms span is good to a few parts in 1e5 (two pairs each within ~1 us):
    // the first mapping serves a fifth of an interval, and the next one has the rate of that.
    Publish(version, tsc, ns, mult, kReanchorNs / 5);
    return;
  }
  // Re-anchor to clock_gettime, with the rate seen over the interval that just ended.
  uint64_t mult = Rate(m.base_tsc.load(std::memory_order_relaxed),
                       m.base_ns.load(std::memory_order_relaxed), tsc, ns);
  if (mult == 0) mult = m.mult.load(std::memory_order_relaxed);
  Publish(version, tsc, ns, mult, kReanchorNs);
}

}  // namespace
#endif

uint64_t EventClockSlow() {
  const uint64_t ns = MonotonicNs();
#if defined(__x86_64__)
  int mode = g_tsc_mapping.mode.load(std::memory_order_acquire);
  if (mode == 0) mode = DecideMode();
  if (mode == 1) Update(ns);
#endif
  return ns;
}

bool EventClockUsesTsc() {
  return g_tsc_mapping.mode.load(std::memory_order_acquire) == 1 &&
         g_tsc_mapping.mult.load(std::memory_order_acquire) != 0;
}

}  // namespace fragscope::agent
