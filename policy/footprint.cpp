// policy/footprint.cpp: the decay window (footprint.h).
#include "policy/footprint.h"

namespace pagefast::policy {

Footprint::Footprint(uint64_t release_delay_ns, uint64_t floor_bytes)
    : delay_ns_(release_delay_ns), floor_bytes_(floor_bytes) {
  for (uint64_t& m : min_idle_) m = ~uint64_t(0);
}

uint64_t Footprint::bucket_ns() const {
  const uint64_t b = delay_ns_ / kFootprintBuckets;
  return b ? b : 1;
}

uint64_t Footprint::step_interval_ns() const { return footprint_step_ns(delay_ns_); }

uint64_t Footprint::step(uint64_t now_ns, uint64_t idle_bytes, bool growth) {
  if (delay_ns_ == kNoReleaseDelay) return 0;
  const uint64_t seen = growth ? 0 : idle_bytes;
  if (delay_ns_ == 0) return seen > floor_bytes_ ? seen - floor_bytes_ : 0;
  const uint64_t bucket = now_ns / bucket_ns();
  if (!started_) {
    started_ = true;
    first_ns_ = now_ns;
    current_bucket_ = bucket;
  }
  // Slices that passed since the last step start afresh (at most all).
  for (uint64_t b = current_bucket_ + 1; b <= bucket && b <= current_bucket_ + kFootprintBuckets; ++b)
    min_idle_[b % kFootprintBuckets] = ~uint64_t(0);
  if (bucket > current_bucket_) current_bucket_ = bucket;
  uint64_t& least = min_idle_[bucket % kFootprintBuckets];
  if (seen < least) least = seen;
  // Nothing goes before a whole window has been watched.
  if (now_ns - first_ns_ < delay_ns_) return 0;
  uint64_t lowest = ~uint64_t(0);
  for (uint64_t m : min_idle_)
    if (m < lowest) lowest = m;
  if (lowest > idle_bytes) lowest = idle_bytes;
  return lowest > floor_bytes_ ? lowest - floor_bytes_ : 0;
}

void Footprint::note_released(uint64_t bytes) {
  for (uint64_t& m : min_idle_)
    if (m != ~uint64_t(0)) m = m > bytes ? m - bytes : 0;
}

}  // namespace pagefast::policy
