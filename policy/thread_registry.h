// policy/thread_registry.h: the thread caches of one device's pool (who is
// attached, the records kept for reuse) and the counters folded out of
// them: in use, hits and bytes freed of caches that left or passed a slow
// path, and the highest in-use total seen.
//
// Lock: the registry lock, taken before a cache's own lock. A walk of the
// caches (for_each, waiting, the stats) holds it throughout, so that a
// cache leaving moves its totals into the folded ones whole.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "policy/pool_stats.h"
#include "policy/quarantine.h"
#include "policy/spin.h"
#include "policy/thread_cache.h"

namespace pagefast::policy {

class ThreadRegistry {
 public:
  // `quarantine` gives each new cache its first batch; `owner` is the
  // pool the caches serve (ThreadCache::pool).
  ThreadRegistry(Quarantine& quarantine, DevicePool* owner) : quarantine_(quarantine), owner_(owner) {}
  // Frees every cache record; no cache may be in use.
  ~ThreadRegistry();
  ThreadRegistry(const ThreadRegistry&) = delete;
  ThreadRegistry& operator=(const ThreadRegistry&) = delete;

  // NULL on host out-of-memory. `own`: the calling thread's own cache, the
  // only one to take its quick sections (owner_lock.h); else any thread
  // may use it, one at a time under a lock of the caller's.
  ThreadCache* attach(bool own);
  // REQUIRES: the cache drained and folded. Its freed total joins the
  // folded one and the record is kept for the next attach.
  void detach(ThreadCache* cache);
  // Moves the cache's in-use delta and hits into the folded counters.
  void fold(ThreadCache& cache);
  void note_peak(uint64_t in_use);
  // In use over every cache and the folded counter (0 while the sum is
  // transiently "negative"); notes the peak.
  uint64_t in_use_bytes();
  uint64_t peak_in_use_bytes() const { return peak_in_use_.load(std::memory_order_relaxed); }
  // Bytes freed so far (a running total) and bytes waiting for a sync or
  // held in thread caches, the shared quarantine included.
  void waiting(uint64_t* freed_total, uint64_t* reclaimable);

  // visit(cache) for every attached cache, under the registry lock.
  template <typename Visit>
  void for_each(Visit visit) {
    std::lock_guard<std::mutex> guard(mutex_);
    for (ThreadCache* cache = registry_; cache; cache = cache->registry_next) visit(*cache);
  }

  // The stats' thread figures (in use, hits, cached, quarantined in
  // caches), without waiting long: a busy lock repeats the last figures
  // read under it, so that a figure never reads 0 meanwhile.
  void read_figures(PoolStats* stats);
  // Adds the blocks in every cache's bins per class; false when the
  // registry or a cache was busy (those are left out). Try-locks only.
  bool count_bins(uint64_t in_bins[kClassCount]);

 private:
  Quarantine& quarantine_;
  DevicePool* const owner_;
  std::mutex mutex_;
  ThreadCache* registry_ = nullptr;
  ThreadCache* spare_caches_ = nullptr;
  ThreadCache* all_caches_ = nullptr;

  std::atomic<uint64_t> folded_in_use_{0};
  std::atomic<uint64_t> folded_hits_{0};
  std::atomic<uint64_t> folded_freed_{0};
  std::atomic<uint64_t> peak_in_use_{0};
  struct LastFigures {
    std::atomic<uint64_t> in_use_bytes{0}, hits{0}, cached_bytes{0}, quarantined_bytes{0};
  };
  LastFigures last_;
};

}  // namespace pagefast::policy
