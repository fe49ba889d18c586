// policy/small_blocks_borrow.cpp: what a full device takes from the size
// classes' idle memory (docs/POOL.md "Out of memory").
//
// A slab's free blocks serve only its class, and cuMemGetInfo counts them
// free. When no arena memory can be had for a request, even after every
// idle block came back (DevicePool::obtain_under_pressure):
//  - a small request takes a free block of the nearest larger class that
//    has one, as caching allocators split a larger free block; the block
//    keeps its slab's geometry and is freed into that class (the slab
//    records it), and cuMemGetAddressRange answers the requested bytes, as
//    for any small block;
//  - the free tail of every slab (its granules past the last block that is
//    not free) goes back to the arena, where a larger request can use it.
// Both run only after a shortfall, never on the hit path.
#include "policy/small_blocks.h"

namespace pagefast::policy {

bool SmallBlocks::borrow(ThreadCache& cache, int class_index, AllocRequest request, uint64_t* addr) {
  SmallEntry entry{};
  bool found = false;
  // The shortfall drained every thread cache into the centres; the calling
  // thread may have refilled its own since, so it is read too.
  for (int c = class_index + 1; c < kClassCount && !found; ++c) {
    cache.lock.lock();
    SmallBin& bin = cache.bins[c];
    if (bin.count) {
      entry = bin.entries[--bin.count];
      owner_add(cache.cached_bytes, uint64_t(0) - entry.slab->block_bytes);
      found = true;
    }
    cache.lock.unlock();
    if (!found) found = centrals_[c].pop(&entry, 1) == 1;
  }
  if (!found) return false;
  cache.lock.lock();
  hand_out_small(cache, entry, request);
  cache.lock.unlock();
  *addr = entry.addr();
  return true;
}

uint64_t SmallBlocks::trim_tails() {
  uint64_t granules = 0;
  for (int c = 0; c < kClassCount; ++c)
    granules += centrals_[c].trim_tails([this](Slab* slab, Granules keep) {
      // Size-class lock -> device lock: the pool's lock order.
      return large_.put_back_tail(slab->backing, keep);
    });
  return granules;
}

}  // namespace pagefast::policy
