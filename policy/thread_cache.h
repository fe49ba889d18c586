// policy/thread_cache.h: one thread's cache for one device's pool: retired
// small blocks per size class, a few retired large blocks, the thread's
// quarantine, a range of buffer ids and its counters. A pool hit touches
// only this (no lock shared by threads, no syscall, no host allocation).
//
// Why a lock at all: other threads must be able to take a cache's memory
// back when the pool runs out (an idle thread would otherwise strand it)
// and flush it when the thread exits. The owner takes its OwnerLock on
// every operation: uncontended, that is one exchange and one store, a few
// nanoseconds; a drainer holds it only while it copies entries out.
// Lock order: cache -> size-class lock -> device lock. Nothing is held
// across a synchronize().
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "policy/blocks.h"
#include "policy/quarantine.h"
#include "policy/size_classes.h"
#include "policy/spin.h"

namespace pagefast::policy {

class OwnerLock {
 public:
  // Spins before yielding: the holder never waits on anything while holding.
  static constexpr int kSpinsBeforeYield = 64;

  void lock() {
    int spins = 0;
    while (held_.exchange(1, std::memory_order_acquire)) {
      while (held_.load(std::memory_order_relaxed)) {
        if (++spins > kSpinsBeforeYield) sched_yield();
        else cpu_relax();
      }
    }
  }
  void unlock() { held_.store(0, std::memory_order_release); }
  // For readers that must never wait (the report at process exit).
  bool try_lock() { return held_.exchange(1, std::memory_order_acquire) == 0; }

 private:
  std::atomic<uint32_t> held_{0};
};

// Large blocks a thread keeps for itself: how much is set per pool
// (LargeLimits in device_pool.h, scaled with the device). As many slots as a
// quarantine batch has entries, so a retired batch fits whole and a steady
// loop never leaves the cache.
constexpr int kLargeCacheSlots = kQuarantineBatchEntries;

struct LargeSlot {
  Block* block;
  Granules granules;  // a copy, so a lookup reads only this array
};

// Buffer ids are taken from the process-wide counter this many at a time.
constexpr uint64_t kBufferIdBatch = 4096;

struct SmallSlot {
  Slab* slab;
  uint32_t index;  // block index in the slab
  uint64_t addr() const { return slab->base_addr() + uint64_t(index) * slab->block_bytes; }
};

struct SmallBin {
  uint32_t count = 0;
  SmallSlot slots[kMaxCacheBlocks];
};

// Adds to a counter that only its owner writes: a plain load and store,
// no read-modify-write; readers on other threads see a recent value.
inline void owner_add(std::atomic<uint64_t>& counter, uint64_t delta) {
  counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
}

struct ThreadCache {
  OwnerLock lock;
  DevicePool* pool = nullptr;

  SmallBin bins[kClassCount];
  LargeSlot large[kLargeCacheSlots] = {};  // oldest first
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

}  // namespace pagefast::policy
