// policy/device_pool_retire.cpp: DevicePool's thread caches coming and
// going, batches handed to the quarantine, draining under pressure,
// trimming beyond the release threshold and giving idle memory back
// (for the device budget's pool share), and the in-use and idle figures.
#include "policy/device_pool.h"

namespace pagefast::policy {

DevicePool::~DevicePool() = default;

// ---- thread caches ---------------------------------------------------------

ThreadCache* DevicePool::attach_own_thread() { return registry_.attach(true); }
ThreadCache* DevicePool::attach_thread() { return registry_.attach(false); }

void DevicePool::detach_thread(ThreadCache* cache) {
  drain(*cache);
  registry_.fold(*cache);
  registry_.detach(cache);
}

void DevicePool::seal_local_quarantine(ThreadCache& cache) {
  // With a finite release threshold, memory should flow back to the arena
  // (where it can be trimmed) rather than wait for this thread.
  if (settings_.config.release_threshold_bytes != kUnlimited) {
    share_local_quarantine(cache, true);
  } else if (quarantine_.seal(cache) == Quarantine::Handoff::NoBatch) {
    // No host memory for a batch: make room.
    gate_.sync_and_retire(&cache, true);
  }
  // Called with no lock of this pool held (free()): the device's idle
  // memory beyond the budget's bound goes back now.
  if (budget_self_) budget_.give_back_idle(clock_);
}

void DevicePool::share_local_quarantine(ThreadCache& cache, bool may_trim) {
  const Quarantine::Handoff handoff = quarantine_.share(cache);
  if (handoff == Quarantine::Handoff::NoBatch) gate_.sync_and_retire(&cache, false);
  else if (may_trim && handoff == Quarantine::Handoff::Done) maybe_trim();
}

// ---- returning memory ----------------------------------------------------------

void DevicePool::drain(ThreadCache& cache) {
  small_.drain_bins(cache);
  flush_large_cache(cache);
  share_local_quarantine(cache, false);
}

bool DevicePool::flush_large_cache(ThreadCache& cache) {
  Block* large[kLargeCacheEntries];
  cache.lock.lock();
  const int n = cache.large_count;
  for (int i = 0; i < n; ++i) large[i] = cache.large[i].block;
  cache.large_count = 0;
  owner_add(cache.cached_bytes, uint64_t(0) - cache.large_granules.bytes());
  cache.large_granules = Granules(0);
  cache.lock.unlock();
  if (n == 0) return false;
  large_.put_back(large, n);
  return true;
}

void DevicePool::drain_all() {
  registry_.for_each([this](ThreadCache& cache) { drain(cache); });
}

void DevicePool::maybe_trim() {
  if (!release_.claim_trim(clock_.now_ns(), large_.last_growth_ns())) return;
  if (idle_bytes() <= release_.threshold_bytes()) return;
  if (quarantine_.shared_blocks()) gate_.sync_and_retire(nullptr, false);
  large_.trim_chunk();
}

uint64_t DevicePool::release(uint64_t bytes) {
  std::lock_guard<std::mutex> reclaim(reclaim_mutex_);
  drain_all();
  gate_.sync_if_waiting(nullptr);
  small_.release_all_empty();
  return large_.release_idle(bytes);
}

// ---- numbers ---------------------------------------------------------------------

uint64_t DevicePool::in_use_bytes() { return registry_.in_use_bytes(); }

uint64_t DevicePool::idle_bytes() {
  const uint64_t mapped = large_.mapped_bytes();
  const uint64_t in_use = in_use_bytes();
  return mapped > in_use ? mapped - in_use : 0;
}

}  // namespace pagefast::policy
