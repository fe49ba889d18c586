// policy/allowance.h: how much freed memory a pool lets wait in its
// quarantine and thread caches before it synchronises to reuse it instead
// of growing (docs/POOL.md "Footprint": the slack).
//
// Freed blocks can be reused only after a sync proves the device is done
// with them (policy/quarantine.h). A sync stalls the program's queue of
// device work, so the pool batches them: it grows rather than syncs while
// the freed memory waiting is within the allowance. A fixed allowance was
// either too small for a loop that frees fast (a sync every few pairs) or
// far too large for one that frees slowly (ResNet-18 with PyTorch's caching
// off held 2.2x its peak, most of it waiting for a sync that was not due).
//
// Here the allowance follows the measured free rate: about what the
// program frees in `slack` (PAGEFAST_CONF slack), so that the syncs made
// instead of growing come at most about once per slack, and the memory held
// beyond the program's own is about its free rate times the slack. Bounded
// below (a program that frees little still batches its syncs) and above
// (the fixed allowance's device share: a loop of huge blocks syncs every
// few pairs rather than holding ever more).
//
// Pure: the caller samples the freed-bytes total with its clock on slow
// paths, at most once per kAllowanceWindowNs.
#pragma once

#include <cstdint>

namespace pagefast::policy {

// The rate is measured over windows of at least this long ...
constexpr uint64_t kAllowanceWindowNs = 1000ull * 1000;
// ... and smoothed with this time constant: a training step's bursts of
// frees (the backward pass) and its quiet parts average out.
constexpr uint64_t kAllowanceSmoothingNs = 50ull * 1000 * 1000;
// slack's default: at most about 100 syncs a second made instead of
// growing. On the H200 a sync in a GPU-bound training step cost about
// 0.2-0.3 ms of step time (the queue drains, then refills): 2 ms cost
// ResNet-18 6-11% of its steps/s, 1 ms 10% for 18% less memory, with or
// without syncing ahead (docs/BENCHMARKS.md "Footprint", "`sync_ahead`").
constexpr uint64_t kDefaultSlackNs = 10ull * 1000 * 1000;
// slack:off: the allowance stays at its maximum (the fixed allowance).
constexpr uint64_t kNoSlack = ~uint64_t(0);

class Allowance {
 public:
  // initial_bytes: the allowance until a rate is known (the first window).
  Allowance(uint64_t slack_ns, uint64_t min_bytes, uint64_t max_bytes, uint64_t initial_bytes);

  // freed_total: bytes the program has freed so far (a running total).
  // Returns the allowance in bytes. Calls closer than kAllowanceWindowNs
  // change nothing.
  uint64_t update(uint64_t now_ns, uint64_t freed_total);
  uint64_t bytes() const { return bytes_; }
  // Bytes per second, smoothed.
  double free_rate() const { return rate_; }
  bool adaptive() const { return slack_ns_ != kNoSlack; }

 private:
  const uint64_t slack_ns_;
  const uint64_t min_bytes_;
  const uint64_t max_bytes_;
  uint64_t bytes_;
  double rate_ = 0;
  bool started_ = false;
  bool measured_ = false;
  uint64_t last_ns_ = 0;
  uint64_t last_freed_ = 0;
};

}  // namespace pagefast::policy
