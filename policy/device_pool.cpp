// policy/device_pool.cpp: allocation and free, hot and slow paths, and
// the range queries. The other parts of DevicePool: device_pool_arena.cpp
// (growth, the search for arena memory, peers, IPC pieces),
// device_pool_quarantine.cpp (when to sync, where retired blocks go; the
// quarantine itself is policy/quarantine.cpp), device_pool_retire.cpp
// (thread caches, returning memory, trimming, stats) and
// device_pool_footprint.cpp (decay, sleep and wake).
#include "policy/device_pool.h"

namespace pagefast::policy {
namespace {

// Buffer ids are process-wide: unique over all devices, never reused.
std::atomic<uint64_t> g_next_buffer_id{kBufferIdBase};

// Attempts of a slow path before it gives up: another thread can take the
// blocks a refill just made before this one gets them.
constexpr int kSlowAttempts = 4;

ArenaSettings arena_settings(const PoolSettings& s) {
  ArenaSettings a;
  a.chunk_granules = max_granules(granules_ceil(s.config.chunk_bytes), Granules(1));
  a.big_chunks = s.config.big_chunks;
  if (s.config.limit_bytes) a.limit_granules = granules_floor(s.config.limit_bytes);
  uint64_t range = s.config.reserve_bytes;
  if (!range) {
    range = kAutoReserveFactor * s.device_total_bytes;
    if (range < kMinReserveBytes) range = kMinReserveBytes;
  }
  a.range_bytes = granules_ceil(range).bytes();
  return a;
}

}  // namespace

LargeLimits large_limits(uint64_t device_total_bytes, uint64_t limit_bytes) {
  uint64_t basis = device_total_bytes;
  if (limit_bytes && (!basis || limit_bytes < basis)) basis = limit_bytes;
  uint64_t bytes = basis / kLargeLimitDeviceFraction;
  if (bytes < kLargeLimitMinBytes) bytes = kLargeLimitMinBytes;
  if (bytes > kLargeLimitMaxBytes) bytes = kLargeLimitMaxBytes;
  bytes = granules_floor(bytes).bytes();
  // Blocks up to a quarter of the batch: a batch of them is at least four
  // frees, so the sync is shared.
  return LargeLimits{bytes, granules_floor(bytes / 4), granules_floor(bytes)};
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

DevicePool::DevicePool(Provider& provider, Clock& clock, PageMap& page_map, const PoolSettings& settings, LogSink log)
    : provider_(provider),
      clock_(clock),
      page_map_(page_map),
      settings_(settings),
      large_(large_limits(settings.device_total_bytes, settings.config.limit_bytes)),
      log_(log),
      allowance_(make_allowance(settings.config.slack_ns, settings.device_total_bytes, settings.config.limit_bytes)),
      allowance_bytes_(allowance_.bytes()),
      seal_bytes_(large_.batch_bytes),
      arena_(provider, page_map, this, arena_settings(settings)),
      quarantine_(provider, clock),
      footprint_(settings.config.release_delay_ns,
                 settings.config.release_threshold_bytes == kUnlimited ? 0 : settings.config.release_threshold_bytes) {
  for (int c = 0; c < kClassCount; ++c) centrals_[c].init(c);
}

uint64_t DevicePool::next_buffer_id(ThreadCache& cache) {
  if (__builtin_expect(cache.next_buffer_id == cache.buffer_id_end, 0)) {
    cache.next_buffer_id = g_next_buffer_id.fetch_add(kBufferIdBatch, std::memory_order_relaxed);
    cache.buffer_id_end = cache.next_buffer_id + kBufferIdBatch;
  }
  return cache.next_buffer_id++;
}

// ---- small blocks --------------------------------------------------------

bool DevicePool::pop_small(ThreadCache& cache, int class_index, Request request, uint64_t* addr) {
  cache.lock.lock();
  SmallBin& bin = cache.bins[class_index];
  if (__builtin_expect(bin.count == 0, 0)) {
    cache.lock.unlock();
    return false;
  }
  const SmallSlot slot = bin.slots[--bin.count];
  Slab* slab = slot.slab;
  SlabBlockInfo& info = slab->info[slot.index];
  info.requested_bytes.store(uint32_t(request.bytes), std::memory_order_relaxed);
  info.buffer_id.store(next_buffer_id(cache), std::memory_order_relaxed);
  info.context_tag.store(request.context, std::memory_order_relaxed);
  info.live.store(1, std::memory_order_release);
  owner_add(cache.hits, 1);
  owner_add(cache.in_use_delta, slab->block_bytes);
  owner_add(cache.cached_bytes, uint64_t(0) - slab->block_bytes);
  cache.lock.unlock();
  *addr = slot.addr();
  return true;
}

AllocStatus DevicePool::alloc(ThreadCache& cache, uint64_t request_bytes, uint64_t* addr, ContextTag context) {
  const Request request{request_bytes, context};
  if (request_bytes >= kSmallLimitBytes) return alloc_large(cache, request, addr);
  const int class_index = class_of(request_bytes);
  if (__builtin_expect(pop_small(cache, class_index, request, addr), 1)) return AllocStatus::Ok;
  return alloc_small_slow(cache, class_index, request, addr);
}

bool DevicePool::refill_small(ThreadCache& cache, int class_index) {
  const SizeClass& sc = kSizeClasses[class_index];
  SmallSlot slots[kMaxCacheBlocks];
  const int n = centrals_[class_index].pop(slots, int(sc.batch_blocks));
  if (n == 0) return false;
  cache.lock.lock();
  SmallBin& bin = cache.bins[class_index];
  int kept = 0;
  while (kept < n && bin.count < sc.cache_blocks) bin.slots[bin.count++] = slots[kept++];
  owner_add(cache.cached_bytes, uint64_t(kept) * sc.block_bytes);
  cache.lock.unlock();
  if (kept < n) return_small(slots + kept, n - kept, class_index);
  return true;
}

bool DevicePool::new_slab(ThreadCache& cache, int class_index, AllocStatus* status) {
  const SizeClass& sc = kSizeClasses[class_index];
  // A class's slabs start at one granule and double with each slab it
  // holds, up to its geometry (up to kMaxSlabGranules): a class asked for
  // a few times pins no more than a granule of free slots, which larger
  // requests could not use, while a class in steady use gets the geometry
  // that wastes least.
  const uint64_t held = centrals_[class_index].slab_count();
  Granules granules(held >= 63 || (uint64_t(1) << held) >= sc.slab_granules ? sc.slab_granules : uint32_t(1) << held);
  bool fresh = false;
  Block* backing = obtain(&cache, granules, true, status, &fresh);
  // Near the end of the device a smaller slab may fit where this one does
  // not: halves, down to one granule (which holds a block of any class),
  // as the driver's own sub-allocation would still serve the request.
  while (!backing && granules.count() > 1) {
    granules = Granules(granules.count() / 2);
    backing = obtain(&cache, granules, true, status, &fresh);
  }
  if (!backing) return false;
  Slab* slab = centrals_[class_index].take_record(this);
  if (!slab) {
    give_back_large(backing);
    *status = AllocStatus::Forward;
    passthroughs_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  slab->base_addr_.store(backing->addr(), std::memory_order_relaxed);
  slab->backing = backing;
  backing->slab = slab;
  // A record holds sc.blocks_per_slab blocks; a smaller slab uses a prefix.
  slab->block_count = uint32_t(granules.bytes() / sc.block_bytes);
  const uint32_t words = (slab->block_count + 63) / 64;
  for (uint32_t w = 0; w < words; ++w) slab->free_bits[w] = ~uint64_t(0);
  if (slab->block_count % 64) slab->free_bits[words - 1] = (uint64_t(1) << (slab->block_count % 64)) - 1;
  slab->free_count = slab->block_count;
  // backing is set before the entries name the slab: the arena resolves a
  // slab entry through it.
  page_map_.set(backing->addr(), granules, slab);
  slab->active.store(1, std::memory_order_release);
  centrals_[class_index].add(slab);
  return true;
}

AllocStatus DevicePool::alloc_small_slow(ThreadCache& cache, int class_index, Request request, uint64_t* addr) {
  if (!enter_slow()) return AllocStatus::OutOfMemory;
  SlowGuard gate{this};
  fold(cache);
  AllocStatus status = AllocStatus::OutOfMemory;
  for (int attempt = 0; attempt < kSlowAttempts; ++attempt) {
    retire_local(cache, true);
    if (pop_small(cache, class_index, request, addr)) return AllocStatus::Ok;
    if (quarantine_due(cache, Granules(0))) {
      if (sync_and_retire(&cache, true) && pop_small(cache, class_index, request, addr)) return AllocStatus::Ok;
    }
    if (refill_small(cache, class_index) && pop_small(cache, class_index, request, addr)) return AllocStatus::Ok;
    if (!new_slab(cache, class_index, &status)) {
      // No slab could be had after everything idle came back: a larger
      // class's free slot serves the request (policy/device_pool_borrow.cpp).
      if (borrow_small(cache, class_index, request, addr, status)) return AllocStatus::Ok;
      note_oom_request(request.bytes);
      return status;
    }
    if (refill_small(cache, class_index) && pop_small(cache, class_index, request, addr)) return AllocStatus::Ok;
  }
  return status;
}

// ---- large blocks --------------------------------------------------------

void DevicePool::hand_out_large(ThreadCache& cache, Block* block, Request request, bool hit) {
  // REQUIRES: cache.lock held (the counters are written under it).
  block->requested_bytes.store(request.bytes, std::memory_order_relaxed);
  block->buffer_id.store(next_buffer_id(cache), std::memory_order_relaxed);
  block->context_tag.store(request.context, std::memory_order_relaxed);
  block->store_state(BlockState::Used);
  if (hit) owner_add(cache.hits, 1);
  owner_add(cache.in_use_delta, block->granules().bytes());
}

bool DevicePool::pop_large(ThreadCache& cache, Granules granules, Request request, uint64_t* addr) {
  cache.lock.lock();
  // Newest first: a loop takes back what it retired last.
  for (int i = cache.large_count - 1; i >= 0; --i) {
    if (cache.large[i].granules != granules) continue;
    Block* block = cache.large[i].block;
    // Keep the slots in age order (retire_entries evicts the oldest).
    for (int k = i + 1; k < cache.large_count; ++k) cache.large[k - 1] = cache.large[k];
    --cache.large_count;
    cache.large_granules -= granules;
    owner_add(cache.cached_bytes, uint64_t(0) - granules.bytes());
    hand_out_large(cache, block, request, true);
    cache.lock.unlock();
    *addr = block->addr();
    return true;
  }
  cache.lock.unlock();
  return false;
}

AllocStatus DevicePool::alloc_large(ThreadCache& cache, Request request, uint64_t* addr) {
  // A request beyond any device's memory: the driver answers it (out of
  // memory), before any rounding could wrap.
  if (__builtin_expect(request.bytes > kMaxRoundableBytes, 0)) {
    passthroughs_.fetch_add(1, std::memory_order_relaxed);
    return AllocStatus::Forward;
  }
  const Granules granules = granules_ceil(request.bytes);
  if (granules <= large_.cache_block && pop_large(cache, granules, request, addr)) return AllocStatus::Ok;
  return alloc_large_slow(cache, granules, request, addr);
}

AllocStatus DevicePool::alloc_large_slow(ThreadCache& cache, Granules granules, Request request, uint64_t* addr) {
  if (!enter_slow()) return AllocStatus::OutOfMemory;
  SlowGuard gate{this};
  // Requests no pool on this device could ever hold: the driver answers,
  // and idle memory is not thrown away for them.
  if (settings_.config.limit_bytes && granules.bytes() > settings_.config.limit_bytes) {
    ooms_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> guard(arena_mutex_);
      note_oom_locked(granules, false, 0, false);
    }
    note_oom_request(request.bytes);
    return AllocStatus::OutOfMemory;
  }
  if (settings_.device_total_bytes && granules.bytes() > settings_.device_total_bytes) {
    passthroughs_.fetch_add(1, std::memory_order_relaxed);
    return AllocStatus::Forward;
  }
  fold(cache);
  retire_local(cache, true);
  const bool cacheable = granules <= large_.cache_block;
  if (cacheable && pop_large(cache, granules, request, addr)) return AllocStatus::Ok;
  const bool due = quarantine_due(cache, granules);
  if (due) {
    if (sync_and_retire(&cache, cacheable) && cacheable && pop_large(cache, granules, request, addr))
      return AllocStatus::Ok;
  }
  AllocStatus status = AllocStatus::OutOfMemory;
  bool fresh = false;
  auto take_existing = [&]() -> Block* {
    std::lock_guard<std::mutex> guard(arena_mutex_);
    Block* b = arena_.take(granules);
    return b ? b : arena_.take_stitch(granules);
  };
  Block* block = take_existing();
  // Cached blocks of other sizes (this was a miss) make way first: without
  // that, stale blocks can pin the memory a loop of this size needs.
  if (!block && flush_large_cache(cache)) block = take_existing();
  // The arena is out of fitting runs: the quarantine comes back into this
  // thread's cache (obtain() would send it central, and a steady loop
  // would then never return to its cache).
  // Only once the thread's batch is due, though: before that the pool grows
  // (up to the thread's allowance, LargeLimits), so that one sync serves a
  // batch of large frees rather than every few of them.
  if (!block && cacheable && due && quarantine_.holds_any(&cache) && sync_and_retire(&cache, true) &&
      pop_large(cache, granules, request, addr))
    return AllocStatus::Ok;
  // Blocks too big for the cache sync before growing with the fixed
  // allowance; with the adaptive one, only once due (or reclaimed before
  // growth, obtain()): a loop of such blocks syncs every few pairs.
  if (!block) block = obtain(&cache, granules, false, &status, &fresh, due || (!cacheable && !allowance_.adaptive()));
  if (!block) {
    note_oom_request(request.bytes);
    return status;
  }
  cache.lock.lock();
  hand_out_large(cache, block, request, !fresh);
  cache.lock.unlock();
  *addr = block->addr();
  return AllocStatus::Ok;
}

// ---- free and queries --------------------------------------------------------

FreeStatus DevicePool::free(ThreadCache& cache, Span* span, uint64_t addr) {
  uint64_t bytes;
  if (span->kind == SpanKind::Slab) {
    Slab* slab = static_cast<Slab*>(span);
    if (!slab->active.load(std::memory_order_acquire)) return FreeStatus::Invalid;
    const uint64_t base = slab->base_addr();
    if (addr < base) return FreeStatus::Invalid;
    const uint64_t offset = addr - base;
    const uint64_t index = offset / slab->block_bytes;
    if (index >= slab->block_count || index * slab->block_bytes != offset) return FreeStatus::Invalid;
    // The exchange makes two racing frees of one block one success.
    if (slab->info[index].live.exchange(0, std::memory_order_acq_rel) != 1) return FreeStatus::Invalid;
    bytes = slab->block_bytes;
  } else {
    Block* block = static_cast<Block*>(span);
    if (block->addr() != addr || !block->quarantine_if_used()) return FreeStatus::Invalid;
    bytes = block->granules().bytes();
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    cache.lock.lock();
    QuarantineBatch* q = cache.quarantine;
    if (__builtin_expect(!q->full(), 1)) {
      q->entries[q->count++] = QuarantineEntry{addr, span, quarantine_.stamp()};
      q->bytes += bytes;
      owner_add(cache.in_use_delta, uint64_t(0) - bytes);
      owner_add(cache.quarantined_bytes, bytes);
      owner_add(cache.freed_bytes, bytes);
      // A batch over the byte mark is retired by this thread's next miss
      // (quarantine_due), so that the seal and the sync land on one pair;
      // only a full batch, or twice the mark, is sealed here.
      const bool seal = q->full() || q->bytes >= 2 * seal_bytes_.load(std::memory_order_relaxed);
      cache.lock.unlock();
      if (seal) seal_local_quarantine(cache);
      return FreeStatus::Ok;
    }
    cache.lock.unlock();
    seal_local_quarantine(cache);
  }
  // No host memory for another batch and no sync allowed: the block can
  // never be proven idle, so it is never reused (counted, not lost track of).
  cache.lock.lock();
  owner_add(cache.in_use_delta, uint64_t(0) - bytes);
  cache.lock.unlock();
  lost_blocks_.fetch_add(1, std::memory_order_relaxed);
  return FreeStatus::Ok;
}

bool DevicePool::range_of(const Span* span, uint64_t addr, RangeInfo* info) {
  if (span->kind == SpanKind::Slab) {
    const Slab* slab = static_cast<const Slab*>(span);
    if (!slab->active.load(std::memory_order_acquire)) return false;
    const uint64_t base = slab->base_addr();
    if (addr < base) return false;
    const uint64_t index = (addr - base) / slab->block_bytes;
    if (index >= slab->block_count) return false;
    const SlabBlockInfo& block = slab->info[index];
    if (block.live.load(std::memory_order_acquire) != 1) return false;
    const uint64_t block_base = base + index * slab->block_bytes;
    const uint64_t requested = block.requested_bytes.load(std::memory_order_relaxed);
    if (addr >= block_base + requested) return false;
    *info = RangeInfo{block_base, requested, block.buffer_id.load(std::memory_order_relaxed)};
    return true;
  }
  const Block* block = static_cast<const Block*>(span);
  if (block->load_state() != BlockState::Used) return false;
  const uint64_t base = block->addr();
  const uint64_t requested = block->requested_bytes.load(std::memory_order_relaxed);
  if (addr < base || addr >= base + requested) return false;
  *info = RangeInfo{base, requested, block->buffer_id.load(std::memory_order_relaxed)};
  return true;
}

}  // namespace pagefast::policy
