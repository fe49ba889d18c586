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
//  1. the thread cache's bin of the size class, or its large entries (hit);
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
// DevicePool is a router over parts with one concern each, every one built
// with only the side effects it needs and tested alone (tests/policy):
//  - ThreadRegistry (thread_registry.h): attached caches, folded counters;
//  - SmallBlocks (small_blocks.h): size-class centres, slabs, borrow, tails;
//  - LargeBlocks (large_blocks.h): the arena behind the device lock:
//    growth within the headroom, stitching, take/put back, release;
//  - SyncGate (sync_gate.h): when to sync, the allowance, retiring;
//  - ReleasePolicy (release_policy.h): decay and trimming decisions;
//  - SleepGate (sleep_gate.h): the slow paths' gate while asleep;
//  - OomRecorder (oom_record.h): out-of-memory counts and the record.
// The hit path (device_pool_hit.h over thread_cache.h's pop_small and
// pop_large) is inline. What ties the parts is here: the alloc and free
// paths past the hit (device_pool.cpp), what to reclaim before growing
// and under pressure (device_pool_obtain.cpp),
// returning and draining (device_pool_retire.cpp), decay, sleep and wake
// (device_pool_footprint.cpp), contexts and CUDA IPC
// (device_pool_contexts.cpp), stats and the report (pool_report.cpp).
//
// Lock order, outermost first: footprint_mutex_ (decay, sleep, wake) ->
// reclaim_mutex_ (one reclaim of everything idle at a time) -> the
// allowance lock -> the registry lock -> a thread cache's lock -> a
// size-class lock -> the device lock (LargeBlocks) -> the OOM record's
// lock -> the provider's (BudgetedProvider's count). The quarantine's and
// the sleep gate's locks are taken alone. The device's budget is asked
// with none of them held (room_from_budget): it takes other pools' locks.
//
// A thread cache's lock is an OwnerLock (owner_lock.h): a thread other
// than the cache's owner that takes it runs the asymmetric barrier and
// waits for the owner's quick section, with the locks before it in the
// order held; the quick section waits for nothing.
//
// Thread safety: alloc/free take the calling thread's ThreadCache (from
// attach_own_thread, or a shared one under its users' mutex). Any thread
// may free any block; anything else, any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "policy/config.h"
#include "policy/device_budget.h"
#include "policy/large_blocks.h"
#include "policy/log_sink.h"
#include "policy/oom_record.h"
#include "policy/pool_settings.h"
#include "policy/pool_stats.h"
#include "policy/provider.h"
#include "policy/quarantine.h"
#include "policy/release_policy.h"
#include "policy/sleep_gate.h"
#include "policy/small_blocks.h"
#include "policy/sync_gate.h"
#include "policy/thread_cache.h"
#include "policy/thread_registry.h"

namespace pagefast::policy {

enum class AllocStatus { Ok, OutOfMemory, Forward };

// Sleep (docs/POOL.md "Sleep and wake"): kSleepKeep and kSleepFail
// (policy/sleep_gate.h) are the bits of pagefast_sleep's flags.
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

// What the memory report shows for one pool, read without waiting: a part
// whose lock is held (at exit, by a thread stopped anywhere) is marked busy
// and left at zero. The arena's figures (chunks, mapped, free home runs
// ...): ArenaFigures, policy/large_blocks.h; OomRecord:
// policy/oom_record.h; ClassOccupancy: policy/small_blocks.h.
struct PoolReport : ArenaFigures {
  PoolStats stats;
  bool arena_busy = false, classes_busy = false, caches_busy = false, oom_busy = false;
  int class_count = 0;  // entries of `classes` used: classes with slabs
  ClassOccupancy classes[kClassCount];
  OomRecord last_oom;
};

class DevicePool final {
 public:
  // `budget`: the device's (device_budget.h), which this pool and its
  // parts ask for the limit and the headroom; a holder in it once
  // join_budget() was called.
  DevicePool(Provider& provider, Clock& clock, PageMap& page_map, const PoolSettings& settings, DeviceBudget& budget,
             LogSink log);
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

  // NULL on host out-of-memory. attach_own_thread: the cache is the
  // calling thread's own, used by no other thread (its hit needs no locked
  // instruction, owner_lock.h); attach_thread: a cache that threads may
  // share, one at a time under a lock of their own (a region's, the
  // device's fallback cache, a temporary one).
  ThreadCache* attach_own_thread();
  ThreadCache* attach_thread();
  // Flushes the cache (no provider call) and recycles it. Any thread.
  void detach_thread(ThreadCache* cache);

  // REQUIRES: request_bytes > 0. `context`: the context the block is for
  // (blocks_of_context). alloc and free are inline (device_pool_hit.h):
  // alloc is alloc_hit (the thread cache's pop, no call) or alloc_miss.
  AllocStatus alloc(ThreadCache& cache, uint64_t request_bytes, uint64_t* addr, ContextTag context = kNoContextTag);
  bool alloc_hit(ThreadCache& cache, uint64_t request_bytes, uint64_t* addr, ContextTag context);
  AllocStatus alloc_miss(ThreadCache& cache, uint64_t request_bytes, uint64_t* addr, ContextTag context);
  // REQUIRES: span == page_map.lookup(addr), span->pool == this.
  FreeStatus free(ThreadCache& cache, Span* span, uint64_t addr);
  // free() in two steps: free_step, the hit (checks, the live flag, the
  // push; no call, no wait); then, for Seal and Push only, free_finish (the
  // batch sealed, or the block pushed, waiting for the cache's lock, onto
  // a new batch if need be). Invalid changed nothing. With
  // `exported_aside`, a block marked exported (mark_exported) is Exported:
  // nothing changed, its free is the caller's slow path.
  enum class FreeStep { Done, Seal, Push, Invalid, Exported };
  FreeStep free_step(ThreadCache& cache, Span* span, uint64_t addr, bool exported_aside = false);
  void free_finish(FreeStep step, ThreadCache& cache, Span* span, uint64_t addr);
  // Lock-free; false when addr is pool memory but in no live allocation.
  static bool range_of(const Span* span, uint64_t addr, RangeInfo* info);
  // Lock-free: marks the live allocation that starts at `addr` as exported
  // through CUDA IPC, or no longer (ignored for an address that starts no
  // block of `span`). The caller keeps the mark in step with its export
  // records (interpose/ipc/ipc.cpp, under its registry's lock): while it is
  // on, free_step with exported_aside leaves the block's free to the caller.
  static void mark_exported(Span* span, uint64_t addr, bool exported) {
    if (std::atomic<uint8_t>* mark = export_mark(span, addr)) mark->store(exported ? 1 : 0, std::memory_order_relaxed);
  }
  // Lock-free: the mark of the block that starts at `addr` (false for an
  // address that starts no block of `span`).
  static bool exported(const Span* span, uint64_t addr) {
    const std::atomic<uint8_t>* mark = export_mark(span, addr);
    return mark && mark->load(std::memory_order_relaxed) != 0;
  }
  // For CUDA IPC: the live allocation holding addr (its range) and the
  // physical memory of the granules that cover it, in address order.
  // false when addr is in no live allocation or out of host memory.
  struct Export {
    RangeInfo range;
    uint64_t first_granule_addr;  // range.base_addr rounded down to a granule
    PieceList pieces;             // a block within one or two chunks: no heap allocation
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
  void trim() { release(kAllIdle); }
  // As trim(), but the chunks go back one at a time until `bytes` went
  // back. Returns the bytes.
  uint64_t release(uint64_t bytes);

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
  uint64_t footprint_interval_ns() const { return release_.step_interval_ns(); }

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
  bool asleep() const { return sleep_.asleep(); }
  // The host copies a sleep with keep would make now (Arena::keep_sizes),
  // for host memory made ready ahead; takes the device lock, no provider
  // call. Appends nothing while asleep. false on host out of memory.
  bool keep_sizes(std::vector<uint64_t>* out);
  // SleepGate::wait_for_wake: for a caller whose allocation failed at the
  // gate under SleepGate::NoWait (it waits without holding its lock).
  bool wait_for_wake() { return sleep_.wait_for_wake(); }
  // Bytes copied to host memory by the last sleep with kSleepKeep.
  uint64_t kept_bytes();
  // The kept contents of an asleep range (Arena::read_kept), under the
  // device lock; no provider call. The caller keeps wake away meanwhile.
  Arena::KeptRead read_kept(uint64_t addr, uint64_t bytes, void* out);
  // Lock-free, for stats read while a sleep or wake runs: the memory the
  // last sleep released and of it the bytes kept in host memory, as the
  // last sleep or wake left them (0 and 0 when awake).
  struct SleepFigures {
    uint64_t asleep_bytes = 0;
    uint64_t kept_bytes = 0;
  };
  SleepFigures sleep_figures() const {
    return {asleep_bytes_.load(std::memory_order_acquire), asleep_kept_bytes_.load(std::memory_order_acquire)};
  }

  // Never blocks for long: safe at process exit (no provider call).
  PoolStats stats();
  int device() const { return settings_.device; }
  const PoolSettings& settings() const { return settings_; }
  // This pool's holder in its budget (device_budget.h): a growth or a
  // wake that the limit or the driver refused asks the budget for room,
  // with no lock of this pool held, and is tried once more. Set once,
  // before the first allocation; until then (tests of a pool alone) there
  // is no one else to ask, and nothing is given back at a free.
  void join_budget(const Holder* self) {
    budget_self_ = self;
    give_back_mark_ = budget_.give_back_mark_word();
  }
  // Growth ahead (policy/grow_ahead.h, docs/POOL.md "Growth ahead"): a
  // slow path that took arena memory asks `wake` (a service thread's,
  // set once before the first allocation; none: no growth ahead) when the
  // rule gives a step; that thread then calls grow_ahead(), which maps the
  // step (true) without holding the device lock across the driver's calls.
  void set_grow_ahead(void (*wake)()) { ahead_wake_ = wake; }
  bool grow_ahead();
  // Whether a step was asked for and not yet made.
  bool ahead_asked() const { return ahead_asked_.load(std::memory_order_acquire); }

  // Idle bytes for cuMemGetInfo and in-use bytes for the limit.
  uint64_t idle_bytes();
  uint64_t in_use_bytes();
  uint64_t limit_bytes() const { return budget_.limit_bytes(); }
  // Lock-free (the budget reads it for the own-VMM cache's room).
  uint64_t mapped_bytes() const { return large_.mapped_bytes(); }
  // The word mapped_bytes reads (0: the pool holds nothing, idle or in
  // use), for the device's budget to keep (Holder::held_word).
  const std::atomic<uint64_t>* mapped_bytes_word() const { return large_.mapped_bytes_word(); }

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
  using Request = AllocRequest;
  AllocStatus alloc_small_slow(ThreadCache& cache, int class_index, Request request, uint64_t* addr);
  AllocStatus alloc_large_slow(ThreadCache& cache, Granules granules, Request request, uint64_t* addr);
  // A request no pool on this device could hold: the answer, or Ok to go on.
  AllocStatus refuse_beyond_device(Granules granules, Request request);
  bool new_slab(ThreadCache& cache, int class_index, AllocStatus* status);

  // Arena memory of `granules` (device_pool_obtain.cpp), Used or
  // SlabBacking; NULL with *status set on failure. sync_before_growth
  // false: grow rather than retire the quarantine (the thread's batch is
  // not due yet); under pressure everything is retired.
  Block* obtain(ThreadCache* cache, Granules granules, bool for_slab, AllocStatus* status, bool* fresh,
                bool sync_before_growth = true);
  // What waits in quarantines and caches comes back before a growth;
  // NULL when it does not serve the request.
  Block* reclaim_before_growth(ThreadCache* cache, Granules granules, BlockState state, bool sync_before_growth);
  Block* obtain_under_pressure(ThreadCache* cache, Granules granules, bool for_slab, AllocStatus* status);
  // REQUIRES: no lock of this pool held. The other holders of the budget
  // release what a growth of `bytes` needs (under the limit, or from the
  // driver); returns the bytes they released (0: nothing to try again).
  uint64_t room_from_budget(uint64_t bytes);
  // wake() under footprint_mutex_: the arena's wake, the gate opened.
  ProviderStatus wake_once(Arena::WakeResult* result);

  // The bytes a thread's batch of freed blocks may reach before its free
  // seals it and asks the budget to give idle memory back (kNoLimit: no
  // bound). One load on the free path.
  // The budget's give-back mark (kNoLimit without a budget): one load.
  uint64_t give_back_mark() const { return give_back_mark_->load(std::memory_order_relaxed); }
  // After a free filled the cache's batch: seal it (kept by the thread),
  // then the device's idle memory beyond the budget's bound goes back.
  void seal_local_quarantine(ThreadCache& cache);
  // The free's push (device_pool_hit.h; `index`: the block's in its slab,
  // 0 for a large block), and free_finish's (device_pool.cpp).
  bool quarantine_locked(ThreadCache& cache, Span* span, uint32_t index, uint64_t bytes);
  void push_waiting(ThreadCache& cache, Span* span, uint64_t addr);
  // Sealed and filling batches go to the device (drain, trim, threshold).
  void share_local_quarantine(ThreadCache& cache, bool may_trim);

  // returning memory (device_pool_retire.cpp)
  void drain(ThreadCache& cache);
  // Gives the cache's large blocks back to the arena; false if it had none.
  bool flush_large_cache(ThreadCache& cache);
  void drain_all();
  void maybe_trim();
  // decay_step's gathering of idle memory outside whole free chunks.
  uint64_t decay_release(uint64_t bytes);

  Provider& provider_;
  Clock& clock_;
  PageMap& page_map_;
  const PoolSettings settings_;
  const LogSink log_;

  // One reclaim of everything idle at a time (release, out of memory,
  // the decay's drain, sleep): a reclaim takes retired blocks and empty
  // slabs out of the shared lists before it puts them in the arena, and
  // one running beside it would find neither and answer out of memory
  // with that memory idle. Taken before any other lock of the pool, after
  // footprint_mutex_.
  std::mutex reclaim_mutex_;
  std::mutex footprint_mutex_;  // release_ (decay), sleep, wake

  // The parts, each constructed after those it is given.
  LargeBlocks large_;
  SmallBlocks small_;
  alignas(64) Quarantine quarantine_;
  ThreadRegistry registry_;
  SyncGate gate_;
  ReleasePolicy release_;
  SleepGate sleep_;
  OomRecorder oom_;
  DeviceBudget& budget_;
  const Holder* budget_self_ = nullptr;  // joined: the holder's own
  static constexpr std::atomic<uint64_t> kNoGiveBackMark{kNoLimit};
  const std::atomic<uint64_t>* give_back_mark_ = &kNoGiveBackMark;
  // Growth ahead: the step computed now (0: none) and the ask.
  Granules ahead_step();
  uint64_t ahead_ceiling();
  // `request`: the granules the slow path took (the step must be able to
  // serve the next such request).
  void maybe_ask_ahead(Granules request);
  void (*ahead_wake_)() = nullptr;
  std::atomic<bool> ahead_asked_{false};
  std::atomic<uint64_t> ahead_request_{0};      // granules of the last request that asked
  std::atomic<uint64_t> lost_blocks_{0};        // could not be quarantined (host OOM)
  std::atomic<uint64_t> asleep_bytes_{0};       // sleep_figures()
  std::atomic<uint64_t> asleep_kept_bytes_{0};  // sleep_figures()
  // REQUIRES: footprint_mutex_. Reads the arena's figures into the above.
  void note_sleep_figures();
  // REQUIRES footprint_mutex_, asleep: sleep called again.
  SleepStatus sleep_again(unsigned flags, const std::vector<ChunkHandle>& shared);
};

}  // namespace pagefast::policy

#include "policy/device_pool_hit.h"  // IWYU pragma: export
