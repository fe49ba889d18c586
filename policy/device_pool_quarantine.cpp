// policy/device_pool_quarantine.cpp: DevicePool's side of the quarantine
// (policy/quarantine.h holds the batches, the shared list and the syncs):
// when a sync is due, what a sync must cover, and where retired blocks go
// (the retiring thread's cache, the size-class centres, the arena).
#include "policy/device_pool.h"

namespace pagefast::policy {

bool DevicePool::quarantine_due(ThreadCache& cache, Granules request) {
  // A sealed batch is a batch: retiring it now costs one sync for all of it.
  const Quarantine::Load local = quarantine_.local_load(cache);
  const uint64_t allowance = allowance_for(request);
  if (local.sealed || local.bytes >= allowance) return true;
  const uint64_t blocks = local.blocks + quarantine_.shared_blocks();
  const uint64_t bytes = local.bytes + quarantine_.shared_bytes();
  uint64_t due_bytes = mapped_bytes_.load(std::memory_order_relaxed) / kRetireMappedFraction;
  if (due_bytes < allowance) due_bytes = allowance;
  return blocks >= kRetireBlocks || bytes >= due_bytes;
}

void DevicePool::seal_local_quarantine(ThreadCache& cache) {
  // With a finite release threshold, memory should flow back to the arena
  // (where it can be trimmed) rather than wait for this thread.
  if (settings_.config.release_threshold_bytes != kUnlimited) {
    share_local_quarantine(cache, true);
    return;
  }
  // No host memory for a batch: make room.
  if (quarantine_.seal(cache) == Quarantine::Handoff::NoBatch) sync_and_retire(&cache, true);
}

void DevicePool::share_local_quarantine(ThreadCache& cache, bool may_trim) {
  const Quarantine::Handoff handoff = quarantine_.share(cache);
  if (handoff == Quarantine::Handoff::NoBatch) sync_and_retire(&cache, false);
  else if (may_trim && handoff == Quarantine::Handoff::Done) maybe_trim();
}

bool DevicePool::sync_and_retire(ThreadCache* cache, bool into_cache) {
  if (!quarantine_.synchronize_covering(quarantine_.newest_stamp(cache))) return false;
  retire_covered(cache, into_cache);
  return true;
}

bool DevicePool::sync_if_waiting(ThreadCache* cache) {
  if (quarantine_.holds_any(cache)) return sync_and_retire(cache, false);
  return true;
}

bool DevicePool::sync_before_refusing(ThreadCache* cache) {
  // Any synchronization lets the driver's stream-ordered pools give back
  // what the program freed into them (cuMemFreeAsync), and the pool
  // synchronizes at moments no program can predict (a batch of frees due,
  // the trim thread). An out-of-memory answer would then depend on whether
  // one happened to run before the request. So before refusing, the pool
  // always synchronizes (never in a stream capture, where the provider
  // refuses), and the answer is the one the device gives after that, every
  // run (docs/POOL.md "Out of memory").
  if (!quarantine_.synchronize_covering(quarantine_.stamp())) return false;
  retire_covered(cache, false);
  return true;
}

void DevicePool::retire_covered(ThreadCache* cache, bool into_cache) {
  if (cache) retire_local(*cache, into_cache);
  ThreadCache* route = into_cache ? cache : nullptr;
  quarantine_.retire_shared([&](const ThreadCache* owner, const QuarantineEntry* entries, int count) {
    retire_entries(route && owner == route ? route : nullptr, entries, count);
  });
}

void DevicePool::retire_local(ThreadCache& cache, bool into_cache) {
  QuarantineEntry retired[Quarantine::kMaxRetired];
  const int n = quarantine_.take_retired(cache, retired);
  if (n) retire_entries(into_cache ? &cache : nullptr, retired, n);
}

void DevicePool::retire_entries(ThreadCache* cache, const QuarantineEntry* entries, int count) {
  // `cache` is the route: the retiring thread's own cache first (it freed
  // these, it is likely to ask for the same sizes again); NULL, or
  // overflow, goes central. The oldest cached large blocks make way for
  // newly retired ones: the cache follows what the thread uses now.
  constexpr int kMaxEntries = Quarantine::kMaxRetired;
  SmallSlot small[kMaxEntries];
  int small_count = 0;
  Block* large[kMaxEntries + kLargeCacheSlots];
  int large_count = 0;
  if (cache) cache->lock.lock();
  for (int i = 0; i < count; ++i) {
    const QuarantineEntry& e = entries[i];
    if (e.span->kind == SpanKind::Slab) {
      Slab* slab = static_cast<Slab*>(e.span);
      const SmallSlot slot{slab, uint32_t((e.addr - slab->base_addr()) / slab->block_bytes)};
      if (cache) {
        SmallBin& bin = cache->bins[slab->class_index];
        if (bin.count < kSizeClasses[slab->class_index].cache_blocks) {
          bin.slots[bin.count++] = slot;
          owner_add(cache->cached_bytes, slab->block_bytes);
          continue;
        }
      }
      small[small_count++] = slot;
      continue;
    }
    Block* block = static_cast<Block*>(e.span);
    const Granules g = block->granules();
    if (cache && g <= large_.cache_block) {
      while (cache->large_count &&
             (cache->large_count == kLargeCacheSlots || cache->large_granules + g > large_.cache_total)) {
        const LargeSlot oldest = cache->large[0];
        for (int k = 1; k < cache->large_count; ++k) cache->large[k - 1] = cache->large[k];
        --cache->large_count;
        cache->large_granules -= oldest.granules;
        owner_add(cache->cached_bytes, uint64_t(0) - oldest.granules.bytes());
        large[large_count++] = oldest.block;
      }
      block->store_state(BlockState::Cached);
      cache->large[cache->large_count++] = LargeSlot{block, g};
      cache->large_granules += g;
      owner_add(cache->cached_bytes, g.bytes());
      continue;
    }
    large[large_count++] = block;
  }
  if (cache) cache->lock.unlock();
  // Runs of one class go back under one lock acquisition.
  for (int i = 0; i < small_count;) {
    int j = i + 1;
    while (j < small_count && small[j].slab->class_index == small[i].slab->class_index) ++j;
    return_small(small + i, j - i, small[i].slab->class_index);
    i = j;
  }
  for (int i = 0; i < large_count; ++i) give_back_large(large[i]);
}

// ---- the allowance (policy/allowance.h) --------------------------------------

uint64_t DevicePool::allowance_for(Granules request) {
  if (!allowance_.adaptive()) return large_.batch_bytes;
  // The rate's allowance, but no more than a few of the requested blocks
  // (or the fixed allowance): a loop of one size shares a sync among four
  // pairs or more and never holds more than that beyond its own.
  uint64_t most = 4 * request.bytes();
  if (most < large_.batch_bytes) most = large_.batch_bytes;
  const uint64_t rate = allowance_now();
  return rate < most ? rate : most;
}

uint64_t DevicePool::allowance_now() {
  const uint64_t now = clock_.now_ns();
  const uint64_t last = allowance_sampled_ns_.load(std::memory_order_relaxed);
  if (last && now - last < kAllowanceWindowNs) return allowance_bytes_.load(std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(allowance_mutex_, std::try_to_lock);
  if (!lock) return allowance_bytes_.load(std::memory_order_relaxed);  // another thread samples
  uint64_t freed = 0, reclaimable = 0;
  waiting(&freed, &reclaimable);
  const uint64_t bytes = allowance_.update(now, freed);
  allowance_bytes_.store(bytes, std::memory_order_relaxed);
  // The seal mark follows, no lower than the fixed allowance: sealing
  // only moves a free-only thread's batch where others' syncs retire it.
  seal_bytes_.store(bytes > large_.batch_bytes ? bytes : large_.batch_bytes, std::memory_order_relaxed);
  allowance_sampled_ns_.store(now ? now : 1, std::memory_order_relaxed);
  return allowance_bytes_.load(std::memory_order_relaxed);
}

void DevicePool::waiting(uint64_t* freed_total, uint64_t* reclaimable) {
  uint64_t freed = folded_freed_.load(std::memory_order_relaxed);
  uint64_t held = quarantine_.shared_bytes();
  {
    std::lock_guard<std::mutex> guard(registry_mutex_);
    for (ThreadCache* c = registry_; c; c = c->registry_next) {
      freed += c->freed_bytes.load(std::memory_order_relaxed);
      held += c->quarantined_bytes.load(std::memory_order_relaxed) + c->cached_bytes.load(std::memory_order_relaxed);
    }
  }
  *freed_total = freed;
  *reclaimable = held;
}

bool DevicePool::reclaim_wanted(Granules granules) {
  const uint64_t share = uint64_t(settings_.config.idle_share);
  if (!allowance_.adaptive() && !share) return false;
  uint64_t freed = 0, reclaimable = 0;
  waiting(&freed, &reclaimable);
  if (reclaimable < granules.bytes()) return false;
  // idle_share: what is idle may be that share of what the pool holds,
  // but never less than a chunk nor two requests' worth, only for
  // requests under a chunk, and only once the pool holds more than two
  // fixed allowances (2 GiB on the H200): a loop of one size in a small
  // pool, or of blocks of a GiB, keeps the allowance's batch of pairs per
  // sync (the H200 showed 20 and 64 MiB pool hits 3x slower without the
  // last guard, docs/data/bench-alloc-idle-share-19bbe9c.md), and a pool that small holds little
  // beyond what the allowance already bounds.
  const uint64_t held = mapped_bytes_.load(std::memory_order_relaxed);
  const uint64_t chunk = settings_.config.chunk_bytes;
  if (share && held > 2 * large_.batch_bytes && granules.bytes() < chunk && reclaimable >= chunk &&
      reclaimable >= 2 * granules.bytes() && reclaimable * 100 > share * held)
    return true;
  return allowance_.adaptive() && reclaimable > allowance_for(granules);
}

}  // namespace pagefast::policy
