// policy/slab_central.h: the shared store of retired small blocks of one
// size class: the slabs that have blocks in them, as a free bitmap per
// slab. Thread caches refill from it and return to it in batches, under
// its own lock (one per class, so classes never contend with each other).
//
// A slab whose blocks are all back is empty; one empty slab per class is
// kept (a loop that frees its last block and allocates again must not
// cost an arena round trip), the rest are handed back to the arena, so
// small-class memory does not stay pinned after a burst.
//
// Slab records are recycled within their class only, so their block size
// and per-block arrays never change after construction. The block count
// does (a slab smaller than its class's geometry, a tail cut off on a full
// device), but only over blocks that are not live: the lock-free free path
// judges a live block the same with a stale count.
#pragma once

#include <cstdint>
#include <mutex>

#include "policy/blocks.h"
#include "policy/size_classes.h"
#include "policy/thread_cache.h"

namespace pagefast::policy {

constexpr int kKeptEmptySlabs = 1;

class SlabCentral {
 public:
  SlabCentral() = default;
  SlabCentral(const SlabCentral&) = delete;
  SlabCentral& operator=(const SlabCentral&) = delete;
  ~SlabCentral();  // tests only: production pools are never destroyed

  void init(int class_index) { class_index_ = class_index; }

  // Moves up to `max` blocks into `out`; returns how many.
  int pop(SmallEntry* out, int max);
  // Puts retired blocks back. Slabs that became empty beyond the kept one
  // are unlisted and returned in `released` (up to `count` of them): the
  // caller hands their backing to the arena without this lock held.
  int push(const SmallEntry* blocks, int count, Slab** released);
  // A new slab, all blocks free, from a freshly taken arena block.
  void add(Slab* slab);
  // Empty slabs, all of them (pool pressure). Returns how many.
  int take_empty(Slab** out, int max);

  // Cuts the free tail off every slab with free blocks: `trim(slab,
  // keep_granules)` gives the granules past `keep_granules` back (true) or
  // cannot (false: the slab stays whole). A slab keeps every block not
  // free here (live, quarantined or cached); empty slabs are left alone.
  // Returns the granules given back.
  template <typename Trim>
  uint64_t trim_tails(Trim trim) {
    std::lock_guard<std::mutex> guard(mutex_);
    uint64_t trimmed = 0;
    for (Slab *slab = partial_, *next; slab; slab = next) {
      next = slab->list_next;
      const uint32_t kept_blocks = blocks_below_free_tail(slab);
      const uint64_t slab_granules = slab->backing->granules().count();
      const uint64_t keep_granules = (uint64_t(kept_blocks) * slab->block_bytes + kGranuleBytes - 1) / kGranuleBytes;
      if (kept_blocks == 0 || keep_granules >= slab_granules || !trim(slab, Granules(keep_granules))) continue;
      cut(slab, uint32_t(keep_granules * kGranuleBytes / slab->block_bytes));
      if (slab->free_count == 0) unlink(slab);
      trimmed += slab_granules - keep_granules;
    }
    return trimmed;
  }

  // A slab record of this class: recycled, or new (NULL on host OOM).
  Slab* take_record(DevicePool* pool);
  void give_record(Slab* slab);

  uint64_t slab_count() {
    std::lock_guard<std::mutex> guard(mutex_);
    return slab_count_;
  }
  uint64_t free_blocks() {
    std::lock_guard<std::mutex> guard(mutex_);
    return free_blocks_;
  }
  // The counts without waiting; false when the lock is busy (at exit).
  // total_blocks: of every slab (slabs differ in size, DevicePool::new_slab).
  bool try_counts(uint64_t* slabs, uint64_t* free_blocks, uint64_t* total_blocks) {
    std::unique_lock<std::mutex> guard(mutex_, std::try_to_lock);
    if (!guard.owns_lock()) return false;
    *slabs = slab_count_;
    *free_blocks = free_blocks_;
    *total_blocks = total_blocks_;
    return true;
  }

 private:
  // One past the last block that is not free.
  uint32_t blocks_below_free_tail(const Slab* slab) const;
  // The slab holds its first `block_count` blocks only (all past them free).
  void cut(Slab* slab, uint32_t block_count);
  void link(Slab* slab);
  void unlink(Slab* slab);
  bool empty(const Slab* slab) const { return slab->free_count == slab->block_count; }

  std::mutex mutex_;
  int class_index_ = 0;
  Slab* partial_ = nullptr;  // slabs with at least one free block
  Slab* spare_records_ = nullptr;
  Slab* all_records_ = nullptr;
  int empty_count_ = 0;
  uint64_t slab_count_ = 0;
  uint64_t free_blocks_ = 0;
  uint64_t total_blocks_ = 0;
};

}  // namespace pagefast::policy
