// policy/device_pool_hit.h: DevicePool::alloc and DevicePool::free, inline
// (included at the end of device_pool.h), so that the pool glue's hit path
// (interpose/pool/pool.cpp) compiles into one function: the size class or
// the granules, the thread cache's pop (thread_cache.h pop_small,
// pop_large), or the free's checks and the push onto the thread's
// quarantine batch. Everything else (a miss, a seal, a batch that could
// not be made) is a call to device_pool.cpp. Always inlined: the compiler
// would otherwise keep them as calls for their size, which is mostly the
// checks of the free.
#pragma once

#include "policy/device_pool.h"

namespace pagefast::policy {

__attribute__((always_inline)) inline AllocStatus DevicePool::alloc(ThreadCache& cache, uint64_t request_bytes,
                                                                    uint64_t* addr, ContextTag context) {
  const Request request{request_bytes, context};
  if (__builtin_expect(request_bytes < kSmallLimitBytes, 1)) {
    const int class_index = class_of(request_bytes);
    if (__builtin_expect(pop_small(cache, class_index, request, addr), 1)) return AllocStatus::Ok;
    return alloc_small_slow(cache, class_index, request, addr);
  }
  // A request beyond any device's memory: alloc_large forwards it, before
  // any rounding could wrap.
  if (__builtin_expect(request_bytes > kMaxRoundableBytes, 0)) return alloc_large(cache, request, addr);
  const Granules granules = granules_ceil(request_bytes);
  if (granules <= gate_.limits().cache_block && pop_large(cache, granules, request, addr)) return AllocStatus::Ok;
  return alloc_large_slow(cache, granules, request, addr);
}

// REQUIRES: cache.lock held, the cache's batch not full. Pushes the freed
// block and counts it; true when the batch is to be sealed now.
__attribute__((always_inline)) inline bool DevicePool::quarantine_locked(ThreadCache& cache, Span* span, uint64_t addr,
                                                                         uint64_t bytes) {
  QuarantineBatch* q = cache.quarantine;
  q->entries[q->count++] = QuarantineEntry{addr, span, quarantine_.stamp()};
  q->bytes += bytes;
  owner_add(cache.in_use_delta, uint64_t(0) - bytes);
  owner_add(cache.quarantined_bytes, bytes);
  owner_add(cache.freed_bytes, bytes);
  // A batch over the byte mark is retired by this thread's next miss
  // (quarantine_due), so that the seal and the sync land on one pair;
  // only a full batch, or twice the mark, is sealed here. Or once it could
  // take the device's idle memory over the budget's bound
  // (DeviceBudget::give_back_mark): the rest goes back at once.
  return q->full() || q->bytes >= 2 * gate_.seal_bytes() || q->bytes >= give_back_mark();
}

__attribute__((always_inline)) inline FreeStatus DevicePool::free(ThreadCache& cache, Span* span, uint64_t addr) {
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
  cache.lock.lock();
  if (__builtin_expect(cache.quarantine->full(), 0)) {
    cache.lock.unlock();
    return free_into_new_batch(cache, span, addr, bytes);
  }
  const bool seal = quarantine_locked(cache, span, addr, bytes);
  cache.lock.unlock();
  if (__builtin_expect(seal, 0)) seal_local_quarantine(cache);
  return FreeStatus::Ok;
}

}  // namespace pagefast::policy
