// policy/quarantine.cpp: the quarantine's batches, shared list and syncs.
// A thread's frees fill its batch; a full batch is sealed and stays with
// the thread, which retires it itself at its next miss (one sync for the
// batch), so in steady state blocks, their records and the batches never
// travel between threads (they did at first: two threads on one pool ran
// slower than one, from cache lines bouncing). A second full batch, a
// drain, or a finite release threshold shares batches instead, where any
// thread's sync retires them.
#include "policy/quarantine.h"

#include <cstring>

#include "policy/spin.h"
#include "policy/thread_cache.h"

namespace pagefast::policy {
namespace {

uint64_t entry_bytes(const QuarantineEntry& e) {
  if (e.span->kind == SpanKind::Slab) return static_cast<const Slab*>(e.span)->block_bytes;
  return static_cast<const Block*>(e.span)->granules().bytes();
}

// Moves the retired prefix of `batch` to `out`; returns its bytes. Stamps
// never decrease within a batch: when its last entry is retired, all of it
// is (the common case, a sync that covered the batch), taken with one
// check and one copy, its bytes the batch's own count.
uint64_t take_retired_prefix(const SyncTickets& tickets, QuarantineBatch* batch, QuarantineEntry* out, int* out_count) {
  const uint32_t count = batch->count;
  if (count == 0) return 0;
  uint32_t n = count;
  if (!tickets.retired(batch->entries[count - 1].stamp)) {
    n = 0;
    while (n < count && tickets.retired(batch->entries[n].stamp)) ++n;
    if (n == 0) return 0;
  }
  std::memcpy(out + *out_count, batch->entries, n * sizeof(QuarantineEntry));
  *out_count += int(n);
  uint64_t bytes = batch->bytes;
  if (n < count) {
    bytes = 0;
    for (uint32_t i = 0; i < n; ++i) bytes += entry_bytes(batch->entries[i]);
    std::memmove(batch->entries, batch->entries + n, (count - n) * sizeof(QuarantineEntry));
  }
  batch->count = count - n;
  batch->bytes -= bytes;
  return bytes;
}

}  // namespace

// ---- batches ---------------------------------------------------------------

QuarantineBatch* Quarantine::take_batch() {
  std::lock_guard<std::mutex> guard(shared_mutex_);
  return batches_.take();
}

void Quarantine::give_batch(QuarantineBatch* batch) {
  batch->count = 0;
  batch->bytes = 0;
  batch->owner = nullptr;
  std::lock_guard<std::mutex> guard(shared_mutex_);
  batches_.give(batch);
}

QuarantineBatch* Quarantine::take_cache_batch(ThreadCache& cache) {
  cache.lock.lock();
  QuarantineBatch* b = cache.spare_batch;
  cache.spare_batch = nullptr;
  cache.lock.unlock();
  return b ? b : take_batch();
}

void Quarantine::keep_or_give_batch(ThreadCache& cache, QuarantineBatch* batch) {
  batch->count = 0;
  batch->bytes = 0;
  cache.lock.lock();
  const bool kept = !cache.spare_batch;
  if (kept) cache.spare_batch = batch;
  cache.lock.unlock();
  if (!kept) give_batch(batch);
}

// ---- a thread's batches ------------------------------------------------------

Quarantine::Handoff Quarantine::seal(ThreadCache& cache) {
  QuarantineBatch* fresh = take_cache_batch(cache);
  if (!fresh) return Handoff::NoBatch;
  cache.lock.lock();
  QuarantineBatch* filled = cache.quarantine;
  if (filled->count == 0) {  // drained meanwhile
    cache.lock.unlock();
    keep_or_give_batch(cache, fresh);
    return Handoff::Nothing;
  }
  // Two full batches: this thread frees faster than it allocates, so the
  // older one goes where other threads' syncs can retire it.
  QuarantineBatch* older = cache.sealed;
  if (older) owner_add(cache.quarantined_bytes, uint64_t(0) - older->bytes);
  cache.sealed = filled;
  cache.quarantine = fresh;
  cache.lock.unlock();
  if (older) push_shared(older, &cache);
  return Handoff::Done;
}

Quarantine::Handoff Quarantine::share(ThreadCache& cache) {
  QuarantineBatch* fresh = take_cache_batch(cache);
  if (!fresh) return Handoff::NoBatch;
  cache.lock.lock();
  QuarantineBatch* sealed = cache.sealed;
  cache.sealed = nullptr;
  QuarantineBatch* filling = nullptr;
  if (cache.quarantine->count) {
    filling = cache.quarantine;
    cache.quarantine = fresh;
    fresh = nullptr;
  }
  uint64_t moved = (sealed ? sealed->bytes : 0) + (filling ? filling->bytes : 0);
  owner_add(cache.quarantined_bytes, uint64_t(0) - moved);
  cache.lock.unlock();
  if (fresh) keep_or_give_batch(cache, fresh);
  if (sealed) push_shared(sealed, &cache);
  if (filling) push_shared(filling, &cache);
  return sealed || filling ? Handoff::Done : Handoff::Nothing;
}

int Quarantine::take_retired(ThreadCache& cache, QuarantineEntry* out) {
  int n = 0;
  QuarantineBatch* emptied = nullptr;
  cache.lock.lock();
  uint64_t bytes = 0;
  // The sealed batch is older: its entries come first in stamp order.
  if (cache.sealed) {
    bytes += take_retired_prefix(tickets_, cache.sealed, out, &n);
    if (cache.sealed->count == 0) {
      emptied = cache.sealed;
      cache.sealed = nullptr;
    }
  }
  if (!cache.sealed) bytes += take_retired_prefix(tickets_, cache.quarantine, out, &n);
  owner_add(cache.quarantined_bytes, uint64_t(0) - bytes);
  cache.lock.unlock();
  if (emptied) keep_or_give_batch(cache, emptied);
  return n;
}

Quarantine::Load Quarantine::local_load(ThreadCache& cache) {
  cache.lock.lock();
  const Load load{cache.sealed != nullptr, cache.quarantine->count, cache.quarantine->bytes};
  cache.lock.unlock();
  return load;
}

bool Quarantine::holds_any(ThreadCache* cache) {
  if (shared_blocks_.load(std::memory_order_relaxed)) return true;
  if (!cache) return false;
  cache->lock.lock();
  const bool any = cache->quarantine->count != 0 || cache->sealed;
  cache->lock.unlock();
  return any;
}

uint64_t Quarantine::newest_stamp(ThreadCache* cache) {
  // The sealed batch if any, else the filling one.
  if (cache) {
    cache->lock.lock();
    QuarantineBatch* oldest = cache->sealed ? cache->sealed : cache->quarantine;
    const bool any = oldest->count != 0;
    const uint64_t stamp = any ? oldest->last_stamp() : 0;
    cache->lock.unlock();
    if (any) return stamp;
  }
  return tickets_.stamp();
}

// ---- the shared list ---------------------------------------------------------

void Quarantine::push_shared(QuarantineBatch* batch, const ThreadCache* owner) {
  batch->owner = owner;
  std::lock_guard<std::mutex> guard(shared_mutex_);
  batch->list_next = nullptr;
  if (shared_tail_) shared_tail_->list_next = batch;
  else shared_ = batch;
  shared_tail_ = batch;
  shared_blocks_.fetch_add(batch->count, std::memory_order_relaxed);
  shared_bytes_.fetch_add(batch->bytes, std::memory_order_relaxed);
}

QuarantineBatch* Quarantine::take_retired_shared() {
  if (!shared_blocks_.load(std::memory_order_relaxed)) return nullptr;
  QuarantineBatch* ready = nullptr;
  std::lock_guard<std::mutex> guard(shared_mutex_);
  QuarantineBatch* prev = nullptr;
  for (QuarantineBatch* b = shared_; b;) {
    QuarantineBatch* next = b->list_next;
    if (tickets_.retired(b->last_stamp())) {
      if (prev) prev->list_next = next;
      else shared_ = next;
      if (shared_tail_ == b) shared_tail_ = prev;
      shared_blocks_.fetch_sub(b->count, std::memory_order_relaxed);
      shared_bytes_.fetch_sub(b->bytes, std::memory_order_relaxed);
      b->list_next = ready;
      ready = b;
    } else {
      prev = b;
    }
    b = next;
  }
  return ready;
}

// ---- syncs -------------------------------------------------------------------

void Quarantine::wait_for_running(std::unique_lock<std::mutex>& lock) {
  // An idle-device sync takes well under a microsecond to a few: spin for
  // it first; sleeping on the condition variable costs a futex wake-up and
  // a reschedule, tens of microseconds.
  lock.unlock();
  for (int spin = 0; spin < kSyncSpins && sync_running_.load(std::memory_order_acquire); ++spin) cpu_relax();
  lock.lock();
  sync_wait_cv_.wait(lock, [&] { return !sync_running_.load(std::memory_order_relaxed); });
}

bool Quarantine::synchronize_covering(uint64_t stamp) {
  // One sync at a time (a leader), shared by every thread that needs one:
  // on the H200, 16 concurrent cuCtxSynchronize calls took 21 us each
  // against 0.37 us for one. A sync that began after `stamp` covers it;
  // a thread whose stamp came too late for the running sync leads the next.
  std::unique_lock<std::mutex> lock(sync_wait_mutex_);
  while (!tickets_.retired(stamp)) {
    if (sync_running_.load(std::memory_order_relaxed)) {
      const bool covered = tickets_.covered_by_running(stamp);
      wait_for_running(lock);
      if (covered && !tickets_.retired(stamp)) return false;  // that sync failed or was refused
      continue;
    }
    sync_running_.store(true, std::memory_order_relaxed);
    lock.unlock();
    const uint64_t ticket = tickets_.begin();
    const uint64_t start = clock_.now_ns();
    const SyncStatus status = provider_.synchronize();
    synchronization_ns_.fetch_add(clock_.now_ns() - start, std::memory_order_relaxed);
    tickets_.finish(ticket, status == SyncStatus::Done);
    if (status == SyncStatus::Done) synchronizations_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    sync_running_.store(false, std::memory_order_release);
    sync_wait_cv_.notify_all();
    if (status != SyncStatus::Done) return false;
  }
  return true;
}

}  // namespace pagefast::policy
