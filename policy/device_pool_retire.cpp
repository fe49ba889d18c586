// policy/device_pool_retire.cpp: DevicePool's thread caches coming and
// going, returning memory to the centres and the arena, draining under
// pressure, trimming beyond the release threshold, and the stats.
// (device_pool.cpp lists the other parts.)
#include <sched.h>

#include <climits>
#include <new>

#include "policy/device_pool.h"

namespace pagefast::policy {
DevicePool::~DevicePool() {
  while (ThreadCache* c = all_caches_) {
    all_caches_ = c->all_next;
    delete c;
  }
}

// ---- thread caches ---------------------------------------------------------

ThreadCache* DevicePool::attach_thread() {
  std::lock_guard<std::mutex> guard(registry_mutex_);
  ThreadCache* cache = spare_caches_;
  if (cache) {
    spare_caches_ = cache->registry_next;
  } else {
    cache = new (std::nothrow) ThreadCache();
    if (!cache) return nullptr;
    cache->quarantine = quarantine_.take_batch();
    if (!cache->quarantine) {
      delete cache;
      return nullptr;
    }
    cache->all_next = all_caches_;
    all_caches_ = cache;
  }
  cache->pool = this;
  cache->registry_prev = nullptr;
  cache->registry_next = registry_;
  if (registry_) registry_->registry_prev = cache;
  registry_ = cache;
  return cache;
}

void DevicePool::detach_thread(ThreadCache* cache) {
  drain(*cache);
  fold(*cache);
  std::lock_guard<std::mutex> guard(registry_mutex_);
  // Under the registry lock, so that waiting() sees the total move whole.
  cache->lock.lock();
  folded_freed_.fetch_add(cache->freed_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  cache->freed_bytes.store(0, std::memory_order_relaxed);
  cache->lock.unlock();
  if (cache->registry_prev) cache->registry_prev->registry_next = cache->registry_next;
  else registry_ = cache->registry_next;
  if (cache->registry_next) cache->registry_next->registry_prev = cache->registry_prev;
  cache->registry_prev = nullptr;
  cache->registry_next = spare_caches_;
  spare_caches_ = cache;
}

void DevicePool::fold(ThreadCache& cache) {
  cache.lock.lock();
  const uint64_t in_use = cache.in_use_delta.load(std::memory_order_relaxed);
  const uint64_t hits = cache.hits.load(std::memory_order_relaxed);
  cache.in_use_delta.store(0, std::memory_order_relaxed);
  cache.hits.store(0, std::memory_order_relaxed);
  cache.lock.unlock();
  folded_hits_.fetch_add(hits, std::memory_order_relaxed);
  note_peak(folded_in_use_.fetch_add(in_use, std::memory_order_relaxed) + in_use);
}

void DevicePool::note_peak(uint64_t in_use) {
  // in_use_delta sums wrap; a transiently "negative" total is no peak.
  if (int64_t(in_use) < 0) return;
  uint64_t peak = peak_in_use_.load(std::memory_order_relaxed);
  while (in_use > peak && !peak_in_use_.compare_exchange_weak(peak, in_use, std::memory_order_relaxed)) {
  }
}

// ---- returning memory ----------------------------------------------------------

void DevicePool::return_small(const SmallSlot* slots, int count, int class_index) {
  constexpr int kStep = kQuarantineBatchEntries;
  Slab* released[kStep];
  for (int done = 0; done < count; done += kStep) {
    const int n = centrals_[class_index].push(slots + done, count - done < kStep ? count - done : kStep, released);
    if (n) release_slabs(released, n);
  }
}

void DevicePool::release_slabs(Slab** slabs, int count) {
  for (int i = 0; i < count; ++i) {
    Slab* slab = slabs[i];
    slab->active.store(0, std::memory_order_release);
    Block* backing = slab->backing;
    slab->backing = nullptr;
    {
      std::lock_guard<std::mutex> guard(arena_mutex_);
      arena_.give_back(backing);
    }
    centrals_[slab->class_index].give_record(slab);
  }
}

void DevicePool::give_back_large(Block* block) {
  std::lock_guard<std::mutex> guard(arena_mutex_);
  arena_.give_back(block);
}

void DevicePool::drain(ThreadCache& cache) {
  for (int c = 0; c < kClassCount; ++c) {
    SmallSlot slots[kMaxCacheBlocks];
    cache.lock.lock();
    SmallBin& bin = cache.bins[c];
    const int n = int(bin.count);
    for (int i = 0; i < n; ++i) slots[i] = bin.slots[i];
    bin.count = 0;
    owner_add(cache.cached_bytes, uint64_t(0) - uint64_t(n) * kSizeClasses[c].block_bytes);
    cache.lock.unlock();
    if (n) return_small(slots, n, c);
  }
  flush_large_cache(cache);
  share_local_quarantine(cache, false);
}

bool DevicePool::flush_large_cache(ThreadCache& cache) {
  Block* large[kLargeCacheSlots];
  cache.lock.lock();
  const int n = cache.large_count;
  for (int i = 0; i < n; ++i) large[i] = cache.large[i].block;
  cache.large_count = 0;
  owner_add(cache.cached_bytes, uint64_t(0) - cache.large_granules.bytes());
  cache.large_granules = Granules(0);
  cache.lock.unlock();
  if (n == 0) return false;
  std::lock_guard<std::mutex> guard(arena_mutex_);
  for (int i = 0; i < n; ++i) arena_.give_back(large[i]);
  return true;
}

void DevicePool::drain_all() {
  std::lock_guard<std::mutex> guard(registry_mutex_);
  for (ThreadCache* cache = registry_; cache; cache = cache->registry_next) drain(*cache);
}

void DevicePool::release_all_empty_slabs() {
  for (int c = 0; c < kClassCount; ++c) {
    Slab* slabs[kQuarantineBatchEntries];
    while (int n = centrals_[c].take_empty(slabs, kQuarantineBatchEntries)) release_slabs(slabs, n);
  }
}

void DevicePool::maybe_trim() {
  const uint64_t threshold = settings_.config.release_threshold_bytes;
  if (threshold == kUnlimited) return;
  const uint64_t now = clock_.now_ns();
  uint64_t last = last_trim_ns_.load(std::memory_order_relaxed);
  if (now - last < kTrimIntervalNs && last != 0) return;
  if (now - last_growth_ns_.load(std::memory_order_relaxed) < kTrimGraceAfterGrowthNs) return;
  // One thread trims per interval.
  if (!last_trim_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  if (idle_bytes() <= threshold) return;
  if (quarantine_.shared_blocks()) sync_and_retire(nullptr, false);
  std::lock_guard<std::mutex> guard(arena_mutex_);
  const uint64_t start = clock_.now_ns();
  arena_.release_free_chunks(1);
  release_ns_.fetch_add(clock_.now_ns() - start, std::memory_order_relaxed);
  mapped_bytes_.store(arena_.resident().bytes(), std::memory_order_relaxed);
}

uint64_t DevicePool::give_back(uint64_t bytes) {
  std::lock_guard<std::mutex> reclaim(reclaim_mutex_);
  drain_all();
  sync_if_waiting(nullptr);
  release_all_empty_slabs();
  std::lock_guard<std::mutex> guard(arena_mutex_);
  const uint64_t start = clock_.now_ns();
  const Granules before = arena_.resident();
  arena_.dissolve_free_stitches();
  if (bytes == kAllIdle) arena_.release_free_chunks(INT_MAX);
  else
    while ((before - arena_.resident()).bytes() < bytes && arena_.release_free_chunks(1) > 0) {
    }
  release_ns_.fetch_add(clock_.now_ns() - start, std::memory_order_relaxed);
  mapped_bytes_.store(arena_.resident().bytes(), std::memory_order_relaxed);
  return (before - arena_.resident()).bytes();
}

// ---- numbers ---------------------------------------------------------------------

uint64_t DevicePool::in_use_bytes() {
  uint64_t sum = folded_in_use_.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> guard(registry_mutex_);
    for (ThreadCache* c = registry_; c; c = c->registry_next) sum += c->in_use_delta.load(std::memory_order_relaxed);
  }
  note_peak(sum);
  return int64_t(sum) < 0 ? 0 : sum;
}

uint64_t DevicePool::idle_bytes() {
  const uint64_t mapped = mapped_bytes_.load(std::memory_order_relaxed);
  const uint64_t in_use = in_use_bytes();
  return mapped > in_use ? mapped - in_use : 0;
}

PoolStats DevicePool::stats() {
  // Try-locks only: stats are read at process exit too, when another
  // thread may be stopped anywhere (holding a lock). A part whose lock
  // stays busy repeats what was last read under it (last_locked_).
  auto try_lock = [](std::mutex& m) {
    for (int attempt = 0; attempt < kStatsLockAttempts; ++attempt) {
      if (m.try_lock()) return true;
      sched_yield();
    }
    return false;
  };
  PoolStats s;
  LockedFigures& last = last_locked_;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  if (try_lock(registry_mutex_)) {
    s.in_use_bytes = folded_in_use_.load(kRelaxed);
    s.hits = folded_hits_.load(kRelaxed);
    for (ThreadCache* c = registry_; c; c = c->registry_next) {
      s.in_use_bytes += c->in_use_delta.load(kRelaxed);
      s.hits += c->hits.load(kRelaxed);
      s.cached_bytes += c->cached_bytes.load(kRelaxed);
      s.quarantined_bytes += c->quarantined_bytes.load(kRelaxed);
    }
    if (int64_t(s.in_use_bytes) < 0) s.in_use_bytes = 0;
    last.in_use_bytes.store(s.in_use_bytes, kRelaxed);
    last.hits.store(s.hits, kRelaxed);
    last.cached_bytes.store(s.cached_bytes, kRelaxed);
    last.quarantined_bytes.store(s.quarantined_bytes, kRelaxed);
    registry_mutex_.unlock();
  } else {
    s.in_use_bytes = last.in_use_bytes.load(kRelaxed);
    s.hits = last.hits.load(kRelaxed);
    s.cached_bytes = last.cached_bytes.load(kRelaxed);
    s.quarantined_bytes = last.quarantined_bytes.load(kRelaxed);
  }
  note_peak(s.in_use_bytes);
  s.quarantined_bytes += quarantine_.shared_bytes();
  s.mapped_bytes = mapped_bytes_.load(kRelaxed);
  if (try_lock(arena_mutex_)) {
    s.reserved_bytes = arena_.reserved_bytes();
    s.growths = arena_.counters().growths;
    s.stitches = arena_.counters().stitches;
    s.releases = arena_.counters().releases;
    last.reserved_bytes.store(s.reserved_bytes, kRelaxed);
    last.growths.store(s.growths, kRelaxed);
    last.stitches.store(s.stitches, kRelaxed);
    last.releases.store(s.releases, kRelaxed);
    arena_mutex_.unlock();
  } else {
    s.reserved_bytes = last.reserved_bytes.load(kRelaxed);
    s.growths = last.growths.load(kRelaxed);
    s.stitches = last.stitches.load(kRelaxed);
    s.releases = last.releases.load(kRelaxed);
  }
  s.idle_bytes = s.mapped_bytes > s.in_use_bytes ? s.mapped_bytes - s.in_use_bytes : 0;
  s.peak_in_use_bytes = peak_in_use_.load(std::memory_order_relaxed);
  s.synchronizations = quarantine_.synchronizations();
  s.peak_mapped_bytes = peak_mapped_bytes_.load(std::memory_order_relaxed);
  s.headroom_releases = headroom_releases_.load(std::memory_order_relaxed);
  s.passthroughs = passthroughs_.load(std::memory_order_relaxed);
  s.ooms = ooms_.load(std::memory_order_relaxed);
  s.growth_ns = growth_ns_.load(std::memory_order_relaxed);
  s.synchronization_ns = quarantine_.synchronization_ns();
  s.release_ns = release_ns_.load(std::memory_order_relaxed);
  return s;
}

std::string DevicePool::layout() {
  std::lock_guard<std::mutex> guard(arena_mutex_);
  return arena_.layout();
}

std::string DevicePool::describe() {
  std::string text;
  {
    std::lock_guard<std::mutex> guard(arena_mutex_);
    text = arena_.describe();
  }
  for (int c = 0; c < kClassCount; ++c) {
    const uint64_t slabs = centrals_[c].slab_count();
    if (slabs)
      text += "; class " + std::to_string(kSizeClasses[c].block_bytes) + ": " + std::to_string(slabs) + " slabs, " +
              std::to_string(centrals_[c].free_blocks()) + " free blocks";
  }
  return text;
}

std::string DevicePool::check() {
  std::lock_guard<std::mutex> guard(arena_mutex_);
  std::string problem = arena_.check();
  if (!problem.empty()) return problem;
  if (mapped_bytes_.load() != arena_.resident().bytes()) return "mapped mirror differs";
  return "";
}

}  // namespace pagefast::policy
