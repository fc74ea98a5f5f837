// The agent's event clock: CLOCK_MONOTONIC read from the time-stamp counter where the kernel
// keeps CLOCK_MONOTONIC on it. Whatever source answers, a reading must fall between two
// clock_gettime calls around it (with a little slack for the counter mapping), before and after
// calibration and across re-anchors, from many threads at once.
#include "recording/event_clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace fragscope::agent {
namespace {

// The counter mapping may differ from clock_gettime by NTP's slew over one re-anchor interval
// and by the rounding of its rate: microseconds. 200 us leaves room for a loaded machine.
constexpr uint64_t kSlackNs = 200'000;

// Checks one reading against clock_gettime on both sides; returns false on a miss.
bool Bracketed(uint64_t* worst_ns) {
  const uint64_t before = MonotonicNs();
  const uint64_t t = EventClockNs();
  const uint64_t after = MonotonicNs();
  if (t + kSlackNs < before || t > after + kSlackNs) {
    *worst_ns = t < before ? before - t : t - after;
    return false;
  }
  return true;
}

bool KernelClockIsTsc() {
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  return (in >> name) && name == "tsc";
}

TEST(EventClockTest, AgreesWithClockGettimeThroughCalibrationAndReanchors) {
  // 1.3 s: the calibration (20 ms) and at least one re-anchor (1 s) happen inside.
  const uint64_t end = MonotonicNs() + kReanchorNs + 300'000'000;
  uint64_t readings = 0, misses = 0, worst = 0;
  while (MonotonicNs() < end) {
    for (int i = 0; i < 1000; ++i) {
      ++readings;
      if (!Bracketed(&worst)) ++misses;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(misses, 0u) << "of " << readings << " readings; worst off by " << worst << " ns";
#if defined(__x86_64__)
  // Where the kernel's clock runs on the counter, so does ours once calibrated.
  EXPECT_EQ(EventClockUsesTsc(), KernelClockIsTsc());
#else
  EXPECT_FALSE(EventClockUsesTsc());
#endif
}

TEST(EventClockTest, ManyThreadsReadWhileOneReanchors) {
  std::atomic<uint64_t> misses{0}, readings{0};
  const uint64_t end = MonotonicNs() + kReanchorNs + 200'000'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      uint64_t worst = 0, mine = 0, missed = 0;
      while (MonotonicNs() < end) {
        ++mine;
        if (!Bracketed(&worst)) ++missed;
        if ((mine & 1023) == 0) std::this_thread::yield();
      }
      readings += mine;
      misses += missed;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_GT(readings.load(), 0u);
  EXPECT_EQ(misses.load(), 0u) << "of " << readings.load() << " readings";
}

// Within one thread, between re-anchors, the counter mapping never runs backwards.
TEST(EventClockTest, NonDecreasingWithinAThreadBetweenAnchors) {
  uint64_t previous = EventClockNs();
  uint64_t backwards = 0, largest_step_back = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const uint64_t t = EventClockNs();
    if (t < previous) {
      ++backwards;
      largest_step_back = std::max(largest_step_back, previous - t);
    }
    previous = t;
  }
  // A re-anchor may step back by the drift of one interval (microseconds), never more.
  EXPECT_LE(largest_step_back, kSlackNs) << backwards << " steps back";
}

}  // namespace
}  // namespace fragscope::agent
