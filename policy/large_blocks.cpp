// policy/large_blocks.cpp: LargeBlocks (large_blocks.h): growth within the
// headroom, the search for arena memory before and under pressure, and
// give-back and release. Sleep, wake, peers and figures are in
// large_blocks_state.cpp.
#include "policy/large_blocks.h"

#include <cinttypes>
#include <climits>
#include <cstdio>

#include "policy/device_budget.h"
#include "policy/format.h"

namespace pagefast::policy {

ArenaSettings arena_settings(const PoolSettings& s) {
  ArenaSettings a;
  a.chunk_granules = max_granules(granules_ceil(s.config.chunk_bytes), Granules(1));
  a.big_chunks = s.config.big_chunks;
  a.ramp = s.slot != 0;
  uint64_t range = s.config.reserve_bytes;
  if (!range) {
    range = kAutoReserveFactor * s.device_total_bytes;
    if (range < kMinReserveBytes) range = kMinReserveBytes;
  }
  a.range_bytes = granules_ceil(range).bytes();
  return a;
}

LargeBlocks::LargeBlocks(Provider& provider, Clock& clock, PageMap& page_map, DevicePool* owner,
                         const PoolSettings& settings, const DeviceBudget& budget, LogSink log)
    : provider_(provider),
      clock_(clock),
      settings_(settings),
      budget_(budget),
      log_(log),
      arena_(provider, page_map, owner, arena_settings(settings)) {
  mirror_figures();
}

// ---- growth ------------------------------------------------------------------

void LargeBlocks::prewarm() {
  const uint64_t asked_bytes = settings_.config.prewarm_bytes;
  if (!asked_bytes) return;
  const uint64_t target_bytes = prewarm_target_bytes();
  if (target_bytes < asked_bytes && log_) {
    char line[256];
    const uint64_t limit_bytes = budget_.limit_bytes();
    std::snprintf(
        line, sizeof line, "prewarm %s is more than device %d has free beside the headroom of %s%s%s; prewarming %s",
        format_bytes(asked_bytes, ByteStyle::Exact).c_str(), settings_.device,
        format_bytes(budget_.headroom_bytes(), ByteStyle::Exact).c_str(), limit_bytes ? " or the limit of " : "",
        limit_bytes ? format_bytes(limit_bytes, ByteStyle::Exact).c_str() : "",
        format_bytes(target_bytes, ByteStyle::Exact).c_str());
    log_(LogLevel::Warn, line);
  }
  const Granules chunk = max_granules(granules_ceil(settings_.config.chunk_bytes), Granules(1));
  DeviceLock guard(*this);
  while (arena_.resident().bytes() < target_bytes) {
    const Granules step = min_granules(granules_ceil(target_bytes - arena_.resident().bytes()), chunk);
    const Granules before = arena_.resident();
    // Exactly `step`, without the headroom's give-back: prewarm stays
    // within the headroom by its target, and a give-back here would
    // release the chunks prewarm grew, to grow them again, forever.
    if (grow_by_locked(step, step) != ProviderStatus::Ok || arena_.resident() <= before) break;
  }
}

uint64_t LargeBlocks::prewarm_target_bytes() {
  uint64_t target_bytes = budget_.within_limit(settings_.config.prewarm_bytes);
  // What the device has free now, less the headroom. A provider that
  // cannot tell its free memory keeps no headroom either (growth never
  // gives back for it): then the device's total is the cap.
  uint64_t free_bytes = 0;
  if (provider_.device_free_bytes(&free_bytes)) {
    const uint64_t room_bytes = budget_.room_above_headroom(free_bytes);
    if (target_bytes > room_bytes) target_bytes = room_bytes;
  } else if (settings_.device_total_bytes && target_bytes > settings_.device_total_bytes) {
    target_bytes = settings_.device_total_bytes;
  }
  return granules_floor(target_bytes).bytes();
}

bool LargeBlocks::growth_cuts_headroom(Granules granules) {
  uint64_t free_bytes = 0;
  return budget_.headroom_bytes() && provider_.device_free_bytes(&free_bytes) &&
         budget_.cuts_headroom(free_bytes, granules.bytes());
}

Granules LargeBlocks::growth_step_within_headroom(Granules granules) {
  uint64_t free_bytes = 0;
  if (!budget_.headroom_bytes() || !provider_.device_free_bytes(&free_bytes))
    return Granules(UINT64_MAX >> kGranuleShift);
  const Granules before = arena_.resident();
  // Growing would cut into the headroom: chunks left wholly free, which
  // this request could not use, go back to the driver first, one by one.
  auto room = [&] { return budget_.room_above_headroom(free_bytes + (before - arena_.resident()).bytes()); };
  while (room() < granules.bytes() && arena_.release_free_chunks(1) > 0) {
  }
  if (arena_.resident() < before) headroom_releases_.fetch_add(1, std::memory_order_relaxed);
  // Grow no more than what leaves the headroom free (at least the request:
  // the program's own allocation is served as the driver would serve it).
  return granules_floor(room());
}

ProviderStatus LargeBlocks::grow_locked(Granules granules) {
  return grow_by_locked(granules, growth_step_within_headroom(granules));
}

ProviderStatus LargeBlocks::grow_by_locked(Granules granules, Granules max_step) {
  const uint64_t start = clock_.now_ns();
  const ProviderStatus status = arena_.grow(granules, max_step, ceiling());
  note_growth(start, status);
  return status;
}

void LargeBlocks::note_growth(uint64_t start, ProviderStatus status) {
  const uint64_t end = clock_.now_ns();
  growth_ns_.fetch_add(end - start, std::memory_order_relaxed);
  const uint64_t mapped = arena_.resident().bytes();
  mapped_bytes_.store(mapped, std::memory_order_relaxed);
  if (mapped > peak_mapped_bytes_.load(std::memory_order_relaxed))
    peak_mapped_bytes_.store(mapped, std::memory_order_relaxed);
  if (status == ProviderStatus::Ok) last_growth_ns_.store(end, std::memory_order_relaxed);
}

void LargeBlocks::log_growth(const GrowthNote& note, uint64_t reclaimable, uint64_t synchronizations) {
  if (!log_) return;
  // Where the memory the pool held was when it grew: a growth with much
  // free in short runs is fragmentation, one with much waiting for a sync
  // is the quarantine's (docs/POOL.md "Footprint"). A growth costs a driver
  // call of 0.1 ms and more, so the line's few microseconds do not show.
  const uint64_t held = mapped_bytes_.load(std::memory_order_relaxed);
  char line[384];
  std::snprintf(line, sizeof line,
                "device %d: grew to %" PRIu64 " MiB for a %" PRIu64 " MiB %s: it held %" PRIu64
                " MiB, of which %" PRIu64 " MiB free in %" PRIu64 " runs (the longest %" PRIu64 " MiB) and %" PRIu64
                " MiB waiting for a sync or cached by threads; %" PRIu64 " syncs so far",
                settings_.device, held / kMiB, note.request.bytes() / kMiB, note.for_slab ? "slab" : "block",
                note.held_before / kMiB, note.free.bytes() / kMiB, note.runs, note.longest.bytes() / kMiB,
                reclaimable / kMiB, synchronizations);
  log_(LogLevel::Debug, line);
}

// ---- taking arena memory -----------------------------------------------------

Block* LargeBlocks::take(Granules granules, BlockState state) {
  DeviceLock guard(*this);
  Block* b = arena_.take(granules, state);
  return b ? b : arena_.take_stitch(granules, state);
}

Block* LargeBlocks::stitch_or_grow(Granules granules, BlockState state, bool* fresh, bool* grew, GrowthNote* note) {
  DeviceLock guard(*this);
  *grew = false;
  if (Block* b = arena_.take(granules, state)) return b;
  if (Block* b = arena_.take_stitch(granules, state)) return b;
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
    note->request = granules;
    note->free = arena_.free_home();
    note->longest = arena_.largest_free();
    note->runs = arena_.free_block_count();
    note->held_before = arena_.resident().bytes();
    note->for_slab = state == BlockState::SlabBacking;
  }
  if (grow_locked(granules) != ProviderStatus::Ok) return nullptr;
  Block* grown = arena_.take(granules, state);
  *grew = grown != nullptr;
  return grown;
}

Block* LargeBlocks::take_under_pressure(Granules granules, BlockState state, Shortfall* shortfall) {
  DeviceLock guard(*this);
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
    const Granules missing = granules - arena_.free_home();
    if (missing <= room_under_limit() && grow_locked(missing) == ProviderStatus::Ok) {
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
  mirror_mapped();
  *shortfall =
      Shortfall{(mapped_before - arena_.mapped()).bytes(), (arena_.free_home() + arena_.free_stitched()).bytes(),
                shortfall_room_bytes(), budget_.limit_bytes()};
  return nullptr;
}

Shortfall LargeBlocks::shortfall() {
  DeviceLock guard(*this);
  return Shortfall{0, (arena_.free_home() + arena_.free_stitched()).bytes(), shortfall_room_bytes(),
                   budget_.limit_bytes()};
}

Granules LargeBlocks::room_under_limit() const {
  const Granules mapped = arena_.mapped(), most = ceiling();
  return mapped >= most ? Granules(0) : most - mapped;
}

uint64_t LargeBlocks::shortfall_room_bytes() const {
  return budget_.limit_bytes() ? room_under_limit().bytes() : kUnlimited;
}

// ---- giving back -------------------------------------------------------------

void LargeBlocks::put_back(Block* block) {
  DeviceLock guard(*this);
  arena_.put_back(block);
}

void LargeBlocks::put_back(Block* const* blocks, int count) {
  DeviceLock guard(*this);
  for (int i = 0; i < count; ++i) arena_.put_back(blocks[i]);
}

bool LargeBlocks::put_back_tail(Block* backing, Granules keep) {
  DeviceLock guard(*this);
  return !backing->stitch && arena_.put_back_tail(backing, keep);
}

void LargeBlocks::dissolve_free_stitches() {
  DeviceLock guard(*this);
  arena_.dissolve_free_stitches();
}

uint64_t LargeBlocks::release_idle(uint64_t bytes) {
  DeviceLock guard(*this);
  const uint64_t start = clock_.now_ns();
  const Granules before = arena_.resident();
  arena_.dissolve_free_stitches();
  if (bytes == kAllIdle) arena_.release_free_chunks(INT_MAX);
  else
    while ((before - arena_.resident()).bytes() < bytes && arena_.release_free_chunks(1) > 0) {
    }
  release_ns_.fetch_add(clock_.now_ns() - start, std::memory_order_relaxed);
  mirror_mapped();
  return (before - arena_.resident()).bytes();
}

void LargeBlocks::trim_chunk() {
  DeviceLock guard(*this);
  const uint64_t start = clock_.now_ns();
  arena_.release_free_chunks(1);
  release_ns_.fetch_add(clock_.now_ns() - start, std::memory_order_relaxed);
  mirror_mapped();
}

uint64_t LargeBlocks::decay_chunk() {
  // One chunk per hold of the device lock: allocations that need it wait
  // for one release at most.
  DeviceLock guard(*this);
  const uint64_t start = clock_.now_ns();
  const uint64_t before = arena_.resident().bytes();
  if (!arena_.release_free_chunks(1)) return 0;
  release_ns_.fetch_add(clock_.now_ns() - start, std::memory_order_relaxed);
  const uint64_t released = before - arena_.resident().bytes();
  mirror_mapped();
  return released;
}

}  // namespace pagefast::policy
