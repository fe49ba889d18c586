// policy/device_pool_ahead.cpp: growth ahead (policy/grow_ahead.h,
// docs/POOL.md "Growth ahead"): the ask on a slow path that took arena
// memory, and the step a service thread makes.
#include "policy/device_pool.h"
#include "policy/grow_ahead.h"

namespace pagefast::policy {

Granules DevicePool::ahead_step() {
  const PoolConfig& config = settings_.config;
  // Not under a limit (a step must never take the pool over it while a
  // growth on demand runs beside it), nor for a region's pool, which ramps
  // its growth from small (docs/SLEEP.md).
  if (!ahead_wake_ || config.grow_ahead <= 0 || budget_.limit_bytes() || settings_.slot != 0) return Granules(0);
  const Granules chunk = max_granules(granules_ceil(config.chunk_bytes), Granules(1));
  const uint64_t free_bytes = large_.free_bytes();
  if (free_bytes >= chunk.bytes()) return Granules(0);  // no step could be wanted: no registry walk
  registry_.in_use_bytes();                             // notes the peak
  const Granules request = Granules(ahead_request_.load(std::memory_order_relaxed));
  return grow_ahead_step(ahead_ceiling(), large_.mapped_bytes(), free_bytes, chunk, request);
}

uint64_t DevicePool::ahead_ceiling() {
  return grow_ahead_ceiling(registry_.peak_in_use_bytes(), settings_.config.grow_ahead,
                            budget_self_ ? budget_.idle_limit() : kNoLimit);
}

void DevicePool::maybe_ask_ahead(Granules request) {
  if (!ahead_wake_) return;
  ahead_request_.store(request.count(), std::memory_order_relaxed);
  if (ahead_asked_.load(std::memory_order_relaxed)) return;
  if (ahead_step().count() == 0) return;
  if (ahead_asked_.exchange(true, std::memory_order_acq_rel)) return;
  ahead_wake_();
}

bool DevicePool::grow_ahead() {
  if (!ahead_asked_.load(std::memory_order_acquire)) return false;
  bool grew = false;
  {
    // Sleep waits for this step; while asleep it fails at once rather than
    // keep the service thread waiting.
    SleepGate::NoWait no_wait;
    if (sleep_.enter()) {
      SleepGate::Pass pass{&sleep_};
      const Granules step = ahead_step();
      if (step.count() && !large_.growth_cuts_headroom(step)) grew = large_.grow_ahead(step, ahead_ceiling());
    }
  }
  ahead_asked_.store(false, std::memory_order_release);
  return grew;
}

}  // namespace pagefast::policy
