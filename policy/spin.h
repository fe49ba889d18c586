// policy/spin.h: the spin-wait hint of every busy-wait in pagefast (the
// thread caches' owner lock, the quarantine's sync waiters, the trace
// recorder's full-ring wait), and the patient try-lock of the figures that
// must never wait long (stats, the memory report).
#pragma once

#include <sched.h>

#include <mutex>

namespace pagefast::policy {

// The figures give up on a busy lock after this many tries.
constexpr int kStatsLockAttempts = 100;
// try_lock, yielding between tries, kStatsLockAttempts times.
inline bool try_lock_patiently(std::mutex& mutex) {
  for (int attempt = 0; attempt < kStatsLockAttempts; ++attempt) {
    if (mutex.try_lock()) return true;
    sched_yield();
  }
  return false;
}

// A spin-wait hint to the processor (x86 pause, Arm yield).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace pagefast::policy
