// policy/device_pool.h: one device's pool: the policy that ties the thread
// caches, the size-class centres (SlabCentral), the quarantine (Quarantine)
// and the arena (Arena) together. It owns the decisions (when to sync,
// where a retired block goes, when to grow, release or stitch); the parts
// own their data.
// Pure C++: every side effect goes through the Provider and Clock it is
// given, so the same object runs on the GPU (interpose/pool/pool.cpp) and
// under fakes in tests/policy.
//
// Allocation, fastest first:
//  1. the thread cache's bin of the size class, or its large slots (hit);
//  2. the thread's quarantine entries that some sync already retired;
//  3. a sync-and-retire into the cache when the thread's own batch is due
//     (sealed, or holding LargeLimits::batch_bytes) or the shared quarantine
//     is (kRetireBlocks blocks, or max(LargeLimits::batch_bytes, mapped / 16));
//  4. the size-class centre (small) or the arena's free runs (large; then
//     the thread's cached blocks of other sizes go back, then its
//     quarantine is retired into its cache);
//  5. before growing: retire the quarantine (if no capture is active), then
//     stitch free memory if that suffices, then grow by max(chunk_bytes, request);
//  6. out of memory: drain every thread cache, retire, hand empty slabs
//     and slabs' free tails back, dissolve free stitches, stitch with
//     growth of the shortfall; then release idle chunks; a small request
//     takes a larger class's free block; else OutOfMemory (with a limit)
//     or Forward (let the real driver try: it may have memory we do not).
//
// Free: page-map lookup, one atomic exchange or CAS that rejects interior
// pointers and double frees, then a push on the thread's quarantine.
//
// Thread safety: alloc/free take the calling thread's ThreadCache (from
// attach_thread). Any thread may free any block; anything else, any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "policy/allowance.h"
#include "policy/arena.h"
#include "policy/config.h"
#include "policy/device_budget.h"
#include "policy/footprint.h"
#include "policy/log_sink.h"
#include "policy/pool_stats.h"
#include "policy/provider.h"
#include "policy/quarantine.h"
#include "policy/slab_central.h"
#include "policy/thread_cache.h"

namespace pagefast::policy {

struct PoolSettings {
  PoolConfig config;
  uint64_t device_total_bytes = 0;  // for the automatic reserve size
  int device = 0;                   // ordinal, for stats and messages
};

// A sync is due once the quarantine holds this many blocks ...
constexpr uint64_t kRetireBlocks = kQuarantineBatchEntries;
// ... or LargeLimits::batch_bytes, or 1/kRetireMappedFraction of the mapped
// memory, whichever is more: large blocks are retired in batches too.
constexpr uint64_t kRetireMappedFraction = 16;
// What one thread keeps to itself for large blocks. Its quarantine batch is
// due for a sync once it holds batch_bytes (so large blocks are retired in
// batches of about that size, one sync each), and its cache keeps retired
// blocks of up to cache_block each and cache_total together, so that the
// batch comes back into the cache whole. A sync costs about 1.3 us on the
// H200 (docs/BENCHMARKS.md): with 256 MiB a 64 MiB loop paid it on every
// 4th pair, with 1 GiB on every 16th. Scaled with the device (1/128 of its
// memory, or of the limit), between 256 MiB and 1 GiB, so that a small card
// is not hoarded; all of it comes back to any thread under pressure.
struct LargeLimits {
  uint64_t batch_bytes;
  Granules cache_block;
  Granules cache_total;
};
constexpr uint64_t kLargeLimitMinBytes = 256 * kMiB;
constexpr uint64_t kLargeLimitMaxBytes = 1 * kGiB;
constexpr uint64_t kLargeLimitDeviceFraction = 128;
LargeLimits large_limits(uint64_t device_total_bytes, uint64_t limit_bytes);
// The adaptive allowance (policy/allowance.h) replaces batch_bytes, between
// these bounds: at least this much (or batch_bytes if less) ...
constexpr uint64_t kAllowanceMinBytes = 64 * kMiB;
// ... and at most 1/this of the device (or the limit), or batch_bytes if
// more: a loop of 1 GiB blocks then syncs every few pairs, not every pair.
constexpr uint64_t kAllowanceDeviceFraction = 32;
Allowance make_allowance(uint64_t slack_ns, uint64_t device_total_bytes, uint64_t limit_bytes);
// Automatic reserve: this many times the device's memory per range.
constexpr uint64_t kAutoReserveFactor = 2;
constexpr uint64_t kMinReserveBytes = 1 * kGiB;
// A stitch made instead of growing may have at most this many pieces
// (each is one map call); under memory pressure there is no bound.
constexpr int kStitchPiecesBeforeGrowth = 64;
// Trimming beyond release_threshold: at most one chunk per step, steps
// this far apart, and none this soon after a growth (a loop that frees
// and re-allocates every step must not pay a release and a growth).
constexpr uint64_t kTrimIntervalNs = 10 * 1000 * 1000;
constexpr uint64_t kTrimGraceAfterGrowthNs = 100 * 1000 * 1000;
// Buffer ids of pool blocks start here, far above the driver's own, so an
// id never names both a pool block and a driver allocation.
constexpr uint64_t kBufferIdBase = uint64_t(0x5046) << 48;  // "PF"

// stats() gives up on a busy lock after this many tries (see stats()).
constexpr int kStatsLockAttempts = 100;

enum class AllocStatus { Ok, OutOfMemory, Forward };

// Sleep (docs/POOL.md "Sleep and wake"): the bits of pagefast_sleep's flags.
constexpr unsigned kSleepKeep = 1;  // contents go to pinned host memory first
constexpr unsigned kSleepFail = 2;  // allocations fail while asleep (default: wait)
enum class SleepStatus {
  Ok,       // done (also: asleep / awake already)
  Busy,     // a stream capture is active, or the device could not be synchronised
  Partial,  // asleep, but some chunks stayed resident (the driver refused; see the log)
  Failed,   // wake: the driver refused memory or a mapping; still asleep, try again
};
enum class FreeStatus { Ok, Invalid };

// What cuMemGetAddressRange and the pointer attributes answer for a live
// pool allocation.
struct RangeInfo {
  uint64_t base_addr;
  uint64_t bytes;  // as requested
  uint64_t buffer_id;
};

// The pool's last out-of-memory answer, kept for the memory report
// (policy/pool_report.h). A fixed struct, written in place under its own
// lock on the OOM path: recording it can never fail or allocate.
struct OomRecord {
  uint64_t count = 0;            // OOM answers so far; 0: none recorded
  uint64_t request_bytes = 0;    // the program's request; 0: not known yet
  uint64_t needed_bytes = 0;     // what the arena could not give (granules or a slab)
  bool for_slab = false;         // a small request that needed a new slab
  bool request_pending = false;  // needed_bytes noted, request_bytes not yet
  uint64_t limit_bytes = 0;      // the limit then; 0: none
  uint64_t released_bytes = 0;   // idle memory released to the driver first
  uint64_t free_bytes = 0;       // free in the pool after that (its own view)
  uint64_t headroom_bytes = 0;   // growth still allowed by the limit; kUnlimited: none
  bool forwarded = false;        // no limit: the real driver got the request
};

// What the memory report shows for one pool, read without waiting: a part
// whose lock is held (at exit, by a thread stopped anywhere) is marked busy
// and left at zero.
struct ClassOccupancy {
  uint32_t block_bytes = 0;
  uint64_t slabs = 0;
  uint64_t blocks_in_use = 0;  // not free in the centre, nor in a thread's bin
  uint64_t free_blocks = 0;    // free in the centre or a thread's bin
};
struct PoolReport {
  PoolStats stats;
  bool arena_busy = false, classes_busy = false, caches_busy = false, oom_busy = false;
  uint64_t chunks = 0;
  Granules mapped, free_home, free_stitched, lent, largest_free_run;
  uint64_t free_blocks = 0;  // free home runs
  int class_count = 0;       // entries of `classes` used: classes with slabs
  ClassOccupancy classes[kClassCount];
  OomRecord last_oom;
};

class DevicePool final {
 public:
  DevicePool(Provider& provider, Clock& clock, PageMap& page_map, const PoolSettings& settings, LogSink log);
  // Frees host records. Production pools are never destroyed (process exit
  // must not touch them); tests destroy theirs once no thread uses them.
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // Creates and maps prewarm_bytes in chunk steps, capped to the limit
  // and to what the device has free less the headroom (one warning when
  // capped). Called once by whoever made the pool, before the first
  // allocation.
  void prewarm();

  // NULL on host out-of-memory. The cache belongs to the calling thread.
  ThreadCache* attach_thread();
  // Flushes the cache (no provider call) and recycles it. Any thread.
  void detach_thread(ThreadCache* cache);

  // REQUIRES: request_bytes > 0. `context`: the context the block is for
  // (blocks_of_context).
  AllocStatus alloc(ThreadCache& cache, uint64_t request_bytes, uint64_t* addr, ContextTag context = kNoContextTag);
  // REQUIRES: span == page_map.lookup(addr), span->pool == this.
  FreeStatus free(ThreadCache& cache, Span* span, uint64_t addr);
  // Lock-free; false when addr is pool memory but in no live allocation.
  static bool range_of(const Span* span, uint64_t addr, RangeInfo* info);
  // For CUDA IPC: the live allocation holding addr (its range) and the
  // physical memory of the granules that cover it, in address order.
  // false when addr is in no live allocation or out of host memory.
  struct Export {
    RangeInfo range;
    uint64_t first_granule_addr;  // range.base_addr rounded down to a granule
    std::vector<PhysicalPiece> pieces;
  };
  bool export_of(const Span* span, uint64_t addr, Export* out);
  // The live allocations made with `context` (their start addresses), for
  // cuCtxDestroy: the driver freed the context's memory, and the glue frees
  // these blocks as the program would have (device_pool_contexts.cpp).
  // Takes the device lock; no provider call. false on host out of memory.
  bool blocks_of_context(ContextTag context, std::vector<uint64_t>* out);
  // Whether `handle` is one of the pool's chunks (the program never gets
  // one: it is refused as the driver refuses a handle it did not make).
  // Takes the device lock; a walk over the chunks.
  bool holds_chunk(ChunkHandle handle);

  // Releases all idle memory that can be: retires the quarantine (sync
  // if allowed), drains thread caches, empty slabs, free stitches, and
  // every chunk left wholly free. May call the provider. Never call it
  // from a destructor.
  void trim() { give_back(kAllIdle); }
  // As trim(), but the chunks go back one at a time until `bytes` went
  // back. Returns the bytes.
  uint64_t give_back(uint64_t bytes);

  // Peer access (docs/POOL.md): device `peer` may now access / may no
  // longer access this pool's memory. Re-applies access on every mapping
  // under the device lock (a slow path; the hot path is untouched) and
  // opens later growth to the new set. Returns how many ranges refused
  // (the set changes anyway); 0 also when nothing changed. An ordinal
  // out of [0, kMaxPeerDevices) or the pool's own device is ignored.
  int add_peer(int peer);
  int remove_peer(int peer);
  // Bit d set: device d has access besides the pool's own.
  uint64_t peers();

  // The footprint policy's step (policy/footprint.h), called by one
  // thread (pagefast-trim) every footprint_interval_ns(): releases idle
  // memory unused for release_delay, at most kDecayStepChunks chunks, the
  // device lock taken per chunk. Returns the bytes released.
  uint64_t decay_step();
  uint64_t footprint_interval_ns() const { return footprint_.step_interval_ns(); }

  // Sleep and wake (docs/POOL.md). sleep: waits for the pool's slow paths,
  // empties every thread cache (so every allocation takes a slow path,
  // where it waits or fails), synchronises, releases idle memory, then
  // unmaps and releases every chunk (kSleepKeep: its contents copied to
  // host memory first); addresses stay reserved. wake: fresh memory at the
  // same addresses, the same access, the kept contents. Frees are served
  // while asleep (host bookkeeping only). Serialised with each other and
  // with decay_step. May call the provider; never from a destructor.
  // `shared`: chunks another process maps (CUDA IPC), which stay resident
  // (Arena::sleep); the answer is then Partial, and the log line counts
  // them.
  SleepStatus sleep(unsigned flags, const std::vector<ChunkHandle>& shared = {});
  SleepStatus wake();
  bool asleep() const { return asleep_.load(std::memory_order_acquire); }
  // Bytes copied to host memory by the last sleep with kSleepKeep.
  uint64_t kept_bytes();

  // Never blocks for long: safe at process exit (no provider call).
  PoolStats stats();
  int device() const { return settings_.device; }
  const PoolSettings& settings() const { return settings_; }
  // Idle bytes for cuMemGetInfo and in-use bytes for the limit.
  uint64_t idle_bytes();
  uint64_t in_use_bytes();
  uint64_t limit_bytes() const { return settings_.config.limit_bytes; }
  // Lock-free (the client VMM cache reads it under its own lock).
  uint64_t mapped_bytes() const { return mapped_bytes_.load(std::memory_order_relaxed); }

  // The memory report's figures (policy/pool_report.cpp). Try-locks only,
  // no provider call: safe at process exit.
  PoolReport report();

  // For tests: arena and accounting consistency. Empty = fine.
  std::string check();
  // The arena's and the size classes' numbers in one line.
  std::string describe();
  // The arena's runs block by block (Arena::layout).
  std::string layout();

 private:
  // alloc paths; `request` is what the program asked for: bytes, context.
  struct Request {
    uint64_t bytes;
    ContextTag context;
  };
  AllocStatus alloc_small_slow(ThreadCache& cache, int class_index, Request request, uint64_t* addr);
  AllocStatus alloc_large(ThreadCache& cache, Request request, uint64_t* addr);
  AllocStatus alloc_large_slow(ThreadCache& cache, Granules granules, Request request, uint64_t* addr);
  bool pop_small(ThreadCache& cache, int class_index, Request request, uint64_t* addr);
  bool pop_large(ThreadCache& cache, Granules granules, Request request, uint64_t* addr);
  void hand_out_large(ThreadCache& cache, Block* block, Request request, bool hit);
  uint64_t next_buffer_id(ThreadCache& cache);
  bool refill_small(ThreadCache& cache, int class_index);
  bool new_slab(ThreadCache& cache, int class_index, AllocStatus* status);
  // A full device's use of idle small-class memory (device_pool_borrow.cpp).
  bool borrow_small(ThreadCache& cache, int class_index, Request request, uint64_t* addr, AllocStatus shortfall);
  uint64_t trim_slab_tails();  // granules given back
  // Arena memory of `granules`, Used; NULL with *status set on failure.
  // sync_before_growth false: grow rather than retire the quarantine (the
  // thread's batch is not due yet); under pressure everything is retired.
  Block* obtain(ThreadCache* cache, Granules granules, bool for_slab, AllocStatus* status, bool* fresh,
                bool sync_before_growth = true);
  Block* obtain_under_pressure(ThreadCache* cache, Granules granules, bool for_slab, AllocStatus* status);
  ProviderStatus grow_locked(Granules granules);
  // REQUIRES: the device lock. A growth of at least `granules`, at most
  // max_step (unless the request is larger), counted in the stats.
  ProviderStatus grow_by_locked(Granules granules, Granules max_step);
  // What prewarm() maps: prewarm_bytes within the limit and the device's room above the headroom.
  uint64_t prewarm_target_bytes();
  // REQUIRES: the device lock. The largest step a growth for `granules`
  // may take and leave the headroom free; first releases chunks wholly
  // free when the request would cut into it (docs/POOL.md "Headroom").
  Granules growth_step_within_headroom(Granules granules);
  // Whether growing by `granules` would leave less than the headroom free
  // (false when the provider cannot tell). No lock needed.
  bool growth_cuts_headroom(Granules granules);

  // quarantine (device_pool_quarantine.cpp): when to sync, and routing
  // The allowance now (policy/allowance.h), its rate sampled at most once
  // per kAllowanceWindowNs. Slow paths only (it may walk the registry).
  uint64_t allowance_now();
  // What may wait for a sync when `request` is what the caller needs: the
  // rate's allowance, at most max(batch_bytes, 4 * request) (the fixed
  // allowance, LargeLimits::batch_bytes, with slack:off).
  uint64_t allowance_for(Granules request);
  // Bytes freed so far (a running total) and bytes waiting for a sync or
  // held in thread caches, over every thread. Takes the registry lock.
  void waiting(uint64_t* freed_total, uint64_t* reclaimable);
  // Before growing by `granules`: whether the memory waiting in every
  // thread's quarantine and cache would cover the request and is over the
  // allowance, or over idle_share of what the pool holds, so that it is
  // reclaimed instead (obtain()).
  bool reclaim_wanted(Granules granules);
  bool quarantine_due(ThreadCache& cache, Granules request);
  // Syncs and retires the shared quarantine and the cache's own. With
  // into_cache, retired blocks refill the cache first (the caller pops
  // next); without, all go central (the caller searches the arena next).
  bool sync_and_retire(ThreadCache* cache, bool into_cache);
  // sync_and_retire(cache, false) where a block of the pool waits in the
  // quarantine (after drain_all); true, and no synchronization, where none does.
  bool sync_if_waiting(ThreadCache* cache);
  // The out-of-memory path's sync, made whether or not a block of the pool
  // waits: the answer must not depend on whether another sync ran before.
  bool sync_before_refusing(ThreadCache* cache);
  // What finished syncs cover, from the cache's own batches (if cache) and
  // the shared list; with into_cache, the cache's own blocks go back to it.
  void retire_covered(ThreadCache* cache, bool into_cache);
  void retire_local(ThreadCache& cache, bool into_cache);
  // At most Quarantine::kMaxRetired entries.
  void retire_entries(ThreadCache* route, const QuarantineEntry* entries, int count);
  // After a free filled the cache's batch: seal it (kept by the thread).
  void seal_local_quarantine(ThreadCache& cache);
  // Sealed and filling batches go to the device (drain, trim, threshold).
  void share_local_quarantine(ThreadCache& cache, bool may_trim);

  // returning memory
  void return_small(const SmallSlot* slots, int count, int class_index);
  void release_slabs(Slab** slabs, int count);
  void give_back_large(Block* block);
  void drain(ThreadCache& cache);
  // Gives the cache's large blocks back to the arena; false if it had none.
  bool flush_large_cache(ThreadCache& cache);
  void drain_all();
  void release_all_empty_slabs();
  void maybe_trim();

  // sleep: the slow paths' gate. Entered before any slow path; false
  // when asleep with kSleepFail (the caller answers out of memory); waits
  // while asleep otherwise. REQUIRES: leave_slow() after a true answer.
  bool enter_slow();
  void leave_slow() { slow_in_flight_.fetch_sub(1, std::memory_order_seq_cst); }
  struct SlowGuard {
    DevicePool* pool;
    ~SlowGuard() { pool->leave_slow(); }
  };

  // accounting
  // The OOM record: the arena's side under the device lock (REQUIRES: it
  // held), then the program's request once the answer is known.
  void note_oom_locked(Granules granules, bool for_slab, uint64_t released_bytes, bool forwarded);
  void note_oom_request(uint64_t request_bytes);
  void fold(ThreadCache& cache);
  void note_peak(uint64_t in_use);
  // What the arena's free memory looked like when a request made it grow
  // (under the device lock, before the growth), for the debug line that
  // note_growth writes once the lock is released.
  struct GrowthNote {
    Granules request, free, longest;
    uint64_t runs = 0;
    uint64_t held_before = 0;
    bool for_slab = false;
  };
  void note_growth(const GrowthNote& note);

  Provider& provider_;
  Clock& clock_;
  PageMap& page_map_;
  const PoolSettings settings_;
  const LargeLimits large_;
  const LogSink log_;

  // The allowance (policy/allowance.h); allowance_mutex_ guards the object,
  // the atomics mirror it for lock-free reads.
  std::mutex allowance_mutex_;
  Allowance allowance_;
  std::atomic<uint64_t> allowance_bytes_;
  std::atomic<uint64_t> seal_bytes_;  // the free path seals a batch at twice this
  std::atomic<uint64_t> allowance_sampled_ns_{0};
  std::atomic<uint64_t> folded_freed_{0};  // freed_bytes of detached caches

  SlabCentral centrals_[kClassCount];

  std::mutex arena_mutex_;  // the device lock
  // One reclaim of everything idle at a time (give_back, out of memory,
  // the decay's drain, sleep): a reclaim takes retired blocks and empty
  // slabs out of the shared lists before it puts them in the arena, and
  // one running beside it would find neither and answer out of memory
  // with that memory idle. Taken before any other lock of the pool, after
  // footprint_mutex_.
  std::mutex reclaim_mutex_;
  Arena arena_;
  std::atomic<uint64_t> mapped_bytes_{0};  // mirror of arena_.mapped(), lock-free reads
  std::atomic<uint64_t> last_growth_ns_{0};
  std::atomic<uint64_t> peak_mapped_bytes_{0};  // written under the device lock
  std::atomic<uint64_t> last_trim_ns_{0};

  alignas(64) Quarantine quarantine_;

  alignas(64) std::mutex registry_mutex_;
  ThreadCache* registry_ = nullptr;
  ThreadCache* spare_caches_ = nullptr;
  ThreadCache* all_caches_ = nullptr;

  // Folded counters: of detached caches, and of slow paths.
  std::atomic<uint64_t> folded_in_use_{0};
  std::atomic<uint64_t> folded_hits_{0};
  std::atomic<uint64_t> peak_in_use_{0};
  std::atomic<uint64_t> passthroughs_{0};
  std::atomic<uint64_t> ooms_{0};
  std::atomic<uint64_t> growth_ns_{0};
  std::atomic<uint64_t> release_ns_{0};
  std::atomic<uint64_t> headroom_releases_{0};  // growths that released chunks first
  std::atomic<uint64_t> lost_blocks_{0};        // could not be quarantined (host OOM)
  // stats(): what it last read under the device lock and the registry
  // lock, repeated by a read that finds one busy (sleep and wake hold the
  // device lock while they copy and map), so that a figure never reads 0
  // meanwhile and a counter never goes back.
  struct LockedFigures {
    std::atomic<uint64_t> reserved_bytes{0}, growths{0}, stitches{0}, releases{0};
    std::atomic<uint64_t> in_use_bytes{0}, hits{0}, cached_bytes{0}, quarantined_bytes{0};
  };
  LockedFigures last_locked_;
  std::mutex oom_mutex_;               // last_oom_; taken on OOM paths only, never at exit
  OomRecord last_oom_, previous_oom_;  // previous: put back when the request was served after all

  // footprint and sleep (device_pool_footprint.cpp)
  std::mutex footprint_mutex_;  // footprint_, sleep, wake, decay_step
  Footprint footprint_;
  uint64_t growths_seen_ = 0;  // arena growths at the last decay step
  uint64_t last_decay_drain_ns_ = 0;
  std::atomic<bool> asleep_{false};
  std::atomic<unsigned> sleep_flags_{0};
  std::atomic<uint64_t> slow_in_flight_{0};
  std::mutex sleep_wait_mutex_;  // with sleep_wait_cv_: slow paths waiting for wake
  std::condition_variable sleep_wait_cv_;
};

// At most this many chunks are released per decay step: the step holds
// the device lock for one chunk at a time and yields it in between.
constexpr int kDecayStepChunks = 8;
// Sleep with keep logs a line before copying at least this much.
constexpr uint64_t kSleepProgressBytes = 1 * kGiB;

}  // namespace pagefast::policy
