// policy/footprint.h: how much idle memory a pool gives back to the driver
// over time (TCMalloc Temeraire's subrelease, docs/POOL.md "Footprint").
//
// Idle memory (mapped, not in use: free runs, thread caches, quarantine)
// that stayed idle for a whole `release_delay` is not part of the working
// set: it decays back to the driver. The policy keeps the lowest idle
// figure seen in each of kFootprintBuckets slices of the window; what may
// be released is the lowest over the window, less the floor
// (release_threshold: idle memory at or below it is never decayed). A
// growth means the pool was short of idle memory at that moment, so a step
// that saw one records idle 0 for its slice. Released memory lowers every
// slice by as much, so it is not counted twice.
//
// Pure: no clock, no lock, no provider. The caller samples (from the
// pagefast-trim thread in production, by hand over a fake clock in tests)
// and releases what step() answers, in bounded amounts.
#pragma once

#include <cstdint>

namespace pagefast::policy {

constexpr int kFootprintBuckets = 8;
// Steps come this often: an eighth of the window's slice, within bounds.
constexpr uint64_t kFootprintMinStepNs = 10ull * 1000 * 1000;
constexpr uint64_t kFootprintMaxStepNs = 1000ull * 1000 * 1000;
// release_delay's default (PAGEFAST_CONF release_delay): long enough that a
// training step's memory, reused every step, never decays; short enough
// that an idle job gives memory back before anyone notices.
constexpr uint64_t kDefaultReleaseDelayNs = 5ull * 1000 * 1000 * 1000;
// release_delay:off
constexpr uint64_t kNoReleaseDelay = ~uint64_t(0);

// How often the pagefast-trim thread steps for a release_delay: a 64th of
// it (an eighth of a window's slice), within the bounds above. The pools'
// decay and the own-VMM cache's use the same.
constexpr uint64_t footprint_step_ns(uint64_t release_delay_ns) {
  const uint64_t s = release_delay_ns / kFootprintBuckets / 8;
  return s < kFootprintMinStepNs ? kFootprintMinStepNs : s > kFootprintMaxStepNs ? kFootprintMaxStepNs : s;
}

class Footprint {
 public:
  // release_delay_ns 0: everything above the floor goes at the next step.
  Footprint(uint64_t release_delay_ns, uint64_t floor_bytes);

  // One sample. growth: the pool grew since the previous step. Returns the
  // bytes that may be released now (0 when none), never more than
  // idle_bytes - floor.
  uint64_t step(uint64_t now_ns, uint64_t idle_bytes, bool growth);
  // The caller released this much: the window forgets it.
  void note_released(uint64_t bytes);

  // How often step() wants to be called.
  uint64_t step_interval_ns() const;
  uint64_t release_delay_ns() const { return delay_ns_; }

 private:
  uint64_t bucket_ns() const;

  const uint64_t delay_ns_;
  const uint64_t floor_bytes_;
  uint64_t min_idle_[kFootprintBuckets];
  uint64_t current_bucket_ = 0;  // now / bucket_ns() of the newest slice
  bool started_ = false;
  uint64_t first_ns_ = 0;  // the first sample: no release before a whole window
};

}  // namespace pagefast::policy
