// policy/thread_registry.cpp: ThreadRegistry (thread_registry.h) and the
// process-wide buffer ids the thread caches take in ranges.
#include "policy/thread_registry.h"

#include <sched.h>

#include <new>

#include "policy/state.h"

namespace pagefast::policy {
void take_buffer_ids(ThreadCache& cache) {
  cache.next_buffer_id = g_state.next_buffer_id.fetch_add(kBufferIdBatch, std::memory_order_relaxed);
  cache.buffer_id_end = cache.next_buffer_id + kBufferIdBatch;
}

ThreadRegistry::~ThreadRegistry() {
  while (ThreadCache* c = all_caches_) {
    all_caches_ = c->all_next;
    delete c;
  }
}

ThreadCache* ThreadRegistry::attach(bool own) {
  std::lock_guard<std::mutex> guard(mutex_);
  ThreadCache* cache = spare_caches_;
  if (cache) {
    spare_caches_ = cache->registry_next;
  } else {
    cache = new (std::nothrow) ThreadCache();
    if (!cache) return nullptr;
    cache->quarantine = quarantine_.take_batch();
    if (!cache->quarantine) {
      delete cache;
      return nullptr;
    }
    cache->all_next = all_caches_;
    all_caches_ = cache;
  }
  cache->pool = owner_;
  if (own) cache->lock.own();
  else cache->lock.disown();
  cache->registry_prev = nullptr;
  cache->registry_next = registry_;
  if (registry_) registry_->registry_prev = cache;
  registry_ = cache;
  return cache;
}

void ThreadRegistry::detach(ThreadCache* cache) {
  std::lock_guard<std::mutex> guard(mutex_);
  // Under the registry lock, so that waiting() sees the total move whole.
  cache->lock.lock();
  folded_freed_.fetch_add(cache->freed_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  cache->freed_bytes.store(0, std::memory_order_relaxed);
  cache->lock.unlock();
  cache->lock.disown();
  if (cache->registry_prev) cache->registry_prev->registry_next = cache->registry_next;
  else registry_ = cache->registry_next;
  if (cache->registry_next) cache->registry_next->registry_prev = cache->registry_prev;
  cache->registry_prev = nullptr;
  cache->registry_next = spare_caches_;
  spare_caches_ = cache;
}

void ThreadRegistry::fold(ThreadCache& cache) {
  cache.lock.lock();
  const uint64_t in_use = cache.in_use_delta.load(std::memory_order_relaxed);
  const uint64_t hits = cache.hits.load(std::memory_order_relaxed);
  cache.in_use_delta.store(0, std::memory_order_relaxed);
  cache.hits.store(0, std::memory_order_relaxed);
  cache.lock.unlock();
  folded_hits_.fetch_add(hits, std::memory_order_relaxed);
  note_peak(folded_in_use_.fetch_add(in_use, std::memory_order_relaxed) + in_use);
}

void ThreadRegistry::note_peak(uint64_t in_use) {
  // in_use_delta sums wrap; a transiently "negative" total is no peak.
  if (int64_t(in_use) < 0) return;
  uint64_t peak = peak_in_use_.load(std::memory_order_relaxed);
  while (in_use > peak && !peak_in_use_.compare_exchange_weak(peak, in_use, std::memory_order_relaxed)) {
  }
}

uint64_t ThreadRegistry::in_use_bytes() {
  uint64_t sum = folded_in_use_.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (ThreadCache* c = registry_; c; c = c->registry_next) sum += c->in_use_delta.load(std::memory_order_relaxed);
  }
  note_peak(sum);
  return int64_t(sum) < 0 ? 0 : sum;
}

void ThreadRegistry::waiting(uint64_t* freed_total, uint64_t* reclaimable) {
  uint64_t freed = folded_freed_.load(std::memory_order_relaxed);
  uint64_t held = quarantine_.shared_bytes();
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (ThreadCache* c = registry_; c; c = c->registry_next) {
      freed += c->freed_bytes.load(std::memory_order_relaxed);
      held += c->quarantined_bytes.load(std::memory_order_relaxed) + c->cached_bytes.load(std::memory_order_relaxed);
    }
  }
  *freed_total = freed;
  *reclaimable = held;
}

void ThreadRegistry::read_figures(PoolStats* s) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  if (try_lock_patiently(mutex_)) {
    s->in_use_bytes = folded_in_use_.load(kRelaxed);
    s->hits = folded_hits_.load(kRelaxed);
    for (ThreadCache* c = registry_; c; c = c->registry_next) {
      s->in_use_bytes += c->in_use_delta.load(kRelaxed);
      s->hits += c->hits.load(kRelaxed);
      s->cached_bytes += c->cached_bytes.load(kRelaxed);
      s->quarantined_bytes += c->quarantined_bytes.load(kRelaxed);
    }
    if (int64_t(s->in_use_bytes) < 0) s->in_use_bytes = 0;
    last_.in_use_bytes.store(s->in_use_bytes, kRelaxed);
    last_.hits.store(s->hits, kRelaxed);
    last_.cached_bytes.store(s->cached_bytes, kRelaxed);
    last_.quarantined_bytes.store(s->quarantined_bytes, kRelaxed);
    mutex_.unlock();
  } else {
    s->in_use_bytes = last_.in_use_bytes.load(kRelaxed);
    // The counter never reads lower than what detached threads folded in,
    // also before a first read under the lock.
    const uint64_t last_hits = last_.hits.load(kRelaxed), folded = folded_hits_.load(kRelaxed);
    s->hits = last_hits > folded ? last_hits : folded;
    s->cached_bytes = last_.cached_bytes.load(kRelaxed);
    s->quarantined_bytes = last_.quarantined_bytes.load(kRelaxed);
  }
  note_peak(s->in_use_bytes);
}

bool ThreadRegistry::count_bins(uint64_t in_bins[kClassCount]) {
  std::unique_lock<std::mutex> guard(mutex_, std::try_to_lock);
  if (!guard.owns_lock()) return false;
  bool complete = true;
  for (ThreadCache* c = registry_; c; c = c->registry_next) {
    if (!c->lock.try_lock()) {
      complete = false;
      continue;
    }
    for (int k = 0; k < kClassCount; ++k) in_bins[k] += c->bins[k].count;
    c->lock.unlock();
  }
  return complete;
}

}  // namespace pagefast::policy
