// policy/small_blocks.h: the small blocks of one device's pool: the
// size-class centres (SlabCentral, one per class), the slabs they cut from
// arena memory (LargeBlocks), the thread caches' bins filled from and
// drained to them, and, for a full device, a larger class's free block
// and the slabs' free tails (small_blocks_borrow.cpp).
//
// The hit (policy/thread_cache.h, pop_small) never reaches here. Where a
// new slab's memory comes from is DevicePool's decision (it may sync or
// reclaim first): add_slab makes a slab of memory already obtained.
//
// Locks: cache -> size-class lock -> device lock. A slab's memory goes
// back to the arena once its class lock is released; trim_tails gives a
// tail back with the class lock held, in that order.
#pragma once

#include <cstdint>
#include <string>

#include "policy/large_blocks.h"
#include "policy/page_map.h"
#include "policy/slab_central.h"
#include "policy/thread_cache.h"

namespace pagefast::policy {

// One class's occupancy for the memory report.
struct ClassOccupancy {
  uint32_t block_bytes = 0;
  uint64_t slabs = 0;
  uint64_t blocks_in_use = 0;  // not free in the centre, nor in a thread's bin
  uint64_t free_blocks = 0;    // free in the centre or a thread's bin
};

class SmallBlocks {
 public:
  // `owner`: the pool whose spans the slabs are (Span::pool).
  SmallBlocks(LargeBlocks& large, PageMap& page_map, DevicePool* owner);
  SmallBlocks(const SmallBlocks&) = delete;
  SmallBlocks& operator=(const SmallBlocks&) = delete;

  // Moves a batch of the class's free blocks into the cache's bin (what
  // does not fit goes back); false when the centre had none.
  bool refill(ThreadCache& cache, int class_index);
  // The arena memory the class's next slab takes: one granule, doubling
  // with each slab the class holds, up to its geometry.
  Granules next_slab_granules(int class_index);
  // Makes `backing` (granules, SlabBacking) a slab of the class and adds
  // it to the centre; false, and backing untouched, without a host record.
  bool add_slab(int class_index, Block* backing, Granules granules);
  // Free blocks of one class back to its centre; slabs left empty go back
  // to the arena.
  void put_back(const SmallEntry* entries, int count, int class_index);
  // Every cached block of the cache's bins back to the centres.
  void drain_bins(ThreadCache& cache);
  // Every empty slab's memory back to the arena.
  void release_all_empty();

  // A full device (small_blocks_borrow.cpp): a free block of the nearest
  // larger class, from the cache's bins or a centre, handed out for
  // `request`; false when none.
  bool borrow(ThreadCache& cache, int class_index, AllocRequest request, uint64_t* addr);
  // Every slab's free tail back to the arena. Returns the granules.
  uint64_t trim_tails();

  // "; class 64: 2 slabs, 10 free blocks" per class with slabs.
  std::string describe();
  // The report's rows of classes with slabs; in_bins: blocks in thread
  // bins per class. Try-locks only; false when a centre was busy.
  bool occupancy(const uint64_t in_bins[kClassCount], ClassOccupancy out[kClassCount], int* count);

 private:
  void release_slabs(Slab** slabs, int count);

  LargeBlocks& large_;
  PageMap& page_map_;
  DevicePool* const owner_;
  SlabCentral centrals_[kClassCount];
};

}  // namespace pagefast::policy
