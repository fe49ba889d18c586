// policy/device_pool_obtain.cpp: where DevicePool finds arena memory for a
// large block or a slab: the arena's free memory first (LargeBlocks), then
// the thread's own cached blocks, then what waits for a sync (the thread's,
// or every thread's when more waits than the allowance or the headroom is
// at stake), then stitching and growth, and under pressure everything idle
// before the answer is out of memory.
#include "policy/device_pool.h"

namespace pagefast::policy {

void DevicePool::prewarm() { large_.prewarm(); }

Block* DevicePool::obtain(ThreadCache* cache, Granules granules, bool for_slab, AllocStatus* status, bool* fresh,
                          bool sync_before_growth) {
  const BlockState state = for_slab ? BlockState::SlabBacking : BlockState::Used;
  *fresh = false;
  if (Block* b = large_.take(granules, state)) return b;
  // Blocks of other sizes in this thread's own cache are the cheapest
  // memory to get back (no driver call): the cache follows current use.
  if (cache && flush_large_cache(*cache))
    if (Block* b = large_.take(granules, state)) return b;
  if (Block* b = reclaim_before_growth(cache, granules, state, sync_before_growth)) return b;
  // A growth may come next: under a limit the device's other holders (the
  // own-VMM cache, the other pools) release what would take them all over
  // it first, with no lock of this pool held.
  if (budget_self_ && budget_.limit_bytes()) budget_.make_room(budget_self_, granules.bytes());
  GrowthNote note;
  bool grew = false;
  if (Block* b = large_.stitch_or_grow(granules, state, fresh, &grew, &note)) {
    if (grew) {
      uint64_t freed = 0, reclaimable = 0;
      if (log_) registry_.waiting(&freed, &reclaimable);
      large_.log_growth(note, reclaimable, quarantine_.synchronizations());
    }
    return b;
  }
  return obtain_under_pressure(cache, granules, for_slab, status);
}

uint64_t DevicePool::room_from_budget(uint64_t bytes) {
  if (!budget_self_) return 0;
  const uint64_t given = budget_.make_room(budget_self_, bytes);
  return given ? given : budget_.reclaim_for(budget_self_, bytes);
}

Block* DevicePool::reclaim_before_growth(ThreadCache* cache, Granules granules, BlockState state,
                                         bool sync_before_growth) {
  // Growing would be next: retire the quarantine first, it may hold enough.
  if (sync_before_growth && quarantine_.holds_any(cache)) {
    if (gate_.sync_and_retire(cache, false))
      if (Block* b = large_.take(granules, state)) return b;
  }
  // Or every thread's, when more waits there than the allowance: other
  // threads' caches and batches too (they would otherwise keep memory the
  // pool grows around), then one sync for all of it.
  if (gate_.reclaim_wanted(granules)) {
    drain_all();
    if (gate_.sync_and_retire(cache, false)) {
      small_.release_all_empty();
      if (Block* b = large_.take(granules, state)) return b;
    }
  }
  // Growing would cut into the headroom: what waits for a sync or sits in
  // thread caches is reclaimed first, as above (docs/POOL.md "Headroom").
  if (large_.growth_cuts_headroom(granules)) {
    drain_all();
    if (gate_.sync_if_waiting(cache)) {
      small_.release_all_empty();
      if (Block* b = large_.take(granules, state)) return b;
    }
  }
  return nullptr;
}

Block* DevicePool::obtain_under_pressure(ThreadCache* cache, Granules granules, bool for_slab, AllocStatus* status) {
  const BlockState state = for_slab ? BlockState::SlabBacking : BlockState::Used;
  Shortfall shortfall;
  for (int attempt = 0;; ++attempt) {
    {
      // Everything idle goes back where this request can reach it, once a
      // reclaim on another thread (the trim thread's) has put back what it
      // took.
      std::lock_guard<std::mutex> reclaim(reclaim_mutex_);
      drain_all();
      gate_.sync_before_refusing(cache);
      small_.release_all_empty();
      small_.trim_tails();
      if (Block* b = large_.take_under_pressure(granules, state, &shortfall)) return b;
    }
    // The device's other pools may hold idle memory, then the other
    // pagefast processes on the device: each asked with this pool's locks
    // left, then once more.
    uint64_t given = attempt == 0 ? room_from_budget(granules.bytes()) : 0;
    if (!given && attempt <= 1 && budget_self_) {
      given = budget_.from_neighbours(granules.bytes());
      attempt = 1;
    }
    if (!given) break;
  }
  oom_.note(granules, for_slab, shortfall, !budget_.limit_bytes());
  if (budget_.limit_bytes()) {
    *status = AllocStatus::OutOfMemory;
  } else {
    *status = AllocStatus::Forward;
    oom_.count_passthrough();
  }
  return nullptr;
}

// ---- peer access ---------------------------------------------------------------

int DevicePool::add_peer(int peer) { return large_.add_peer(peer); }
int DevicePool::remove_peer(int peer) { return large_.remove_peer(peer); }
uint64_t DevicePool::peers() { return large_.peers(); }

}  // namespace pagefast::policy
