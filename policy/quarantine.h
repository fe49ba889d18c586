// policy/quarantine.h: freed blocks wait here until device work that may
// still use them has finished. cuMemFree synchronises implicitly; the pool
// instead stamps each freed block with a sync ticket and reuses it only
// after a synchronize() that began later has completed, so one sync
// retires a whole batch (0.7 us on an idle H200, docs/DRIVER-FACTS.md, shared by up to
// kQuarantineBatchEntries frees) and no lock is taken to free.
//
// Tickets: `started` counts syncs begun. A free reads it (value k); a sync
// takes ticket t with a read-modify-write of it. If t >= k, that RMW came
// after the free's read in the single order of seq_cst operations, so the
// sync began after the free's caller had submitted its work, and waits for
// it. `retired` is one more than the highest ticket of a finished sync:
// a block stamped k may be reused once k < retired.
//
// Quarantine (below) owns the tickets, the batches, the shared list and
// the syncs; it decides nothing about when to sync nor where retired
// blocks go: SyncGate does (sync_gate.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "policy/blocks.h"
#include "policy/page_map.h"
#include "policy/provider.h"

namespace pagefast::policy {

struct ThreadCache;

class SyncTickets {
 public:
  // The stamp of a block freed now.
  uint64_t stamp() const { return started_.load(std::memory_order_seq_cst); }
  // Called right before synchronize().
  uint64_t begin() { return started_.fetch_add(1, std::memory_order_seq_cst); }
  // Called after synchronize() returned, Done or not, for ticket t.
  void finish(uint64_t ticket, bool done) {
    raise(finished_, ticket + 1);
    if (done) raise(retired_, ticket + 1);
  }
  bool retired(uint64_t stamp) const { return stamp < retired_.load(std::memory_order_acquire); }
  // A sync that covers `stamp` has begun (it may not have finished).
  bool covered_by_running(uint64_t stamp) const { return stamp < started_.load(std::memory_order_seq_cst); }
  // A sync that covers `stamp` has finished, successfully or not.
  bool finished(uint64_t stamp) const { return stamp < finished_.load(std::memory_order_acquire); }

 private:
  static void raise(std::atomic<uint64_t>& value, uint64_t to) {
    uint64_t seen = value.load(std::memory_order_relaxed);
    while (seen < to && !value.compare_exchange_weak(seen, to, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }

  // Each on a line of its own: every free reads `started`, every retire
  // reads `retired`, and syncs of any thread write them.
  alignas(64) std::atomic<uint64_t> started_{0};
  alignas(64) std::atomic<uint64_t> retired_{0};
  std::atomic<uint64_t> finished_{0};
};

struct QuarantineEntry {
  Span* span;      // the Slab or the Block
  uint32_t index;  // a small block's index in its Slab (0 for a Block)
  uint64_t stamp;
};

// Entries of one thread, in free order, so stamps never decrease: the
// retired ones are always a prefix, and the last stamp is the batch's.
constexpr int kQuarantineBatchEntries = 64;

struct QuarantineBatch {
  uint32_t count = 0;
  uint64_t bytes = 0;
  QuarantineBatch* list_next = nullptr;  // the shared list, or the MetaPool's
  // The cache that filled it: when its own thread retires it, the blocks
  // go back to that thread's cache first.
  const ThreadCache* owner = nullptr;
  QuarantineEntry entries[kQuarantineBatchEntries];

  bool full() const { return count == kQuarantineBatchEntries; }
  uint64_t last_stamp() const { return entries[count - 1].stamp; }
};

// A thread waiting for another's sync spins this many pauses (~40 ns
// each, about 80 us) before it sleeps.
constexpr int kSyncSpins = 2000;
// Batches are made this many at a time (about 1.6 KiB each).
constexpr int kQuarantineBatchRefill = 8;

// One device's quarantine. Thread-safe. A thread's own batches live in its
// ThreadCache (quarantine, sealed, spare_batch, quarantined_bytes, under
// cache.lock): the free path pushes onto `quarantine` itself, stamped with
// stamp(); the operations below that take a ThreadCache work on those
// fields. Nothing is held across Provider::synchronize().
class Quarantine {
 public:
  Quarantine(Provider& provider, Clock& clock) : provider_(provider), clock_(clock) {}
  // Frees every batch (tests; production pools live as long as the process).
  ~Quarantine() = default;
  Quarantine(const Quarantine&) = delete;
  Quarantine& operator=(const Quarantine&) = delete;

  // ---- stamps --------------------------------------------------------------
  // The stamp of a block freed now (the free path: one load).
  uint64_t stamp() const { return tickets_.stamp(); }
  bool retired(uint64_t stamp) const { return tickets_.retired(stamp); }

  // ---- batches -------------------------------------------------------------
  // An empty batch; NULL when the host is out of memory.
  QuarantineBatch* take_batch();
  void give_batch(QuarantineBatch* batch);

  // ---- a thread's batches --------------------------------------------------
  enum class Handoff {
    NoBatch,  // no host memory for a fresh batch: nothing changed
    Nothing,  // nothing to hand off (emptied meanwhile)
    Done,
  };
  // After a free filled the cache's batch: it becomes the sealed one (kept
  // by the thread); an older sealed batch is shared.
  Handoff seal(ThreadCache& cache);
  // The sealed and the filling batch are shared (drain, trim, threshold).
  Handoff share(ThreadCache& cache);
  // Moves the retired entries of the cache's batches to `out` (at most
  // kMaxRetired), oldest first; returns how many.
  static constexpr int kMaxRetired = 2 * kQuarantineBatchEntries;
  int take_retired(ThreadCache& cache, QuarantineEntry* out);
  // What the cache's own batches hold (for the caller's sync decision).
  struct Load {
    bool sealed;             // a full batch waits
    uint64_t blocks, bytes;  // in the filling batch
  };
  Load local_load(ThreadCache& cache);
  // Anything shared, or (cache non-NULL) in the cache's own batches.
  bool holds_any(ThreadCache* cache);
  // The stamp a sync must cover for this caller: its own oldest batch's
  // last; without one (or cache NULL), everything freed so far.
  uint64_t newest_stamp(ThreadCache* cache);

  // ---- the shared list -----------------------------------------------------
  void push_shared(QuarantineBatch* batch, const ThreadCache* owner);
  uint64_t shared_blocks() const { return shared_blocks_.load(std::memory_order_relaxed); }
  uint64_t shared_bytes() const { return shared_bytes_.load(std::memory_order_relaxed); }
  // Takes every shared batch that a finished sync retired and hands each
  // to route(owner, entries, count), then recycles it.
  template <typename Route>
  void retire_shared(Route&& route) {
    QuarantineBatch* b = take_retired_shared();
    while (b) {
      QuarantineBatch* next = b->list_next;
      route(b->owner, static_cast<const QuarantineEntry*>(b->entries), int(b->count));
      give_batch(b);
      b = next;
    }
  }

  // ---- syncs ---------------------------------------------------------------
  // Returns once a successful sync covers `stamp` (false: it failed or was
  // refused). Threads share syncs: one runs at a time.
  bool synchronize_covering(uint64_t stamp);
  uint64_t synchronizations() const { return synchronizations_.load(std::memory_order_relaxed); }
  uint64_t synchronization_ns() const { return synchronization_ns_.load(std::memory_order_relaxed); }

 private:
  // The retired shared batches, unlinked (a list through list_next).
  QuarantineBatch* take_retired_shared();
  // REQUIRES: lock holds sync_wait_mutex_. Returns, holding it again, once
  // no sync runs (spinning first, then on the condition variable).
  void wait_for_running(std::unique_lock<std::mutex>& lock);
  // An empty batch for a seal or share: the cache's spare, or a new one.
  QuarantineBatch* take_cache_batch(ThreadCache& cache);
  void keep_or_give_batch(ThreadCache& cache, QuarantineBatch* batch);

  Provider& provider_;
  Clock& clock_;

  SyncTickets tickets_;
  std::mutex sync_wait_mutex_;  // guards sync_running_; with sync_wait_cv_
  std::condition_variable sync_wait_cv_;
  std::atomic<bool> sync_running_{false};  // written under sync_wait_mutex_
  std::mutex shared_mutex_;                // the shared list and the batch pool
  QuarantineBatch* shared_ = nullptr;
  QuarantineBatch* shared_tail_ = nullptr;
  MetaPool<QuarantineBatch, kQuarantineBatchRefill> batches_;
  alignas(64) std::atomic<uint64_t> shared_blocks_{0};
  std::atomic<uint64_t> shared_bytes_{0};
  std::atomic<uint64_t> synchronizations_{0};
  std::atomic<uint64_t> synchronization_ns_{0};
};

}  // namespace pagefast::policy
