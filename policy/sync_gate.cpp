// policy/sync_gate.cpp: SyncGate (sync_gate.h): when a sync is due, what
// it covers, where retired blocks go, and the allowance.
#include "policy/sync_gate.h"

namespace pagefast::policy {

LargeLimits large_limits(uint64_t device_total_bytes, uint64_t limit_bytes) {
  uint64_t basis = device_total_bytes;
  if (limit_bytes && (!basis || limit_bytes < basis)) basis = limit_bytes;
  uint64_t bytes = basis / kLargeLimitDeviceFraction;
  if (bytes < kLargeLimitMinBytes) bytes = kLargeLimitMinBytes;
  if (bytes > kLargeLimitMaxBytes) bytes = kLargeLimitMaxBytes;
  bytes = granules_floor(bytes).bytes();
  // Blocks up to a quarter of the batch: a batch of them is at least four
  // frees, so the sync is shared. Blocks up to the adaptive allowance's
  // ceiling (1/32 of the device: 2.5 GiB on an 80 GB card) are cached too,
  // and the cache holds two of its ceiling: a loop of blocks of a GiB or
  // two then cycles in the thread's cache as smaller ones do (no device
  // lock, no page-map writes, no growth or release once it holds its
  // rotation), its batch retired into the cache by one sync every few
  // pairs (docs/POOL.md "Big blocks and the sync per pair").
  uint64_t big = granules_floor(basis / kAllowanceDeviceFraction).bytes();
  if (big < bytes / 4) big = bytes / 4;
  uint64_t total = 2 * big;
  if (total < bytes) total = bytes;
  return LargeLimits{bytes, granules_floor(big), granules_floor(total)};
}

Allowance make_allowance(uint64_t slack_ns, uint64_t device_total_bytes, uint64_t limit_bytes) {
  const uint64_t fixed = large_limits(device_total_bytes, limit_bytes).batch_bytes;
  uint64_t basis = device_total_bytes;
  if (limit_bytes && (!basis || limit_bytes < basis)) basis = limit_bytes;
  uint64_t most = granules_floor(basis / kAllowanceDeviceFraction).bytes();
  if (most < fixed) most = fixed;
  // Until the first rate: the fixed allowance (a program's first
  // millisecond; and tests whose clock stands still see the fixed one).
  return Allowance(slack_ns, kAllowanceMinBytes < fixed ? kAllowanceMinBytes : fixed, most, fixed);
}

SyncGate::SyncGate(Quarantine& quarantine, Clock& clock, ThreadRegistry& registry, SmallBlocks& small,
                   LargeBlocks& large, const PoolSettings& settings)
    : quarantine_(quarantine),
      clock_(clock),
      registry_(registry),
      small_(small),
      large_(large),
      idle_share_(uint64_t(settings.config.idle_share)),
      chunk_bytes_(settings.config.chunk_bytes),
      limits_(large_limits(settings.device_total_bytes, large.budget().limit_bytes())),
      allowance_(make_allowance(settings.config.slack_ns, settings.device_total_bytes, large.budget().limit_bytes())),
      allowance_bytes_(allowance_.bytes()),
      seal_bytes_(limits_.batch_bytes) {}

// ---- when to sync --------------------------------------------------------------

bool SyncGate::due(ThreadCache& cache, Granules request) {
  // A sealed batch is a batch: retiring it now costs one sync for all of it.
  const Quarantine::Load local = quarantine_.local_load(cache);
  const uint64_t allowance = allowance_for(request);
  if (local.sealed || local.bytes >= allowance) return true;
  const uint64_t blocks = local.blocks + quarantine_.shared_blocks();
  const uint64_t bytes = local.bytes + quarantine_.shared_bytes();
  uint64_t due_bytes = large_.mapped_bytes() / kRetireMappedFraction;
  if (due_bytes < allowance) due_bytes = allowance;
  return blocks >= kRetireBlocks || bytes >= due_bytes;
}

bool SyncGate::reclaim_wanted(Granules granules) {
  const uint64_t share = idle_share_;
  if (!allowance_.adaptive() && !share) return false;
  uint64_t freed = 0, reclaimable = 0;
  registry_.waiting(&freed, &reclaimable);
  if (reclaimable < granules.bytes()) return false;
  // idle_share: what is idle may be that share of what the pool holds,
  // but never less than a chunk nor two requests' worth, only for
  // requests under a chunk, and only once the pool holds more than two
  // fixed allowances (2 GiB on the H200): a loop of one size in a small
  // pool, or of blocks of a GiB, keeps the allowance's batch of pairs per
  // sync (the H200 showed 20 and 64 MiB pool hits 3x slower without the
  // last guard, docs/data/bench-alloc-idle-share-19bbe9c.md), and a pool that small holds little
  // beyond what the allowance already bounds.
  const uint64_t held = large_.mapped_bytes();
  const uint64_t chunk = chunk_bytes_;
  if (share && held > 2 * limits_.batch_bytes && granules.bytes() < chunk && reclaimable >= chunk &&
      reclaimable >= 2 * granules.bytes() && reclaimable * 100 > share * held)
    return true;
  return allowance_.adaptive() && reclaimable > allowance_for(granules);
}

// ---- the allowance (policy/allowance.h) --------------------------------------

uint64_t SyncGate::allowance_for(Granules request) {
  if (!allowance_.adaptive()) return limits_.batch_bytes;
  // The rate's allowance, but no more than a few of the requested blocks
  // (or the fixed allowance): a loop of one size shares a sync among four
  // pairs or more and never holds more than that beyond its own.
  uint64_t most = 4 * request.bytes();
  if (most < limits_.batch_bytes) most = limits_.batch_bytes;
  const uint64_t rate = allowance_now();
  return rate < most ? rate : most;
}

uint64_t SyncGate::allowance_now() {
  const uint64_t now = clock_.now_ns();
  const uint64_t last = allowance_sampled_ns_.load(std::memory_order_relaxed);
  if (last && now - last < kAllowanceWindowNs) return allowance_bytes_.load(std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(allowance_mutex_, std::try_to_lock);
  if (!lock) return allowance_bytes_.load(std::memory_order_relaxed);  // another thread samples
  uint64_t freed = 0, reclaimable = 0;
  registry_.waiting(&freed, &reclaimable);
  const uint64_t bytes = allowance_.update(now, freed);
  allowance_bytes_.store(bytes, std::memory_order_relaxed);
  // The seal mark follows, no lower than the fixed allowance: sealing
  // only moves a free-only thread's batch where others' syncs retire it.
  seal_bytes_.store(bytes > limits_.batch_bytes ? bytes : limits_.batch_bytes, std::memory_order_relaxed);
  allowance_sampled_ns_.store(now ? now : 1, std::memory_order_relaxed);
  return allowance_bytes_.load(std::memory_order_relaxed);
}

// ---- syncs and retiring ----------------------------------------------------------

bool SyncGate::sync_and_retire(ThreadCache* cache, bool into_cache) {
  if (!quarantine_.synchronize_covering(quarantine_.newest_stamp(cache))) return false;
  retire_covered(cache, into_cache);
  return true;
}

bool SyncGate::sync_if_waiting(ThreadCache* cache) {
  if (quarantine_.holds_any(cache)) return sync_and_retire(cache, false);
  return true;
}

bool SyncGate::sync_before_refusing(ThreadCache* cache) {
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

void SyncGate::retire_covered(ThreadCache* cache, bool into_cache) {
  if (cache) retire_local(*cache, into_cache);
  ThreadCache* route = into_cache ? cache : nullptr;
  quarantine_.retire_shared([&](const ThreadCache* owner, const QuarantineEntry* entries, int count) {
    retire_entries(route && owner == route ? route : nullptr, entries, count);
  });
}

void SyncGate::retire_local(ThreadCache& cache, bool into_cache) {
  QuarantineEntry retired[Quarantine::kMaxRetired];
  const int n = quarantine_.take_retired(cache, retired);
  if (n) retire_entries(into_cache ? &cache : nullptr, retired, n);
}

uint64_t SyncGate::evict_large(ThreadCache& cache, Granules g, Block** evicted, int* evicted_count) {
  uint64_t bytes = 0;
  while (cache.large_count &&
         (cache.large_count == kLargeCacheEntries || cache.large_granules + g > limits_.cache_total)) {
    const LargeEntry oldest = cache.large[0];
    for (int k = 1; k < cache.large_count; ++k) cache.large[k - 1] = cache.large[k];
    --cache.large_count;
    cache.large_granules -= oldest.granules;
    bytes += oldest.granules.bytes();
    evicted[(*evicted_count)++] = oldest.block;
  }
  return bytes;
}

// REQUIRES: cache.lock. The run of large blocks from entries[*at]: each
// cached (the oldest evicted to make room) or, too big, left in `out`.
// The cache's count and granules kept in locals meanwhile (its lock is
// held), written back before an eviction and at the end.
void SyncGate::cache_large_run(ThreadCache& cache, const QuarantineEntry* entries, int count, int* at, Block** out,
                               int* out_count, uint64_t* cached) {
  int n = cache.large_count;
  Granules held = cache.large_granules;
  int i = *at;
  for (; i < count && entries[i].span->kind != SpanKind::Slab; ++i) {
    Block* block = static_cast<Block*>(entries[i].span);
    const Granules g = block->granules();
    if (g > limits_.cache_block) {
      out[(*out_count)++] = block;
      continue;
    }
    if (n && (n == kLargeCacheEntries || held + g > limits_.cache_total)) {
      cache.large_count = n;
      cache.large_granules = held;
      *cached -= evict_large(cache, g, out, out_count);
      n = cache.large_count;
      held = cache.large_granules;
    }
    block->store_state(BlockState::Cached);
    cache.large[n++] = LargeEntry{block, g};
    held += g;
    *cached += g.bytes();
  }
  cache.large_count = n;
  cache.large_granules = held;
  *at = i;
}

// REQUIRES: cache->lock when cache. The run of small blocks of one slab
// from entries[*at]: the slab and the cache's bin of its class are read
// once; the bin takes what it has room for, `out` the rest.
inline void SyncGate::bin_small_run(ThreadCache* cache, const QuarantineEntry* entries, int count, int* at,
                                    SmallEntry* out, int* out_count, uint64_t* cached) {
  const QuarantineEntry* e = entries + *at;
  const QuarantineEntry* const last = entries + count;
  const Span* const span = e->span;
  Slab* const slab = static_cast<Slab*>(e->span);
  if (cache) {
    SmallBin& bin = cache->bins[slab->class_index];
    SmallEntry* to = bin.entries + bin.count;
    SmallEntry* const full = bin.entries + kSizeClasses[slab->class_index].cache_blocks;
    SmallEntry* const from = to;
    for (; to < full && e != last && e->span == span; ++e, ++to) *to = SmallEntry{slab, e->index};
    bin.count += uint32_t(to - from);
    *cached += uint64_t(to - from) * slab->block_bytes;
  }
  for (; e != last && e->span == span; ++e) out[(*out_count)++] = SmallEntry{slab, e->index};
  *at = int(e - entries);
}

void SyncGate::retire_entries(ThreadCache* cache, const QuarantineEntry* entries, int count) {
  // `cache` is the route: the retiring thread's own cache first (it freed
  // these, it is likely to ask for the same sizes again); NULL, or
  // overflow, goes central. The oldest cached large blocks make way for
  // newly retired ones: the cache follows what the thread uses now.
  constexpr int kMaxEntries = Quarantine::kMaxRetired;
  SmallEntry small[kMaxEntries];
  int small_count = 0;
  Block* large[kMaxEntries + kLargeCacheEntries];
  int large_count = 0;
  uint64_t cached = 0;  // what the cache gains, less what it evicts (wraps): counted once
  if (cache) cache->lock.lock();
  for (int i = 0; i < count;) {
    if (entries[i].span->kind == SpanKind::Slab) bin_small_run(cache, entries, count, &i, small, &small_count, &cached);
    else if (cache) cache_large_run(*cache, entries, count, &i, large, &large_count, &cached);
    else large[large_count++] = static_cast<Block*>(entries[i++].span);
  }
  if (cache) {
    owner_add(cache->cached_bytes, cached);
    cache->lock.unlock();
  }
  // Runs of one class go back under one lock acquisition.
  for (int i = 0; i < small_count;) {
    int j = i + 1;
    while (j < small_count && small[j].slab->class_index == small[i].slab->class_index) ++j;
    small_.put_back(small + i, j - i, small[i].slab->class_index);
    i = j;
  }
  for (int i = 0; i < large_count; ++i) large_.put_back(large[i]);
}

}  // namespace pagefast::policy
