// policy/thread_cache.h: one thread's cache for one device's pool: retired
// small blocks per size class, a few retired large blocks, the thread's
// quarantine, a range of buffer ids and its counters. A pool hit touches
// only this (no lock shared by threads, no syscall, no host allocation).
//
// Why a lock at all: other threads must be able to take a cache's memory
// back when the pool runs out (an idle thread would otherwise strand it)
// and flush it when the thread exits. The owner's hit takes its OwnerLock
// as a quick section (owner_lock.h: two plain stores and a load where the
// kernel offers the asymmetric barrier, else one exchange and one store);
// its other operations lock it; a drainer holds it only while it copies
// entries out.
// Lock order: cache -> size-class lock -> device lock. Nothing is held
// across a synchronize().
//
// The hit path's steps (pop_small, pop_large, next_buffer_id) are inline
// here, so that DevicePool::alloc compiles them into itself; the parts
// that serve a miss (policy/small_blocks.h, policy/sync_gate.h) use them
// too.
#pragma once

#include <atomic>
#include <cstdint>

#include "policy/blocks.h"
#include "policy/owner_add.h"
#include "policy/owner_lock.h"
#include "policy/quarantine.h"
#include "policy/size_classes.h"

namespace pagefast::policy {

// Large blocks a thread keeps for itself: how much is set per pool
// (LargeLimits in device_pool.h, scaled with the device). As many entries as a
// quarantine batch has entries, so a retired batch fits whole and a steady
// loop never leaves the cache.
constexpr int kLargeCacheEntries = kQuarantineBatchEntries;

struct LargeEntry {
  Block* block;
  Granules granules;  // a copy, so a lookup reads only this array
};

// Buffer ids are taken from the process-wide counter this many at a time.
constexpr uint64_t kBufferIdBatch = 4096;
// Buffer ids of pool blocks start here, far above the driver's own, so an
// id never names both a pool block and a driver allocation.
constexpr uint64_t kBufferIdBase = uint64_t(0x5046) << 48;  // "PF"

struct SmallEntry {
  Slab* slab;
  uint32_t index;  // block index in the slab
  uint64_t addr() const { return slab->base_addr() + uint64_t(index) * slab->block_bytes; }
};

struct SmallBin {
  uint32_t count = 0;
  SmallEntry entries[kMaxCacheBlocks];
};

struct ThreadCache {
  OwnerLock lock;
  DevicePool* pool = nullptr;

  SmallBin bins[kClassCount];
  LargeEntry large[kLargeCacheEntries] = {};  // oldest first
  int large_count = 0;
  Granules large_granules;

  QuarantineBatch* quarantine = nullptr;   // being filled; never NULL while attached
  QuarantineBatch* sealed = nullptr;       // full, retired by this thread's next miss
  QuarantineBatch* spare_batch = nullptr;  // an empty one kept for the next seal

  uint64_t next_buffer_id = 0;
  uint64_t buffer_id_end = 0;

  // Owner-written counters; in_use_delta wraps (the sum over all caches
  // and the device's folded value is exact modulo 2^64).
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> in_use_delta{0};
  std::atomic<uint64_t> cached_bytes{0};
  std::atomic<uint64_t> quarantined_bytes{0};
  std::atomic<uint64_t> freed_bytes{0};  // running total, for the free rate (policy/allowance.h)

  // The device's registry of caches (its registry lock).
  ThreadCache* registry_prev = nullptr;
  ThreadCache* registry_next = nullptr;
  ThreadCache* all_next = nullptr;  // every cache of the pool, for teardown
};

// What the program asked for: bytes, and the context the block is for
// (DevicePool::blocks_of_context).
struct AllocRequest {
  uint64_t bytes;
  ContextTag context;
};

// Takes the cache's next range of buffer ids from the process-wide counter
// (thread_registry.cpp); once every kBufferIdBatch allocations.
void take_buffer_ids(ThreadCache& cache);

// kHit: lock_for_pop found the range not used up.
template <bool kHit = false>
inline uint64_t next_buffer_id(ThreadCache& cache) {
  if (!kHit && __builtin_expect(cache.next_buffer_id == cache.buffer_id_end, 0)) take_buffer_ids(cache);
  return cache.next_buffer_id++;
}

// REQUIRES: cache.lock held (the counters are written under it). Marks a
// small block live for `request`.
template <bool kHit = false>
inline void hand_out_small(ThreadCache& cache, const SmallEntry& entry, AllocRequest request) {
  // The slab's figures read before the stores (which the compiler does
  // not move loads across).
  const uint64_t block_bytes = entry.slab->block_bytes;
  SlabBlockInfo& info = entry.slab->info[entry.index];
  const uint64_t buffer_id = next_buffer_id<kHit>(cache);
  info.requested_bytes.store(uint32_t(request.bytes), std::memory_order_relaxed);
  info.buffer_id.store(buffer_id, std::memory_order_relaxed);
  info.context_tag.store(request.context, std::memory_order_relaxed);
  info.live.store(1, std::memory_order_release);
  owner_add(cache.in_use_delta, block_bytes);
}

// Whether a pop may go on: its cache's lock taken. A pop of the hit
// (kHit, DevicePool::alloc_hit) neither waits nor calls: false when a
// drainer holds the lock, or when the cache's range of buffer ids ran out;
// the allocation's slow path then pops as the others do.
template <bool kHit>
inline bool lock_for_pop(ThreadCache& cache) {
  if (!kHit) {
    cache.lock.lock();
    return true;
  }
  if (__builtin_expect(!cache.lock.enter_quick(), 0)) return false;
  if (__builtin_expect(cache.next_buffer_id != cache.buffer_id_end, 1)) return true;
  cache.lock.leave_quick();
  return false;
}

// Ends what lock_for_pop<kHit> began.
template <bool kHit>
inline void unlock_after_pop(ThreadCache& cache) {
  if (kHit) cache.lock.leave_quick();
  else cache.lock.unlock();
}

// A hit of size class `class_index`: the newest entry of its bin; false
// when the bin is empty (or, kHit, as lock_for_pop).
template <bool kHit = false>
inline bool pop_small(ThreadCache& cache, int class_index, AllocRequest request, uint64_t* addr) {
  if (!lock_for_pop<kHit>(cache)) return false;
  SmallBin& bin = cache.bins[class_index];
  if (__builtin_expect(bin.count == 0, 0)) {
    unlock_after_pop<kHit>(cache);
    return false;
  }
  const SmallEntry entry = bin.entries[--bin.count];
  const uint64_t block_bytes = entry.slab->block_bytes;
  const uint64_t block_addr = entry.addr();
  hand_out_small<kHit>(cache, entry, request);
  owner_add(cache.hits, 1);
  owner_add(cache.cached_bytes, uint64_t(0) - block_bytes);
  unlock_after_pop<kHit>(cache);
  *addr = block_addr;
  return true;
}

// REQUIRES: cache.lock held. Marks a large block Used for `request`; a hit
// when it came from the cache or the pool's idle memory (not a growth).
template <bool kHit = false>
inline void hand_out_large(ThreadCache& cache, Block* block, AllocRequest request, bool hit) {
  block->requested_bytes.store(request.bytes, std::memory_order_relaxed);
  block->buffer_id.store(next_buffer_id<kHit>(cache), std::memory_order_relaxed);
  block->context_tag.store(request.context, std::memory_order_relaxed);
  block->store_state(BlockState::Used);
  if (hit) owner_add(cache.hits, 1);
  owner_add(cache.in_use_delta, block->granules().bytes());
}

// A hit of a cached large block of exactly `granules`; false when none
// (or, kHit, as lock_for_pop).
template <bool kHit = false>
inline bool pop_large(ThreadCache& cache, Granules granules, AllocRequest request, uint64_t* addr) {
  if (!lock_for_pop<kHit>(cache)) return false;
  // Newest first: a loop takes back what it retired last.
  for (int i = cache.large_count - 1; i >= 0; --i) {
    if (cache.large[i].granules != granules) continue;
    Block* block = cache.large[i].block;
    // Keep the entries in age order (SyncGate evicts the oldest). The
    // empty asm keeps the loop a loop, not a call of memmove: the hit
    // makes no call.
    for (int k = i + 1; k < cache.large_count; ++k) {
      cache.large[k - 1] = cache.large[k];
      __asm__ volatile("" ::: "memory");
    }
    --cache.large_count;
    cache.large_granules -= granules;
    owner_add(cache.cached_bytes, uint64_t(0) - granules.bytes());
    hand_out_large<kHit>(cache, block, request, true);
    unlock_after_pop<kHit>(cache);
    *addr = block->addr();
    return true;
  }
  unlock_after_pop<kHit>(cache);
  return false;
}

}  // namespace pagefast::policy
