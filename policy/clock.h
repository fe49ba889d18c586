// policy/clock.h: the production Clock (CLOCK_MONOTONIC through the vDSO:
// no system call) and the fake one that tests step by hand.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "policy/provider.h"

namespace pagefast::policy {

// CLOCK_MONOTONIC in nanoseconds: the one reading of it for everything
// outside policy/ that times itself (the Clock below for what policy/ times).
inline uint64_t monotonic_now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

class MonotonicClock final : public Clock {
 public:
  uint64_t now_ns() override { return monotonic_now_ns(); }
};

class FakeClock final : public Clock {
 public:
  // Starts well past 0 so that "long ago" comparisons behave.
  static constexpr uint64_t kStartNs = uint64_t(1000) * 1000 * 1000 * 1000;
  uint64_t now_ns() override { return now_.load(std::memory_order_relaxed); }
  void advance_ns(uint64_t ns) { now_.fetch_add(ns, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> now_{kStartNs};
};

}  // namespace pagefast::policy
