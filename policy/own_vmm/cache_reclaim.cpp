// policy/own_vmm/cache_reclaim.cpp: the own-VMM cache's kept ranges,
// trim and decay, forgetting a device, giving up, and its stats
// (policy/own_vmm/cache.h says what and why).
#include <algorithm>

#include "policy/own_vmm/cache.h"

namespace pagefast::policy::own_vmm {

int Cache::address_free(uint64_t addr, uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  ahead_.settle(lock, addr, bytes);
  // A range the program freed already (kept here): the driver's answer
  // to a second free of it.
  for (auto& [base, kept] : kept_ranges_)
    if (base < addr + bytes && addr < base + kept) return kInvalidValue;
  // A whole reservation that holds only deferred mappings (the program
  // unmapped everything it mapped there, all of it tracked handles) is
  // kept with them: the program's next reservation of that size gets it
  // back (take_range), its pages still mapped and open. PyTorch's
  // empty_cache frees its segment's range and reserves one again.
  auto res = reservations_.find(addr);
  if (res != reservations_.end() && res->second == bytes && !foreign_.count(addr)) {
    bool deferred = false, live = false;
    for (auto it = maps_.lower_bound(addr); it != maps_.end() && it->first < addr + bytes; ++it)
      (it->second.deferred ? deferred : live) = true;
    if (deferred && !live) {
      kept_ranges_[addr] = bytes;
      reservations_.erase(res);
      ++stats_.ranges_kept;
      return kOk;
    }
  }
  flush_overlap(addr, bytes);
  const int r = driver_.address_free(addr, bytes);
  if (r == kOk) {
    reservations_.erase(addr);
    foreign_.erase(addr);
  }
  return r;
}

bool Cache::take_range(uint64_t bytes, uint64_t alignment, uint64_t hint, uint64_t flags, uint64_t* base) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (flags || kept_ranges_.empty()) return false;
  auto fits = [&](std::map<uint64_t, uint64_t>::iterator it) {
    return it->second == bytes && (!alignment || it->first % alignment == 0);
  };
  auto hand_out = [&](std::map<uint64_t, uint64_t>::iterator it) {
    *base = it->first;
    reservations_[it->first] = bytes;
    kept_ranges_.erase(it);
    ++stats_.ranges_reused;
    return true;
  };
  if (hint) {
    // The program asks for an address: a kept range there of this size is
    // it; one that only overlaps it is given back to the driver first, so
    // that the driver can honour the hint as it would have.
    auto it = kept_ranges_.find(hint);
    if (it != kept_ranges_.end() && fits(it)) return hand_out(it);
    const uint64_t end = hint + bytes < hint ? UINT64_MAX : hint + bytes;
    for (auto k = kept_ranges_.begin(); k != kept_ranges_.end();) {
      if (k->first < end && hint < k->first + k->second && flush_overlap(k->first, k->second)) {
        driver_.address_free(k->first, k->second);
        k = kept_ranges_.erase(k);
      } else {
        ++k;
      }
    }
    return false;
  }
  for (auto it = kept_ranges_.begin(); it != kept_ranges_.end(); ++it)
    if (fits(it)) return hand_out(it);
  return false;
}

void Cache::free_empty_kept_ranges() {
  for (auto it = kept_ranges_.begin(); it != kept_ranges_.end();) {
    auto m = maps_.lower_bound(it->first);
    if (m != maps_.end() && m->first < it->first + it->second) {
      ++it;
      continue;
    }
    driver_.address_free(it->first, it->second);  // refused: the range stays reserved, unused
    it = kept_ranges_.erase(it);
  }
}

uint64_t Cache::drop_cached(FreeQueue& queue, FreeQueue::iterator it) {
  const uint64_t h = it->second;
  queue.erase(it);
  const HandleFacts facts = ledger_.facts_held(h);
  const uint64_t bytes = facts.bytes;
  cached_bytes_[facts.device] -= bytes;
  if (release_for_real(h) != kOk) return 0;
  stats_.trimmed_bytes += bytes;
  return bytes;
}

uint64_t Cache::trim(int device, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t freed = 0;
  for (auto& [cache_key, queue] : free_) {
    // Highest addresses first: the end of a segment is the last to grow back.
    while (!queue.empty() && freed < bytes) {
      const auto last = std::prev(queue.end());
      if (ledger_.facts_held(last->second).device != device) break;  // one key is one device (the location is in it)
      freed += drop_cached(queue, last);
    }
    if (freed >= bytes) break;
  }
  if (freed) free_empty_kept_ranges();
  return freed;
}

uint64_t Cache::decay_step(uint64_t now_ns, uint64_t delay_ns, uint64_t floor_bytes, int max_handles) {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t total = 0;
  total = cached_bytes_.total();
  if (total <= floor_bytes) return 0;
  // The oldest cached handles first, across keys; stamp the ones first
  // seen now. (Queues are not added to below: the pointers stay valid.)
  struct Aged {
    uint64_t at;
    FreeQueue* queue;
    FreeQueue::key_type key;
    bool operator<(const Aged& o) const { return at < o.at || (at == o.at && key < o.key); }
  };
  std::vector<Aged> old;
  for (auto& [cache_key, queue] : free_)
    for (auto& [key, h] : queue) {
      Handle& rec = *tracked(h);
      if (rec.cached_at_ns == 0) rec.cached_at_ns = now_ns ? now_ns : 1;
      else if (now_ns >= rec.cached_at_ns + delay_ns) old.push_back({rec.cached_at_ns, &queue, key});
    }
  std::sort(old.begin(), old.end());
  uint64_t freed = 0;
  int released = 0;
  for (const Aged& a : old) {
    if (released >= max_handles || total - freed <= floor_bytes) break;
    auto it = a.queue->find(a.key);
    if (it == a.queue->end()) continue;
    const uint64_t got = drop_cached(*a.queue, it);
    ++released;
    freed += got;
    stats_.decayed_bytes += got;
  }
  if (released) free_empty_kept_ranges();
  return freed;
}

uint64_t Cache::cached_bytes(int device) { return cached_bytes_[device].load(std::memory_order_relaxed); }

Holder* Cache::join(int device, BudgetView* view) {
  if (device < 0 || device >= PerDevice::kDevices) return nullptr;
  shares_[device].join(this, device, &cached_bytes_[device], view);
  return &shares_[device];
}

uint64_t DeviceShare::held_bytes() { return cache_ ? cache_->cached_bytes(device_) : 0; }
uint64_t DeviceShare::release(uint64_t bytes) { return cache_ ? cache_->trim(device_, bytes) : 0; }

bool Cache::on_device(uint64_t handle, int device) {
  const HandleFacts facts = ledger_.facts_held(handle);
  return facts.known && facts.device == device;
}

void Cache::forget_device(int device) {
  std::unique_lock<std::mutex> lock(mutex_);
  ahead_.settle_all(lock);
  for (auto it = maps_.begin(); it != maps_.end();) {
    if (tracked(it->second.handle) && on_device(it->second.handle, device)) {
      if (it->second.deferred) deferred_count_.fetch_sub(1, std::memory_order_relaxed);
      it = maps_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [cache_key, queue] : free_)
    for (auto it = queue.begin(); it != queue.end();)
      it = on_device(it->second, device) ? queue.erase(it) : std::next(it);
  ledger_.unkeep_all_held(device);
  cached_bytes_[device].store(0, std::memory_order_relaxed);
}

bool Cache::disown(uint64_t handle) {
  std::unique_lock<std::mutex> lock(mutex_);
  ahead_.settle_all(lock);
  if (!tracked(handle)) return false;
  for (auto it = maps_.begin(); it != maps_.end();) {
    if (it->second.handle != handle) {
      ++it;
      continue;
    }
    if (it->second.deferred) {
      driver_.unmap(it->first, it->second.bytes);
      deferred_count_.fetch_sub(1, std::memory_order_relaxed);
      ++stats_.real_unmaps;
    }
    it = maps_.erase(it);
  }
  ledger_.unkeep_held(handle);
  return true;
}

void Cache::note_foreign(uint64_t addr) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto res = reservations_.upper_bound(addr);
  if (res != reservations_.begin() && addr < std::prev(res)->first + std::prev(res)->second)
    foreign_.insert(std::prev(res)->first);
}

void Cache::abandon() {
  std::unique_lock<std::mutex> lock(mutex_);
  ahead_.settle_all(lock);
  for (auto& [addr, m] : maps_)
    if (m.deferred) driver_.unmap(addr, m.bytes);
  for (auto& [cache_key, queue] : free_)
    for (auto& [order, handle] : queue) driver_.release(handle);
  for (auto& [base, bytes] : kept_ranges_) driver_.address_free(base, bytes);
  kept_ranges_.clear();
  maps_.clear();
  free_.clear();
  // The program's handles stay in the ledger, noted from now on by the
  // glue; those the cache held for itself leave it.
  ledger_.unkeep_all_held(-1);
  cached_bytes_.clear();
  deferred_count_.store(0, std::memory_order_relaxed);
}

bool Cache::deferred_counts_consistent() {
  std::lock_guard<std::mutex> guard(mutex_);
  std::unordered_map<uint64_t, int> seen;
  for (auto& [addr, m] : maps_)
    if (m.deferred) ++seen[m.handle];
  for (uint64_t handle : ledger_.kept_handles()) {
    auto it = seen.find(handle);
    if (tracked(handle)->deferred_maps != (it == seen.end() ? 0 : it->second)) return false;
  }
  return true;
}

CacheStats Cache::stats() {
  std::lock_guard<std::mutex> guard(mutex_);
  CacheStats s = stats_;
  const AheadStats& ahead = ahead_.stats();
  s.ahead_waits = ahead.waits;
  s.ahead_wait_ns = ahead.wait_ns;
  s.ahead_cancelled = ahead.cancelled;
  s.cached_bytes = cached_bytes_.total();
  return s;
}

}  // namespace pagefast::policy::own_vmm
