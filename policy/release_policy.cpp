// policy/release_policy.cpp: ReleasePolicy (release_policy.h).
#include "policy/release_policy.h"

#include "policy/config.h"

namespace pagefast::policy {

ReleasePolicy::ReleasePolicy(uint64_t release_delay_ns, uint64_t threshold_bytes)
    : threshold_bytes_(threshold_bytes),
      footprint_(release_delay_ns, threshold_bytes == kUnlimited ? 0 : threshold_bytes) {}

bool ReleasePolicy::claim_trim(uint64_t now, uint64_t last_growth_ns) {
  if (threshold_bytes_ == kUnlimited) return false;
  uint64_t last = last_trim_ns_.load(std::memory_order_relaxed);
  if (now - last < kTrimIntervalNs && last != 0) return false;
  if (now - last_growth_ns < kTrimGraceAfterGrowthNs) return false;
  // One thread trims per interval.
  return last_trim_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed);
}

uint64_t ReleasePolicy::decay(uint64_t now, uint64_t idle_bytes, uint64_t growths) {
  const bool grew = growths != growths_seen_;
  growths_seen_ = growths;
  return footprint_.step(now, idle_bytes, grew);
}

bool ReleasePolicy::claim_drain(uint64_t now) {
  if (now - last_drain_ns_ < footprint_.release_delay_ns()) return false;
  last_drain_ns_ = now;
  return true;
}

}  // namespace pagefast::policy
