// policy/device_pool_quarantine.cpp: DevicePool's quarantine. A thread's
// frees fill its batch; a full batch is sealed and stays with the thread,
// which retires it itself at its next miss (one sync for the batch), so in
// steady state blocks, their records and the batches never travel between
// threads (they did at first: two threads on one pool ran slower than one,
// from cache lines bouncing). A second full batch, a drain, or a finite
// release threshold shares batches with the device instead, where any
// thread's sync retires them to the centres.
#include <new>

#include "policy/device_pool.h"

namespace pagefast::policy {
namespace {

uint64_t entry_bytes(const QuarantineEntry& e) {
  if (e.span->kind == SpanKind::Slab) return static_cast<const Slab*>(e.span)->block_bytes;
  return static_cast<const Block*>(e.span)->granules().bytes();
}

// Moves the retired prefix of `batch` to `out`; returns its bytes.
uint64_t take_retired(const SyncTickets& tickets, QuarantineBatch* batch, QuarantineEntry* out, int* out_count) {
  uint32_t n = 0;
  while (n < batch->count && tickets.retired(batch->entries[n].stamp)) ++n;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < n; ++i) {
    out[(*out_count)++] = batch->entries[i];
    bytes += entry_bytes(batch->entries[i]);
  }
  for (uint32_t i = n; i < batch->count; ++i) batch->entries[i - n] = batch->entries[i];
  batch->count -= n;
  batch->bytes -= bytes;
  return bytes;
}

}  // namespace

QuarantineBatch* DevicePool::take_batch() {
  {
    std::lock_guard<std::mutex> guard(shared_mutex_);
    if (QuarantineBatch* b = spare_batches_) {
      spare_batches_ = b->list_next;
      b->list_next = nullptr;
      return b;
    }
  }
  QuarantineBatch* b = new (std::nothrow) QuarantineBatch();
  if (!b) return nullptr;
  std::lock_guard<std::mutex> guard(shared_mutex_);
  b->all_next = all_batches_;
  all_batches_ = b;
  return b;
}

void DevicePool::give_batch(QuarantineBatch* batch) {
  batch->count = 0;
  batch->bytes = 0;
  batch->owner = nullptr;
  std::lock_guard<std::mutex> guard(shared_mutex_);
  batch->list_next = spare_batches_;
  spare_batches_ = batch;
}

QuarantineBatch* DevicePool::take_cache_batch(ThreadCache& cache) {
  cache.lock.lock();
  QuarantineBatch* b = cache.spare_batch;
  cache.spare_batch = nullptr;
  cache.lock.unlock();
  return b ? b : take_batch();
}

void DevicePool::keep_or_give_batch(ThreadCache& cache, QuarantineBatch* batch) {
  batch->count = 0;
  batch->bytes = 0;
  cache.lock.lock();
  const bool kept = !cache.spare_batch;
  if (kept) cache.spare_batch = batch;
  cache.lock.unlock();
  if (!kept) give_batch(batch);
}

void DevicePool::push_shared(QuarantineBatch* batch, const ThreadCache* owner) {
  batch->owner = owner;
  std::lock_guard<std::mutex> guard(shared_mutex_);
  batch->list_next = nullptr;
  if (shared_tail_) shared_tail_->list_next = batch;
  else shared_ = batch;
  shared_tail_ = batch;
  shared_blocks_.fetch_add(batch->count, std::memory_order_relaxed);
  shared_bytes_.fetch_add(batch->bytes, std::memory_order_relaxed);
}

bool DevicePool::quarantine_nonempty(ThreadCache* cache) {
  if (shared_blocks_.load(std::memory_order_relaxed)) return true;
  if (!cache) return false;
  cache->lock.lock();
  const bool any = cache->quarantine->count != 0 || cache->sealed;
  cache->lock.unlock();
  return any;
}

bool DevicePool::quarantine_due(ThreadCache& cache) {
  cache.lock.lock();
  // A sealed batch is a batch: retiring it now costs one sync for all of it.
  const bool sealed = cache.sealed != nullptr;
  uint64_t blocks = cache.quarantine->count, bytes = cache.quarantine->bytes;
  cache.lock.unlock();
  if (sealed || bytes >= large_.batch_bytes) return true;
  blocks += shared_blocks_.load(std::memory_order_relaxed);
  bytes += shared_bytes_.load(std::memory_order_relaxed);
  uint64_t due_bytes = mapped_bytes_.load(std::memory_order_relaxed) / kRetireMappedFraction;
  if (due_bytes < large_.batch_bytes) due_bytes = large_.batch_bytes;
  return blocks >= kRetireBlocks || bytes >= due_bytes;
}

void DevicePool::seal_local_quarantine(ThreadCache& cache) {
  // With a finite release threshold, memory should flow back to the arena
  // (where it can be trimmed) rather than wait for this thread.
  if (settings_.config.release_threshold_bytes != kUnlimited) {
    share_local_quarantine(cache, true);
    return;
  }
  QuarantineBatch* fresh = take_cache_batch(cache);
  if (!fresh) {
    sync_and_retire(&cache, true);  // no host memory for a batch: make room
    return;
  }
  cache.lock.lock();
  QuarantineBatch* filled = cache.quarantine;
  if (filled->count == 0) {  // drained meanwhile
    cache.lock.unlock();
    keep_or_give_batch(cache, fresh);
    return;
  }
  // Two full batches: this thread frees faster than it allocates, so the
  // older one goes where other threads' syncs can retire it.
  QuarantineBatch* older = cache.sealed;
  if (older) owner_add(cache.quarantined_bytes, uint64_t(0) - older->bytes);
  cache.sealed = filled;
  cache.quarantine = fresh;
  cache.lock.unlock();
  if (older) push_shared(older, &cache);
}

void DevicePool::share_local_quarantine(ThreadCache& cache, bool may_trim) {
  QuarantineBatch* fresh = take_cache_batch(cache);
  if (!fresh) {
    sync_and_retire(&cache, false);
    return;
  }
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
  if (may_trim && (sealed || filling)) maybe_trim();
}

uint64_t DevicePool::newest_stamp(ThreadCache* cache) {
  // What a sync must cover for this caller: its own oldest batch (the
  // sealed one, else the filling one); without one, everything freed so far.
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

bool DevicePool::synchronize_covering(uint64_t stamp) {
  // One sync at a time (a leader), shared by every thread that needs one:
  // on the H200, 16 concurrent cuCtxSynchronize calls took 21 us each
  // against 0.37 us for one. A sync that began after `stamp` covers it;
  // a thread whose stamp came too late for the running sync leads the next.
  std::unique_lock<std::mutex> lock(sync_wait_mutex_);
  while (!tickets_.retired(stamp)) {
    if (sync_running_.load(std::memory_order_relaxed)) {
      const bool covered = tickets_.covered_by_running(stamp);
      // An idle-device sync takes well under a microsecond to a few: spin
      // for it first; sleeping on the condition variable costs a futex
      // wake-up and a reschedule, tens of microseconds.
      lock.unlock();
      for (int spin = 0; spin < kSyncSpins && sync_running_.load(std::memory_order_acquire); ++spin)
        cpu_relax();
      lock.lock();
      sync_wait_cv_.wait(lock, [&] { return !sync_running_.load(std::memory_order_relaxed); });
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

bool DevicePool::sync_and_retire(ThreadCache* cache, bool into_cache) {
  if (!synchronize_covering(newest_stamp(cache))) return false;
  if (cache) retire_local(*cache, into_cache);
  retire_shared(into_cache ? cache : nullptr);
  return true;
}

void DevicePool::retire_shared(ThreadCache* route) {
  if (!shared_blocks_.load(std::memory_order_relaxed)) return;
  QuarantineBatch* ready = nullptr;
  {
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
  }
  while (QuarantineBatch* b = ready) {
    ready = b->list_next;
    retire_entries(route && b->owner == route ? route : nullptr, b->entries, int(b->count));
    give_batch(b);
  }
}

void DevicePool::retire_local(ThreadCache& cache, bool into_cache) {
  QuarantineEntry retired[2 * kQuarantineBatchEntries];
  int n = 0;
  QuarantineBatch* emptied = nullptr;
  cache.lock.lock();
  uint64_t bytes = 0;
  // The sealed batch is older: its entries come first in stamp order.
  if (cache.sealed) {
    bytes += take_retired(tickets_, cache.sealed, retired, &n);
    if (cache.sealed->count == 0) {
      emptied = cache.sealed;
      cache.sealed = nullptr;
    }
  }
  if (!cache.sealed) bytes += take_retired(tickets_, cache.quarantine, retired, &n);
  owner_add(cache.quarantined_bytes, uint64_t(0) - bytes);
  cache.lock.unlock();
  if (emptied) keep_or_give_batch(cache, emptied);
  if (n) retire_entries(into_cache ? &cache : nullptr, retired, n);
}

void DevicePool::retire_entries(ThreadCache* cache, const QuarantineEntry* entries, int count) {
  // `cache` is the route: the retiring thread's own cache first (it freed
  // these, it is likely to ask for the same sizes again); NULL, or
  // overflow, goes central. The oldest cached large blocks make way for
  // newly retired ones: the cache follows what the thread uses now.
  constexpr int kMaxEntries = 2 * kQuarantineBatchEntries;
  SmallSlot small[kMaxEntries];
  int small_count = 0;
  Block* large[kMaxEntries + kLargeCacheSlots];
  int large_count = 0;
  if (cache) cache->lock.lock();
  for (int i = 0; i < count; ++i) {
    const QuarantineEntry& e = entries[i];
    if (e.span->kind == SpanKind::Slab) {
      Slab* slab = static_cast<Slab*>(e.span);
      const SmallSlot slot{slab, uint32_t((e.addr - slab->base_addr()) / slab->block_bytes)};
      if (cache) {
        SmallBin& bin = cache->bins[slab->class_index];
        if (bin.count < kSizeClasses[slab->class_index].cache_blocks) {
          bin.slots[bin.count++] = slot;
          owner_add(cache->cached_bytes, slab->block_bytes);
          continue;
        }
      }
      small[small_count++] = slot;
      continue;
    }
    Block* block = static_cast<Block*>(e.span);
    const Granules g = block->granules();
    if (cache && g <= large_.cache_block) {
      while (cache->large_count &&
             (cache->large_count == kLargeCacheSlots || cache->large_granules + g > large_.cache_total)) {
        const LargeSlot oldest = cache->large[0];
        for (int k = 1; k < cache->large_count; ++k) cache->large[k - 1] = cache->large[k];
        --cache->large_count;
        cache->large_granules -= oldest.granules;
        owner_add(cache->cached_bytes, uint64_t(0) - oldest.granules.bytes());
        large[large_count++] = oldest.block;
      }
      block->store_state(BlockState::Cached);
      cache->large[cache->large_count++] = LargeSlot{block, g};
      cache->large_granules += g;
      owner_add(cache->cached_bytes, g.bytes());
      continue;
    }
    large[large_count++] = block;
  }
  if (cache) cache->lock.unlock();
  // Runs of one class go back under one lock acquisition.
  for (int i = 0; i < small_count;) {
    int j = i + 1;
    while (j < small_count && small[j].slab->class_index == small[i].slab->class_index) ++j;
    return_small(small + i, j - i, small[i].slab->class_index);
    i = j;
  }
  for (int i = 0; i < large_count; ++i) give_back_large(large[i]);
}

}  // namespace pagefast::policy
