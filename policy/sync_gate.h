// policy/sync_gate.h: the synchronisation gate of one device's pool: when
// the quarantine (policy/quarantine.h: batches, tickets, syncs) is due for
// a sync, what a sync must cover, and where retired blocks go (the retiring
// thread's cache first, else the size-class centres or the arena). The
// adaptive allowance (policy/allowance.h) sets how much may wait for a
// sync; the fixed one is LargeLimits::batch_bytes.
//
// Locks: the allowance lock (sampling the rate) is taken before the
// registry lock (the rate reads every cache's freed total). A sync holds
// no lock of the pool's; retiring takes the cache's lock, then the
// size-class and device locks after releasing it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "policy/allowance.h"
#include "policy/large_blocks.h"
#include "policy/pool_settings.h"
#include "policy/quarantine.h"
#include "policy/small_blocks.h"
#include "policy/thread_registry.h"

namespace pagefast::policy {

// A sync is due once the quarantine holds this many blocks ...
constexpr uint64_t kRetireBlocks = kQuarantineBatchEntries;
// ... or LargeLimits::batch_bytes, or 1/kRetireMappedFraction of the mapped
// memory, whichever is more: large blocks are retired in batches too.
constexpr uint64_t kRetireMappedFraction = 16;
// What one thread keeps to itself for large blocks. Its quarantine batch is
// due for a sync once it holds batch_bytes (so large blocks are retired in
// batches of about that size, one sync each), and its cache keeps retired
// blocks of up to cache_block each and cache_total together, so that the
// batch comes back into the cache whole. A sync costs about 1.3 us on the
// H200 (docs/BENCHMARKS.md): with 256 MiB a 64 MiB loop paid it on every
// 4th pair, with 1 GiB on every 16th. Scaled with the device (1/128 of its
// memory, or of the limit), between 256 MiB and 1 GiB, so that a small card
// is not hoarded; all of it comes back to any thread under pressure.
struct LargeLimits {
  uint64_t batch_bytes;
  Granules cache_block;
  Granules cache_total;
};
constexpr uint64_t kLargeLimitMinBytes = 256 * kMiB;
constexpr uint64_t kLargeLimitMaxBytes = 1 * kGiB;
constexpr uint64_t kLargeLimitDeviceFraction = 128;
LargeLimits large_limits(uint64_t device_total_bytes, uint64_t limit_bytes);
// The adaptive allowance (policy/allowance.h) replaces batch_bytes, between
// these bounds: at least this much (or batch_bytes if less) ...
constexpr uint64_t kAllowanceMinBytes = 64 * kMiB;
// ... and at most 1/this of the device (or the limit), or batch_bytes if
// more: a loop of 1 GiB blocks then syncs every few pairs, not every pair.
constexpr uint64_t kAllowanceDeviceFraction = 32;
Allowance make_allowance(uint64_t slack_ns, uint64_t device_total_bytes, uint64_t limit_bytes);

class SyncGate {
 public:
  SyncGate(Quarantine& quarantine, Clock& clock, ThreadRegistry& registry, SmallBlocks& small, LargeBlocks& large,
           const PoolSettings& settings);
  SyncGate(const SyncGate&) = delete;
  SyncGate& operator=(const SyncGate&) = delete;

  const LargeLimits& limits() const { return limits_; }
  bool adaptive() const { return allowance_.adaptive(); }
  // The free path seals its batch at twice this (lock-free).
  uint64_t seal_bytes() const { return seal_bytes_.load(std::memory_order_relaxed); }

  // Whether the cache's batch or the shared quarantine is due for a sync
  // for a request of `request` granules (0: small).
  bool due(ThreadCache& cache, Granules request);
  // Before growing by `granules`: whether the memory waiting in every
  // thread's quarantine and cache would cover the request and is over the
  // allowance, or over idle_share of what the pool holds, so that it is
  // reclaimed instead (DevicePool::obtain).
  bool reclaim_wanted(Granules granules);

  // Syncs and retires the shared quarantine and the cache's own. With
  // into_cache, retired blocks refill the cache first (the caller pops
  // next); without, all go central (the caller searches the arena next).
  bool sync_and_retire(ThreadCache* cache, bool into_cache);
  // sync_and_retire(cache, false) where a block of the pool waits in the
  // quarantine (after a drain); true, and no synchronization, where none does.
  bool sync_if_waiting(ThreadCache* cache);
  // The out-of-memory path's sync, made whether or not a block of the pool
  // waits: the answer must not depend on whether another sync ran before.
  bool sync_before_refusing(ThreadCache* cache);
  // The cache's entries that finished syncs already cover.
  void retire_local(ThreadCache& cache, bool into_cache);

 private:
  // The allowance now, its rate sampled at most once per
  // kAllowanceWindowNs. Slow paths only (it walks the registry).
  uint64_t allowance_now();
  // What may wait for a sync when `request` is what the caller needs: the
  // rate's allowance, at most max(batch_bytes, 4 * request).
  uint64_t allowance_for(Granules request);
  void retire_covered(ThreadCache* cache, bool into_cache);
  // At most Quarantine::kMaxRetired entries.
  void retire_entries(ThreadCache* route, const QuarantineEntry* entries, int count);
  // retire_entries' runs of entries from entries[*at] (*at moved past the
  // run): large blocks into the cache's large entries, evicting the
  // oldest; a slab's small blocks into the cache's bin. What the cache
  // does not keep goes to `out`; *cached gains what it keeps, less what it
  // evicts.
  void cache_large_run(ThreadCache& cache, const QuarantineEntry* entries, int count, int* at, Block** out,
                       int* out_count, uint64_t* cached);
  void bin_small_run(ThreadCache* cache, const QuarantineEntry* entries, int count, int* at, SmallEntry* out,
                     int* out_count, uint64_t* cached);
  // cache_large_run's eviction of the oldest blocks, until `g` more fit;
  // returns their bytes.
  uint64_t evict_large(ThreadCache& cache, Granules g, Block** evicted, int* evicted_count);

  Quarantine& quarantine_;
  Clock& clock_;
  ThreadRegistry& registry_;
  SmallBlocks& small_;
  LargeBlocks& large_;
  const uint64_t idle_share_;
  const uint64_t chunk_bytes_;
  const LargeLimits limits_;

  // allowance_mutex_ guards the object, the atomics mirror it for
  // lock-free reads.
  std::mutex allowance_mutex_;
  Allowance allowance_;
  std::atomic<uint64_t> allowance_bytes_;
  std::atomic<uint64_t> seal_bytes_;
  std::atomic<uint64_t> allowance_sampled_ns_{0};
};

}  // namespace pagefast::policy
