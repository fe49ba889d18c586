// policy/release_policy.h: when a pool gives idle memory back to the
// driver: the decay of the footprint policy (policy/footprint.h, stepped by
// the pagefast-trim thread) and trimming beyond release_threshold (after
// a free). It decides only; DevicePool gathers what is idle and
// LargeBlocks releases the chunks.
//
// Not locked itself: decay's state is DevicePool's footprint lock's
// (REQUIRES on each call); claim_trim is lock-free (one thread a step).
#pragma once

#include <atomic>
#include <cstdint>

#include "policy/footprint.h"

namespace pagefast::policy {

// At most this many chunks are released per decay step: the step holds
// the device lock for one chunk at a time and yields it in between.
constexpr int kDecayStepChunks = 8;
// Trimming beyond release_threshold: at most one chunk per step, steps
// this far apart, and none this soon after a growth (a loop that frees
// and re-allocates every step must not pay a release and a growth).
constexpr uint64_t kTrimIntervalNs = 10 * 1000 * 1000;
constexpr uint64_t kTrimGraceAfterGrowthNs = 100 * 1000 * 1000;

class ReleasePolicy {
 public:
  // threshold_bytes: release_threshold (kUnlimited: never trim; the
  // decay's floor is then 0).
  ReleasePolicy(uint64_t release_delay_ns, uint64_t threshold_bytes);

  // Trimming: whether the calling thread trims now (finite threshold, a
  // step since the last, not within the grace after a growth); claims the
  // step. The caller then trims if idle memory exceeds threshold_bytes().
  bool claim_trim(uint64_t now_ns, uint64_t last_growth_ns);
  uint64_t threshold_bytes() const { return threshold_bytes_; }

  // Decay. REQUIRES: the footprint lock. The bytes to release now, given
  // idle memory and the arena's growth count (a new growth since the last
  // step means the pool was short).
  uint64_t decay(uint64_t now_ns, uint64_t idle_bytes, uint64_t growths);
  // Whether idle memory outside whole free chunks is gathered this step:
  // at most once per window. Claims it.
  bool claim_drain(uint64_t now_ns);
  void note_released(uint64_t bytes) { footprint_.note_released(bytes); }
  uint64_t step_interval_ns() const { return footprint_.step_interval_ns(); }

 private:
  const uint64_t threshold_bytes_;
  Footprint footprint_;
  uint64_t growths_seen_ = 0;  // arena growths at the last decay step
  uint64_t last_drain_ns_ = 0;
  std::atomic<uint64_t> last_trim_ns_{0};
};

}  // namespace pagefast::policy
