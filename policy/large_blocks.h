// policy/large_blocks.h: one device's arena behind the device lock: growth
// (prewarm, the step that leaves the headroom free), taking and putting back
// granules (free runs, free stitches, new stitches), release of free
// chunks, peers, sleep and wake of the chunks, and the figures of all of
// it (mirrors of the stats' figures read without the lock, growth and
// release time).
// Large blocks and slab backing come from here; which memory to reclaim
// before growing is DevicePool's decision (device_pool_obtain.cpp).
//
// Lock: the device lock (mutex_) is the innermost lock of the pool; every
// Arena call is made under it, and nothing here takes another lock while
// holding it. Provider calls are made under it (growth and release are
// slow paths; a sync never is).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "policy/arena.h"
#include "policy/device_budget.h"
#include "policy/log_sink.h"
#include "policy/pool_settings.h"
#include "policy/pool_stats.h"
#include "policy/provider.h"

namespace pagefast::policy {

// Automatic reserve: this many times the device's memory per range.
constexpr uint64_t kAutoReserveFactor = 2;
constexpr uint64_t kMinReserveBytes = 1 * kGiB;
// A stitch made instead of growing may have at most this many pieces
// (each is one map call); under memory pressure there is no bound.
constexpr int kStitchPiecesBeforeGrowth = 64;

ArenaSettings arena_settings(const PoolSettings& settings);

// What the arena's free memory looked like when a request made it grow
// (under the device lock, before the growth), for the debug line that
// log_growth writes once the lock is released.
struct GrowthNote {
  Granules request, free, longest;
  uint64_t runs = 0;
  uint64_t held_before = 0;
  bool for_slab = false;
};

// The arena's side of an out-of-memory answer (policy/oom_record.h).
struct Shortfall {
  uint64_t released_bytes = 0;          // idle memory released to the driver first
  uint64_t free_bytes = 0;              // free in the arena after that
  uint64_t room_under_limit_bytes = 0;  // growth still allowed by the limit; kUnlimited: none
  uint64_t limit_bytes = 0;             // the device's limit (its budget's); 0: none
};

// The arena's figures for the memory report.
struct ArenaFigures {
  uint64_t chunks = 0;
  Granules mapped, free_home, free_stitched, lent, largest_free_run;
  uint64_t free_blocks = 0;  // free home runs
};

class LargeBlocks {
 public:
  // `owner`: the pool whose spans the arena's blocks are (Span::pool);
  // `budget`: the device's, asked for the limit and the headroom.
  LargeBlocks(Provider& provider, Clock& clock, PageMap& page_map, DevicePool* owner, const PoolSettings& settings,
              const DeviceBudget& budget, LogSink log);
  LargeBlocks(const LargeBlocks&) = delete;
  LargeBlocks& operator=(const LargeBlocks&) = delete;
  // The device's budget: the limit and the headroom, for the pool's parts.
  const DeviceBudget& budget() const { return budget_; }

  // Maps prewarm_bytes in chunk steps, capped to the limit and to what the
  // device has free less the headroom (one warning when capped).
  void prewarm();

  // A free run or free stitch of exactly `granules`, now in `state`.
  Block* take(Granules granules, BlockState state);
  // What growth would do: a free run or stitch, a new stitch of free home
  // pieces (at most kStitchPiecesBeforeGrowth), then a growth. *fresh:
  // not a free run or stitch that existed; *grew: a growth served it
  // (*note then says what the arena held before).
  Block* stitch_or_grow(Granules granules, BlockState state, bool* fresh, bool* grew, GrowthNote* note);
  // Everything the arena can do under pressure: dissolve, stitch without
  // bound, grow by the shortfall, release idle chunks and grow for the
  // request. NULL with *shortfall filled (idle chunks released) if not.
  Block* take_under_pressure(Granules granules, BlockState state, Shortfall* shortfall);
  // The shortfall figures now (a request the limit could never hold).
  Shortfall shortfall();
  // Whether growing by `granules` would leave less than the headroom free
  // (false when the provider cannot tell). No lock.
  bool growth_cuts_headroom(Granules granules);
  // Debug line for a growth: where the memory was (reclaimable: waiting
  // for a sync or cached by threads), docs/POOL.md "Footprint".
  void log_growth(const GrowthNote& note, uint64_t reclaimable_bytes, uint64_t synchronizations);

  // REQUIRES: retired (no longer used by anyone).
  void put_back(Block* block);
  void put_back(Block* const* blocks, int count);
  // A slab's free tail (Arena::put_back_tail); false for a stitched slab.
  bool put_back_tail(Block* backing, Granules keep);
  void dissolve_free_stitches();
  // Dissolves free stitches, then releases free chunks until `bytes` went
  // back (kAllIdle: all). Returns the bytes.
  uint64_t release_idle(uint64_t bytes);
  // One free chunk, timed (trimming beyond the release threshold).
  void trim_chunk();
  // One free chunk; its bytes, 0 when none (the decay step).
  uint64_t decay_chunk();

  int add_peer(int peer);
  int remove_peer(int peer);
  uint64_t peers();

  // Sleep: dissolves and releases what is idle, then Arena::sleep (keep:
  // its kSleepKeepModes; a line
  // before copying at least kSleepProgressBytes).
  Arena::SleepResult sleep(unsigned keep, const std::vector<ChunkHandle>& shared, uint64_t* idle_released,
                           uint64_t* idle_ns);
  ProviderStatus wake(Arena::WakeResult* result);
  // A growth right after wake is no sign of a working set to keep.
  void restart_growth_clock() { last_growth_ns_.store(clock_.now_ns(), std::memory_order_relaxed); }

  // visit(arena) under the device lock: the rare paths that read it
  // (CUDA IPC pieces, chunk handles, a context's blocks, tests).
  template <typename Visit>
  auto locked(Visit visit) {
    std::lock_guard<std::mutex> guard(mutex_);
    return visit(static_cast<const Arena&>(arena_));
  }

  // Growth ahead (policy/grow_ahead.h, large_blocks_ahead.cpp): maps
  // `step` granules, the driver's calls made without the device lock; true
  // when the arena grew. Never takes what is mapped over `ceiling_bytes`:
  // a chunk grown on demand meanwhile makes the step give its chunk back.
  // REQUIRES: a pass of the pool's sleep gate.
  bool grow_ahead(Granules step, uint64_t ceiling_bytes);
  uint64_t ahead_growths() const { return ahead_growths_.load(std::memory_order_relaxed); }

  // Lock-free.
  uint64_t mapped_bytes() const { return mapped_bytes_.load(std::memory_order_relaxed); }
  const std::atomic<uint64_t>* mapped_bytes_word() const { return &mapped_bytes_; }
  // Free in home runs, as the last hold of the device lock left it.
  uint64_t free_bytes() const { return free_bytes_.load(std::memory_order_relaxed); }
  uint64_t last_growth_ns() const { return last_growth_ns_.load(std::memory_order_relaxed); }
  uint64_t growths() const { return shown_.growths.load(std::memory_order_relaxed); }
  // The stats' arena figures, lock-free: what the last hold of the device
  // lock left (a sleep, a wake or a growth that holds it now shows the
  // figures from before it; counters never go back, reserved bytes never
  // read 0 while address space is reserved).
  void read_figures(PoolStats* stats);
  // Try-locks only (a few, yielding between them); false when busy.
  bool try_figures(ArenaFigures* out);
  // Consistency (tests): the arena's and the mapped mirror's.
  std::string check();

 private:
  ProviderStatus grow_locked(Granules granules);
  ProviderStatus grow_by_locked(Granules granules, Granules max_step);
  Granules growth_step_within_headroom(Granules granules);
  uint64_t prewarm_target_bytes();
  void mirror_mapped() { mapped_bytes_.store(arena_.resident().bytes(), std::memory_order_relaxed); }
  // After a growth: the mirrors, the peak, the time and its cost.
  void note_growth(uint64_t start_ns, ProviderStatus status);
  // Copies the arena's figures to shown_ (REQUIRES the device lock).
  void mirror_figures();

  // The device lock, held for a scope; its end mirrors the figures before
  // it unlocks, so that every step that changed the arena shows (every
  // return path included) and readers never wait for the lock.
  class DeviceLock {
   public:
    explicit DeviceLock(LargeBlocks& owner) : owner_(owner) { owner_.mutex_.lock(); }
    ~DeviceLock() {
      owner_.mirror_figures();
      owner_.mutex_.unlock();
    }
    DeviceLock(const DeviceLock&) = delete;
    DeviceLock& operator=(const DeviceLock&) = delete;

   private:
    LargeBlocks& owner_;
  };

  // The most the arena may map under the budget's limit (kNoLimitGranules
  // without one: the budget's figure, no lock), and, REQUIRES the device
  // lock, what is left of it.
  Granules ceiling() const { return granules_floor(budget_.within_limit(kNoLimit)); }
  Granules room_under_limit() const;
  // The shortfall's room under the limit (kUnlimited without one).
  uint64_t shortfall_room_bytes() const;

  Provider& provider_;
  Clock& clock_;
  const PoolSettings settings_;
  const DeviceBudget& budget_;
  const LogSink log_;
  std::mutex mutex_;  // the device lock
  Arena arena_;
  std::atomic<uint64_t> mapped_bytes_{0};  // mirror of arena_.resident(), lock-free reads
  std::atomic<uint64_t> last_growth_ns_{0};
  std::atomic<uint64_t> peak_mapped_bytes_{0};  // written under the device lock
  std::atomic<uint64_t> growth_ns_{0};
  std::atomic<uint64_t> release_ns_{0};
  std::atomic<uint64_t> headroom_releases_{0};  // growths that released chunks first
  std::atomic<uint64_t> free_bytes_{0};         // mirror of arena_.free_home()
  std::atomic<uint64_t> ahead_growths_{0};      // growths made ahead (grow_ahead)
  // The figures as the last hold of the device lock left them (written
  // under it by DeviceLock, read without it).
  struct ShownFigures {
    std::atomic<uint64_t> reserved_bytes{0}, growths{0}, stitches{0}, releases{0};
  };
  ShownFigures shown_;
};

// Sleep with keep logs a line before copying at least this much.
constexpr uint64_t kSleepProgressBytes = 1 * kGiB;

}  // namespace pagefast::policy
