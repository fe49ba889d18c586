// policy/device_pool_arena.cpp: DevicePool's use of the arena: prewarm,
// growth, the search for arena memory (obtain, and under pressure), peer
// access and the physical pieces of a block for CUDA IPC. Every arena call
// is made under the device lock (arena_mutex_).
#include <cinttypes>
#include <climits>
#include <cstdio>

#include "policy/device_pool.h"
#include "policy/format.h"

namespace pagefast::policy {

void DevicePool::prewarm() {
  const uint64_t asked_bytes = settings_.config.prewarm_bytes;
  if (!asked_bytes) return;
  const uint64_t target_bytes = prewarm_target_bytes();
  if (target_bytes < asked_bytes && log_) {
    char line[256];
    const uint64_t limit_bytes = settings_.config.limit_bytes;
    std::snprintf(
        line, sizeof line, "prewarm %s is more than device %d has free beside the headroom of %s%s%s; prewarming %s",
        format_bytes(asked_bytes, ByteStyle::Exact).c_str(), settings_.device,
        format_bytes(settings_.config.headroom_bytes, ByteStyle::Exact).c_str(), limit_bytes ? " or the limit of " : "",
        limit_bytes ? format_bytes(limit_bytes, ByteStyle::Exact).c_str() : "",
        format_bytes(target_bytes, ByteStyle::Exact).c_str());
    log_(LogLevel::Warn, line);
  }
  const Granules chunk = max_granules(granules_ceil(settings_.config.chunk_bytes), Granules(1));
  std::lock_guard<std::mutex> guard(arena_mutex_);
  while (arena_.resident().bytes() < target_bytes) {
    const Granules step = min_granules(granules_ceil(target_bytes - arena_.resident().bytes()), chunk);
    const Granules before = arena_.resident();
    // Exactly `step`, without the headroom's give-back: prewarm stays
    // within the headroom by its target, and a give-back here would
    // release the chunks prewarm grew, to grow them again, forever.
    if (grow_by_locked(step, step) != ProviderStatus::Ok || arena_.resident() <= before) break;
  }
}

uint64_t DevicePool::prewarm_target_bytes() {
  uint64_t target_bytes = settings_.config.prewarm_bytes;
  if (settings_.config.limit_bytes && target_bytes > settings_.config.limit_bytes)
    target_bytes = settings_.config.limit_bytes;
  // What the device has free now, less the headroom. A provider that
  // cannot tell its free memory keeps no headroom either (growth never
  // gives back for it): then the device's total is the cap.
  uint64_t free_bytes = 0;
  if (provider_.device_free_bytes(&free_bytes)) {
    const uint64_t room_bytes =
        free_bytes > settings_.config.headroom_bytes ? free_bytes - settings_.config.headroom_bytes : 0;
    if (target_bytes > room_bytes) target_bytes = room_bytes;
  } else if (settings_.device_total_bytes && target_bytes > settings_.device_total_bytes) {
    target_bytes = settings_.device_total_bytes;
  }
  return granules_floor(target_bytes).bytes();
}

// ---- peer access -------------------------------------------------------------

int DevicePool::add_peer(int peer) {
  if (peer < 0 || peer >= kMaxPeerDevices || peer == settings_.device) return 0;
  std::lock_guard<std::mutex> guard(arena_mutex_);
  const uint64_t peers = arena_.peers() | (uint64_t(1) << peer);
  return peers == arena_.peers() ? 0 : arena_.set_peers(peers);
}

int DevicePool::remove_peer(int peer) {
  if (peer < 0 || peer >= kMaxPeerDevices || peer == settings_.device) return 0;
  std::lock_guard<std::mutex> guard(arena_mutex_);
  const uint64_t peers = arena_.peers() & ~(uint64_t(1) << peer);
  return peers == arena_.peers() ? 0 : arena_.set_peers(peers);
}

uint64_t DevicePool::peers() {
  std::lock_guard<std::mutex> guard(arena_mutex_);
  return arena_.peers();
}

// ---- arena memory ----------------------------------------------------------

bool DevicePool::growth_cuts_headroom(Granules granules) {
  const uint64_t headroom = settings_.config.headroom_bytes;
  uint64_t free_bytes = 0;
  return headroom && provider_.device_free_bytes(&free_bytes) && free_bytes < headroom + granules.bytes();
}

Granules DevicePool::growth_step_within_headroom(Granules granules) {
  const uint64_t headroom = settings_.config.headroom_bytes;
  uint64_t free_bytes = 0;
  if (!headroom || !provider_.device_free_bytes(&free_bytes)) return Granules(UINT64_MAX >> kGranuleShift);
  const Granules before = arena_.resident();
  // Growing would cut into the headroom: chunks left wholly free, which
  // this request could not use, go back to the driver first, one by one.
  auto room = [&] {
    const uint64_t now_free = free_bytes + (before - arena_.resident()).bytes();
    return now_free > headroom ? now_free - headroom : 0;
  };
  while (room() < granules.bytes() && arena_.release_free_chunks(1) > 0) {
  }
  if (arena_.resident() < before) headroom_releases_.fetch_add(1, std::memory_order_relaxed);
  // Grow no more than what leaves the headroom free (at least the request:
  // the program's own allocation is served as the driver would serve it).
  return granules_floor(room());
}

ProviderStatus DevicePool::grow_locked(Granules granules) {
  return grow_by_locked(granules, growth_step_within_headroom(granules));
}

ProviderStatus DevicePool::grow_by_locked(Granules granules, Granules max_step) {
  const uint64_t start = clock_.now_ns();
  const ProviderStatus status = arena_.grow(granules, max_step);
  const uint64_t end = clock_.now_ns();
  growth_ns_.fetch_add(end - start, std::memory_order_relaxed);
  const uint64_t mapped = arena_.resident().bytes();
  mapped_bytes_.store(mapped, std::memory_order_relaxed);
  if (mapped > peak_mapped_bytes_.load(std::memory_order_relaxed))
    peak_mapped_bytes_.store(mapped, std::memory_order_relaxed);
  if (status == ProviderStatus::Ok) last_growth_ns_.store(end, std::memory_order_relaxed);
  return status;
}

void DevicePool::note_growth(const GrowthNote& note) {
  if (!log_) return;
  // Where the memory the pool held was when it grew: a growth with much
  // free in short runs is fragmentation, one with much waiting for a sync
  // is the quarantine's (docs/POOL.md "Footprint"). A growth costs a driver
  // call of 0.1 ms and more, so the line's few microseconds do not show.
  uint64_t freed = 0, reclaimable = 0;
  waiting(&freed, &reclaimable);
  const uint64_t held = mapped_bytes_.load(std::memory_order_relaxed);
  char line[384];
  std::snprintf(line, sizeof line,
                "device %d: grew to %" PRIu64 " MiB for a %" PRIu64 " MiB %s: it held %" PRIu64
                " MiB, of which %" PRIu64 " MiB free in %" PRIu64 " runs (the longest %" PRIu64 " MiB) and %" PRIu64
                " MiB waiting for a sync or cached by threads; %" PRIu64 " syncs so far",
                settings_.device, held / kMiB, note.request.bytes() / kMiB, note.for_slab ? "slab" : "block",
                note.held_before / kMiB, note.free.bytes() / kMiB, note.runs, note.longest.bytes() / kMiB,
                reclaimable / kMiB, quarantine_.synchronizations());
  log_(LogLevel::Debug, line);
}

Block* DevicePool::obtain(ThreadCache* cache, Granules granules, bool for_slab, AllocStatus* status, bool* fresh,
                          bool sync_before_growth) {
  const BlockState state = for_slab ? BlockState::SlabBacking : BlockState::Used;
  auto take_existing = [&]() -> Block* {
    Block* b = arena_.take(granules, state);
    return b ? b : arena_.take_stitch(granules, state);
  };
  *fresh = false;
  {
    std::lock_guard<std::mutex> guard(arena_mutex_);
    if (Block* b = take_existing()) return b;
  }
  // Blocks of other sizes in this thread's own cache are the cheapest
  // memory to get back (no driver call): the cache follows current use.
  if (cache && flush_large_cache(*cache)) {
    std::lock_guard<std::mutex> guard(arena_mutex_);
    if (Block* b = take_existing()) return b;
  }
  auto take_locked = [&]() -> Block* {
    std::lock_guard<std::mutex> guard(arena_mutex_);
    return take_existing();
  };
  // Growing would be next: retire the quarantine first, it may hold enough.
  if (sync_before_growth && quarantine_.holds_any(cache)) {
    if (sync_and_retire(cache, false))
      if (Block* b = take_locked()) return b;
  }
  // Or every thread's, when more waits there than the allowance: other
  // threads' caches and batches too (they would otherwise keep memory the
  // pool grows around), then one sync for all of it.
  if (reclaim_wanted(granules)) {
    drain_all();
    if (sync_and_retire(cache, false)) {
      release_all_empty_slabs();
      if (Block* b = take_locked()) return b;
    }
  }
  // Growing would cut into the headroom: what waits for a sync or sits in
  // thread caches is reclaimed first, as above (docs/POOL.md "Headroom").
  if (growth_cuts_headroom(granules)) {
    drain_all();
    if (sync_if_waiting(cache)) {
      release_all_empty_slabs();
      if (Block* b = take_locked()) return b;
    }
  }
  GrowthNote note;
  Block* grown = nullptr;
  {
    std::lock_guard<std::mutex> guard(arena_mutex_);
    if (Block* b = take_existing()) return b;
    *fresh = true;
    // Idle memory that is enough but scattered is stitched rather than
    // grown around, as long as the stitch stays cheap.
    if (arena_.free_home() >= granules)
      if (Block* b = arena_.stitch(granules, kStitchPiecesBeforeGrowth, state)) return b;
    if (arena_.free_home() < granules && arena_.free_home() + arena_.free_stitched() >= granules) {
      arena_.dissolve_free_stitches();
      if (Block* b = arena_.take(granules, state)) return b;
      if (Block* b = arena_.stitch(granules, kStitchPiecesBeforeGrowth, state)) return b;
    }
    if (log_) {
      note.request = granules;
      note.free = arena_.free_home();
      note.longest = arena_.largest_free();
      note.runs = arena_.free_block_count();
      note.held_before = arena_.resident().bytes();
      note.for_slab = for_slab;
    }
    if (grow_locked(granules) == ProviderStatus::Ok) grown = arena_.take(granules, state);
  }
  if (grown) {
    note_growth(note);
    return grown;
  }
  return obtain_under_pressure(cache, granules, for_slab, status);
}

Block* DevicePool::obtain_under_pressure(ThreadCache* cache, Granules granules, bool for_slab, AllocStatus* status) {
  const BlockState state = for_slab ? BlockState::SlabBacking : BlockState::Used;
  // Everything idle goes back where this request can reach it, once a
  // reclaim on another thread (the trim thread's) has put back what it took.
  std::lock_guard<std::mutex> reclaim(reclaim_mutex_);
  drain_all();
  sync_before_refusing(cache);
  release_all_empty_slabs();
  trim_slab_tails();
  {
    std::lock_guard<std::mutex> guard(arena_mutex_);
    Block* b = arena_.take(granules, state);
    if (!b) b = arena_.take_stitch(granules, state);
    if (!b) {
      arena_.dissolve_free_stitches();
      b = arena_.take(granules, state);
    }
    if (!b && arena_.free_home() >= granules) b = arena_.stitch(granules, 0, state);
    if (!b && arena_.free_home() < granules) {
      // Idle memory plus a chunk of the shortfall: the largest request that
      // succeeds is bounded by idle plus device memory, not by the layout.
      const Granules shortfall = granules - arena_.free_home();
      if (shortfall <= arena_.headroom() && grow_locked(shortfall) == ProviderStatus::Ok) {
        b = arena_.take(granules, state);
        if (!b) b = arena_.stitch(granules, 0, state);
      }
    }
    if (b) return b;
    // Out of memory for this request. Idle chunks go back to the driver:
    // without a limit the driver gets the request next and may serve it.
    const uint64_t start = clock_.now_ns();
    const Granules mapped_before = arena_.mapped();
    arena_.release_free_chunks(INT_MAX);
    release_ns_.fetch_add(clock_.now_ns() - start, std::memory_order_relaxed);
    // What went back was memory this request could not use (free runs too
    // short, or big chunks kept from smaller requests): under a limit it
    // makes room to grow for the request itself.
    if (arena_.mapped() < mapped_before && grow_locked(granules) == ProviderStatus::Ok) {
      b = arena_.take(granules, state);
      if (b) return b;
    }
    mapped_bytes_.store(arena_.resident().bytes(), std::memory_order_relaxed);
    ooms_.fetch_add(1, std::memory_order_relaxed);
    note_oom_locked(granules, for_slab, (mapped_before - arena_.mapped()).bytes(), !settings_.config.limit_bytes);
  }
  if (settings_.config.limit_bytes) {
    *status = AllocStatus::OutOfMemory;
  } else {
    *status = AllocStatus::Forward;
    passthroughs_.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

// ---- CUDA IPC --------------------------------------------------------------

bool DevicePool::export_of(const Span* span, uint64_t addr, Export* out) {
  std::lock_guard<std::mutex> guard(arena_mutex_);
  // Under the device lock the block cannot be retired to the arena, cut
  // or stitched while its pieces are read.
  if (!range_of(span, addr, &out->range)) return false;
  const Block* container = arena_block_of(span);
  if (!container) return false;
  const uint64_t first = out->range.base_addr & ~(kGranuleBytes - 1);
  const uint64_t last = out->range.base_addr + out->range.bytes;
  if (first < container->addr()) return false;
  out->first_granule_addr = first;
  out->pieces.clear();
  try {
    return arena_.physical_pieces(container, granules_floor(first - container->addr()), granules_ceil(last - first),
                                  &out->pieces);
  } catch (...) {
    return false;
  }
}

bool DevicePool::holds_chunk(ChunkHandle handle) {
  std::lock_guard<std::mutex> guard(arena_mutex_);
  return arena_.holds_handle(handle);
}

}  // namespace pagefast::policy
