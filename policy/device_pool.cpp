// policy/device_pool.cpp: the router's alloc and free paths past the hit
// (the hit itself is inline, device_pool_hit.h), and the range queries.
// device_pool.h lists the parts and the other files of DevicePool.
#include "policy/device_pool.h"

namespace pagefast::policy {
namespace {

// Attempts of a slow path before it gives up: another thread can take the
// blocks a refill just made before this one gets them.
constexpr int kSlowAttempts = 4;

}  // namespace

DevicePool::DevicePool(Provider& provider, Clock& clock, PageMap& page_map, const PoolSettings& settings,
                       DeviceBudget& budget, LogSink log)
    : provider_(provider),
      clock_(clock),
      page_map_(page_map),
      settings_(settings),
      log_(log),
      large_(provider, clock, page_map, this, settings, budget, log),
      small_(large_, page_map, this),
      quarantine_(provider, clock),
      registry_(quarantine_, this),
      gate_(quarantine_, clock, registry_, small_, large_, settings),
      release_(settings.config.release_delay_ns, settings.config.release_threshold_bytes),
      budget_(budget) {}

// ---- small blocks --------------------------------------------------------

bool DevicePool::new_slab(ThreadCache& cache, int class_index, AllocStatus* status) {
  Granules granules = small_.next_slab_granules(class_index);
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
  if (!small_.add_slab(class_index, backing, granules)) {
    large_.put_back(backing);
    *status = AllocStatus::Forward;
    oom_.count_passthrough();
    return false;
  }
  maybe_ask_ahead(granules);
  return true;
}

AllocStatus DevicePool::alloc_miss(ThreadCache& cache, uint64_t request_bytes, uint64_t* addr, ContextTag context) {
  const Request request{request_bytes, context};
  if (request_bytes < kSmallLimitBytes) return alloc_small_slow(cache, class_of(request_bytes), request, addr);
  // A request beyond any device's memory: the driver answers it (out of
  // memory), before any rounding could wrap.
  if (request_bytes > kMaxRoundableBytes) {
    oom_.count_passthrough();
    return AllocStatus::Forward;
  }
  return alloc_large_slow(cache, granules_ceil(request_bytes), request, addr);
}

AllocStatus DevicePool::alloc_small_slow(ThreadCache& cache, int class_index, Request request, uint64_t* addr) {
  if (!sleep_.enter()) return AllocStatus::OutOfMemory;
  SleepGate::Pass pass{&sleep_};
  registry_.fold(cache);
  AllocStatus status = AllocStatus::OutOfMemory;
  for (int attempt = 0; attempt < kSlowAttempts; ++attempt) {
    gate_.retire_local(cache, true);
    if (pop_small(cache, class_index, request, addr)) return AllocStatus::Ok;
    if (gate_.due(cache, Granules(0))) {
      if (gate_.sync_and_retire(&cache, true) && pop_small(cache, class_index, request, addr)) return AllocStatus::Ok;
    }
    if (small_.refill(cache, class_index) && pop_small(cache, class_index, request, addr)) return AllocStatus::Ok;
    if (!new_slab(cache, class_index, &status)) {
      // No slab could be had after everything idle came back: a larger
      // class's free block serves the request (policy/small_blocks_borrow.cpp),
      // and the shortfall counted and recorded an answer it did not get.
      if (small_.borrow(cache, class_index, request, addr)) {
        oom_.withdraw(status == AllocStatus::Forward);
        return AllocStatus::Ok;
      }
      oom_.note_request(request.bytes);
      return status;
    }
    if (small_.refill(cache, class_index) && pop_small(cache, class_index, request, addr)) return AllocStatus::Ok;
  }
  return status;
}

// ---- large blocks --------------------------------------------------------

AllocStatus DevicePool::refuse_beyond_device(Granules granules, Request request) {
  // Requests no pool on this device could ever hold: the driver answers,
  // and idle memory is not thrown away for them.
  if (budget_.within_limit(granules.bytes()) < granules.bytes()) {
    oom_.note(granules, false, large_.shortfall(), false);
    oom_.note_request(request.bytes);
    return AllocStatus::OutOfMemory;
  }
  if (settings_.device_total_bytes && granules.bytes() > settings_.device_total_bytes) {
    oom_.count_passthrough();
    return AllocStatus::Forward;
  }
  return AllocStatus::Ok;
}

AllocStatus DevicePool::alloc_large_slow(ThreadCache& cache, Granules granules, Request request, uint64_t* addr) {
  if (!sleep_.enter()) return AllocStatus::OutOfMemory;
  SleepGate::Pass pass{&sleep_};
  const AllocStatus refused = refuse_beyond_device(granules, request);
  if (refused != AllocStatus::Ok) return refused;
  registry_.fold(cache);
  gate_.retire_local(cache, true);
  const bool cacheable = granules <= gate_.limits().cache_block;
  if (cacheable && pop_large(cache, granules, request, addr)) return AllocStatus::Ok;
  const bool due = gate_.due(cache, granules);
  if (due) {
    if (gate_.sync_and_retire(&cache, cacheable) && cacheable && pop_large(cache, granules, request, addr))
      return AllocStatus::Ok;
  }
  AllocStatus status = AllocStatus::OutOfMemory;
  bool fresh = false;
  Block* block = large_.take(granules, BlockState::Used);
  // Cached blocks of other sizes (this was a miss) make way first: without
  // that, stale blocks can pin the memory a loop of this size needs.
  if (!block && flush_large_cache(cache)) block = large_.take(granules, BlockState::Used);
  // The arena is out of fitting runs: the quarantine comes back into this
  // thread's cache (obtain() would send it central, and a steady loop
  // would then never return to its cache).
  // Only once the thread's batch is due, though: before that the pool grows
  // (up to the thread's allowance, LargeLimits), so that one sync serves a
  // batch of large frees rather than every few of them.
  if (!block && cacheable && due && quarantine_.holds_any(&cache) && gate_.sync_and_retire(&cache, true) &&
      pop_large(cache, granules, request, addr))
    return AllocStatus::Ok;
  // Blocks too big for the cache sync before growing with the fixed
  // allowance; with the adaptive one, only once due (or reclaimed before
  // growth, obtain()): a loop of such blocks syncs every few pairs.
  if (!block) block = obtain(&cache, granules, false, &status, &fresh, due || (!cacheable && !gate_.adaptive()));
  if (!block) {
    oom_.note_request(request.bytes);
    return status;
  }
  cache.lock.lock();
  hand_out_large(cache, block, request, !fresh);
  cache.lock.unlock();
  *addr = block->addr();
  maybe_ask_ahead(granules);  // the arena's memory was taken: the next chunk may be wanted
  return AllocStatus::Ok;
}

// ---- free and queries --------------------------------------------------------

void DevicePool::free_finish(FreeStep step, ThreadCache& cache, Span* span, uint64_t addr) {
  if (step == FreeStep::Seal) seal_local_quarantine(cache);
  else if (step == FreeStep::Push) push_waiting(cache, span, addr);
}

// DevicePool::free_step (device_pool_hit.h) found the cache's lock busy or
// its batch full (a seal that found no host memory for the next): the
// push waits for the lock; a full batch is sealed first, then tried once
// more.
void DevicePool::push_waiting(ThreadCache& cache, Span* span, uint64_t addr) {
  uint32_t index = 0;
  uint64_t bytes;
  if (span->kind == SpanKind::Slab) {
    const Slab* slab = static_cast<const Slab*>(span);
    index = uint32_t(slab->block_index(addr - slab->base_addr()));
    bytes = slab->block_bytes;
  } else {
    bytes = static_cast<const Block*>(span)->granules().bytes();
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt) seal_local_quarantine(cache);
    cache.lock.lock();
    if (!cache.quarantine->full()) {
      const bool seal = quarantine_locked(cache, span, index, bytes);
      cache.lock.unlock();
      if (seal) seal_local_quarantine(cache);
      return;
    }
    cache.lock.unlock();
  }
  seal_local_quarantine(cache);
  // No host memory for another batch and no sync allowed: the block can
  // never be proven idle, so it is never reused (counted, not lost track of).
  cache.lock.lock();
  owner_add(cache.in_use_delta, uint64_t(0) - bytes);
  cache.lock.unlock();
  lost_blocks_.fetch_add(1, std::memory_order_relaxed);
}

bool DevicePool::range_of(const Span* span, uint64_t addr, RangeInfo* info) {
  if (span->kind == SpanKind::Slab) {
    const Slab* slab = static_cast<const Slab*>(span);
    if (!slab->active.load(std::memory_order_acquire)) return false;
    const uint64_t base = slab->base_addr();
    if (addr < base) return false;
    const uint64_t index = slab->block_index(addr - base);
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
