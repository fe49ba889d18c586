// policy/device_pool_hit.h: DevicePool's hit, inline (included at the end
// of device_pool.h), so that the pool glue's hit path
// (interpose/pool/pool.cpp) compiles into its own function: the size
// class or the granules and the thread cache's pop (thread_cache.h
// pop_small, pop_large) in alloc_hit, the free's checks and the push onto
// the thread's quarantine batch in free_step. What is not the hit (a miss,
// a seal, a full batch) is a call to device_pool.cpp, which the glue makes
// as a tail call of its own, so that the hit keeps no frame. Always
// inlined: the compiler would otherwise keep them as calls for their size,
// which is mostly the checks of the free.
#pragma once

#include "policy/device_pool.h"

namespace pagefast::policy {

__attribute__((always_inline)) inline bool DevicePool::alloc_hit(ThreadCache& cache, uint64_t request_bytes,
                                                                 uint64_t* addr, ContextTag context) {
  const Request request{request_bytes, context};
  if (__builtin_expect(request_bytes < kSmallLimitBytes, 1))
    return pop_small<true>(cache, class_of(request_bytes), request, addr);
  // A request beyond any device's memory: alloc_miss forwards it, before
  // any rounding could wrap.
  if (__builtin_expect(request_bytes > kMaxRoundableBytes, 0)) return false;
  const Granules granules = granules_ceil(request_bytes);
  return granules <= gate_.limits().cache_block && pop_large<true>(cache, granules, request, addr);
}

__attribute__((always_inline)) inline AllocStatus DevicePool::alloc(ThreadCache& cache, uint64_t request_bytes,
                                                                    uint64_t* addr, ContextTag context) {
  if (__builtin_expect(alloc_hit(cache, request_bytes, addr, context), 1)) return AllocStatus::Ok;
  return alloc_miss(cache, request_bytes, addr, context);
}

// REQUIRES: cache.lock held (or its quick section), the cache's batch not full. Pushes the freed
// block and counts it; true when the batch is to be sealed now.
__attribute__((always_inline)) inline bool DevicePool::quarantine_locked(ThreadCache& cache, Span* span, uint32_t index,
                                                                         uint64_t bytes) {
  QuarantineBatch* q = cache.quarantine;
  q->entries[q->count++] = QuarantineEntry{span, index, quarantine_.stamp()};
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

__attribute__((always_inline)) inline DevicePool::FreeStep DevicePool::free_step(ThreadCache& cache, Span* span,
                                                                                 uint64_t addr, bool exported_aside) {
  uint64_t bytes;
  uint32_t index = 0;
  if (span->kind == SpanKind::Slab) {
    Slab* slab = static_cast<Slab*>(span);
    if (!slab->active.load(std::memory_order_acquire)) return FreeStep::Invalid;
    const uint64_t base = slab->base_addr();
    if (addr < base) return FreeStep::Invalid;
    const uint64_t offset = addr - base;
    const uint64_t at = slab->block_index(offset);
    if (at >= slab->block_count || at * slab->block_bytes != offset) return FreeStep::Invalid;
    if (exported_aside && __builtin_expect(slab->info[at].exported.load(std::memory_order_relaxed), 0))
      return FreeStep::Exported;
    // The exchange makes two racing frees of one block one success.
    if (slab->info[at].live.exchange(0, std::memory_order_acq_rel) != 1) return FreeStep::Invalid;
    bytes = slab->block_bytes;
    index = uint32_t(at);
  } else {
    Block* block = static_cast<Block*>(span);
    if (block->addr() != addr) return FreeStep::Invalid;
    if (exported_aside && __builtin_expect(block->exported.load(std::memory_order_relaxed), 0))
      return FreeStep::Exported;
    if (!block->quarantine_if_used()) return FreeStep::Invalid;
    bytes = block->granules().bytes();
  }
  // The block is this free's now. A busy lock (a drainer holds it) or a
  // full batch (a seal found no host memory for the next): free_finish
  // pushes it, waiting for the lock.
  if (__builtin_expect(!cache.lock.enter_quick(), 0)) return FreeStep::Push;
  if (__builtin_expect(cache.quarantine->full(), 0)) {
    cache.lock.leave_quick();
    return FreeStep::Push;
  }
  const bool seal = quarantine_locked(cache, span, index, bytes);
  cache.lock.leave_quick();
  return __builtin_expect(seal, 0) ? FreeStep::Seal : FreeStep::Done;
}

__attribute__((always_inline)) inline FreeStatus DevicePool::free(ThreadCache& cache, Span* span, uint64_t addr) {
  const FreeStep step = free_step(cache, span, addr);
  if (__builtin_expect(step == FreeStep::Done, 1)) return FreeStatus::Ok;
  if (step == FreeStep::Invalid) return FreeStatus::Invalid;
  free_finish(step, cache, span, addr);
  return FreeStatus::Ok;
}

}  // namespace pagefast::policy
