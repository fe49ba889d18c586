// policy/own_vmm/cache.cpp: the own-VMM cache's handles, mappings
// and access (policy/own_vmm/cache.h says what and why;
// docs/OWN-VMM.md the residual differences).
#include "policy/own_vmm/cache.h"

#include <algorithm>

#include "policy/own_vmm/key.h"

namespace pagefast::policy::own_vmm {

bool Cache::take(uint64_t bytes, const std::string& prop, uint64_t* handle) {
  std::unique_lock<std::mutex> lock(mutex_);
  const std::string key = key_of(bytes, prop);
  // The worker is making the next page of these properties: it comes
  // sooner than one the driver would create here (and it is the page the
  // program will map next). Its first page not yet published must come
  // before the first cached page of these properties in the order of
  // growth: the program maps in order.
  ahead_.wait_for_key(lock, key, [&] {
    auto queue = free_.find(key);
    return queue == free_.end() || queue->second.empty() ? UINT64_MAX : queue->second.begin()->first.first;
  });
  auto queue = free_.find(key);
  if (queue == free_.end() || queue->second.empty()) {
    ++stats_.create_misses;
    return false;
  }
  // Lowest deferred address first: a segment grows from its start again,
  // so each handle meets its own deferred mapping.
  const uint64_t h = queue->second.begin()->second;
  queue->second.erase(queue->second.begin());
  Handle& rec = *tracked(h);
  rec.cached = false;
  rec.cached_at_ns = 0;
  const HandleFacts facts = ledger_.facts_held(h);
  ledger_.taken_held(h);
  cached_bytes_[facts.device] -= facts.bytes;
  ++stats_.create_hits;
  *handle = h;
  return true;
}

void Cache::note_created(uint64_t handle, uint64_t bytes, const std::string& prop, int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  ledger_.created_held(handle, bytes, device);
  ledger_.keep_held(handle, key_of(bytes, prop));
}

int Cache::release(uint64_t handle) {
  std::unique_lock<std::mutex> guard(mutex_);
  if (!tracked(handle)) {
    guard.unlock();
    const int r = driver_.release(handle);
    if (r == kOk) ledger_.released(handle);
    return r;
  }
  const HandleFacts facts = ledger_.facts_held(handle);
  if (facts.refs <= 0) return kInvalidValue;  // released already
  // A reference an import of its own export added: the driver holds it,
  // besides the one the cache keeps, and drops it.
  const bool imported = facts.imports > 0;
  const int r = imported ? driver_.release(handle) : kOk;
  if (r == kOk) ledger_.released_held(handle);
  if (imported) return r;
  if (facts.refs > 1 || facts.maps > 0) return kOk;
  return retire(handle);
}

int Cache::retire(uint64_t handle) {
  Handle& rec = *tracked(handle);
  if (!rec.shared) {
    const HandleFacts facts = ledger_.facts_held(handle);
    const uint64_t room = room_on(facts.device);
    std::atomic<uint64_t>& held = cached_bytes_[facts.device];
    if (room >= held.load(std::memory_order_relaxed) && room - held.load(std::memory_order_relaxed) >= facts.bytes) {
      rec.cached = true;
      held.fetch_add(facts.bytes, std::memory_order_relaxed);
      // The order of its deferred mapping (the key take() orders by): the
      // one its last deferred unmap noted, checked; else a scan (a handle
      // mapped at two addresses, or a mapping flushed since).
      uint64_t order = UINT64_MAX;
      auto noted = noted_deferred(handle, rec);
      if (noted != maps_.end()) {
        order = noted->second.seq;
      } else if (rec.deferred_maps > 0) {
        for (auto& [addr, m] : maps_)
          if (m.handle == handle && m.deferred && m.seq < order) order = m.seq;
      }
      free_[rec.key].emplace(std::make_pair(order, arrivals_++), handle);
      return kOk;
    }
  }
  return release_for_real(handle);
}

void Cache::retire_orphans(std::vector<uint64_t>* unmapped) {
  std::sort(unmapped->begin(), unmapped->end());
  unmapped->erase(std::unique(unmapped->begin(), unmapped->end()), unmapped->end());
  for (uint64_t handle : *unmapped) {
    const HandleFacts facts = ledger_.facts_held(handle);
    if (facts.refs == 0 && facts.maps == 0) retire(handle);
  }
}

int Cache::release_for_real(uint64_t handle) {
  flush_handle(handle);
  const int r = driver_.release(handle);
  // A refused release leaves a handle nobody can name again: forget it
  // (at worst its memory stays until exit, as the driver would keep it).
  ledger_.let_go_held(handle);
  return r;
}

bool Cache::exact_cover(uint64_t addr, uint64_t bytes, std::vector<MapIt>* out) {
  out->clear();
  uint64_t at = addr;
  const uint64_t end = addr + bytes;
  if (bytes == 0 || end < addr) return false;
  for (auto it = maps_.find(addr); it != maps_.end() && at < end; ++it) {
    if (it->first != at || it->second.deferred) return false;
    out->push_back(it);
    at += it->second.bytes;
  }
  return at == end;
}

bool Cache::flush_mapping(MapIt it) {
  if (driver_.unmap(it->first, it->second.bytes) != kOk) return false;
  deferred_count_.fetch_sub(1, std::memory_order_relaxed);
  if (Handle* h = tracked(it->second.handle)) --h->deferred_maps;
  ++stats_.real_unmaps;
  maps_.erase(it);
  return true;
}

bool Cache::flush_overlap(uint64_t addr, uint64_t bytes) {
  if (deferred_count_.load(std::memory_order_relaxed) == 0) return true;
  const uint64_t end = addr + bytes < addr ? UINT64_MAX : addr + bytes;
  auto it = maps_.upper_bound(addr);
  if (it != maps_.begin()) --it;
  bool all = true;
  while (it != maps_.end() && it->first < end) {
    auto next = std::next(it);
    if (it->second.deferred && it->first + it->second.bytes > addr && !flush_mapping(it)) all = false;
    it = next;
  }
  return all;
}

Cache::MapIt Cache::noted_deferred(uint64_t handle, const Handle& rec) {
  auto it = maps_.find(rec.deferred_at);
  return it != maps_.end() && it->second.handle == handle && it->second.deferred ? it : maps_.end();
}

void Cache::flush_handle(uint64_t handle) {
  // Its one deferred mapping, where its last deferred unmap noted it (a
  // trim of thousands of cached pages stays linear); else a scan.
  if (const Handle* h = tracked(handle)) {
    if (h->deferred_maps == 0) return;
    auto noted = noted_deferred(handle, *h);
    if (h->deferred_maps == 1 && noted != maps_.end()) {
      flush_mapping(noted);
      return;
    }
  }
  for (auto it = maps_.begin(); it != maps_.end();) {
    auto next = std::next(it);
    if (it->second.handle == handle && it->second.deferred) flush_mapping(it);
    it = next;
  }
}

void Cache::flush_at(uint64_t addr) {
  std::unique_lock<std::mutex> lock(mutex_);
  ahead_.settle(lock, addr, 1);
  flush_overlap(addr, 1);
}

int Cache::map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle, uint64_t flags) {
  std::unique_lock<std::mutex> lock(mutex_);
  Handle* h = tracked(handle);
  const bool is_tracked = h != nullptr;
  if (is_tracked && ledger_.facts_held(handle).refs <= 0) return kInvalidValue;  // released by the program
  if (is_tracked && flags == 0) {
    auto it = maps_.find(addr);
    if (it != maps_.end() && it->second.deferred && it->second.handle == handle && it->second.bytes == bytes &&
        it->second.offset == offset) {
      it->second.deferred = false;
      // Its place in the order of growth is now (a page made ahead had a
      // place only among the pages made ahead with it).
      it->second.seq = ++map_seq_;
      deferred_count_.fetch_sub(1, std::memory_order_relaxed);
      --h->deferred_maps;
      ledger_.mapped_held(addr, bytes, handle, offset);
      ++stats_.revived_maps;
      if (it->second.ahead) {
        it->second.ahead = false;
        maybe_continue(addr, it->second);
      }
      return kOk;
    }
  }
  if (is_tracked && ahead_.enabled()) note_misdirected(handle, addr);
  ahead_.settle(lock, addr, bytes);
  // settle() may have waited, unlocked: the worker's pages went into
  // the ledger meanwhile (and a handle may have gone).
  h = tracked(handle);
  if (is_tracked && !h) {
    const int r = driver_.map(addr, bytes, offset, handle, flags);
    if (r == kOk) ledger_.mapped_held(addr, bytes, handle, offset);
    return r;
  }
  flush_overlap(addr, bytes);
  // A cached handle taken back and mapped somewhere else than its deferred
  // mapping (a page made ahead for another segment, a page released in the
  // middle of a segment and taken for its end): the deferred mapping goes
  // first, so that the driver sees the handle mapped where the program
  // maps it and nowhere else. The H200 answered CUDA_ERROR_UNKNOWN to such
  // a map while the old mapping stayed (docs/DRIVER-FACTS.md), which
  // PyTorch raised as "CUDA driver error: unknown error".
  if (is_tracked && h->deferred_maps > 0) flush_handle(handle);
  const int r = driver_.map(addr, bytes, offset, handle, flags);
  if (r == kOk) ledger_.mapped_held(addr, bytes, handle, offset);
  if (r == kOk && !is_tracked) {
    auto res = reservations_.upper_bound(addr);
    if (res != reservations_.begin() && addr < std::prev(res)->first + std::prev(res)->second)
      foreign_.insert(std::prev(res)->first);
  }
  if (r == kOk && is_tracked) {
    Mapping m;
    m.bytes = bytes;
    m.offset = offset;
    m.handle = handle;
    m.seq = ++map_seq_;
    maps_[addr] = m;
  }
  return r;
}

int Cache::unmap(uint64_t addr, uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  ahead_.settle(lock, addr, bytes);
  std::vector<MapIt> cover;
  if (exact_cover(addr, bytes, &cover)) {
    bool deferrable = true;
    for (MapIt it : cover) {
      const Handle* rec = tracked(it->second.handle);
      deferrable = deferrable && rec && !rec->shared;
    }
    if (deferrable) {
      std::vector<uint64_t> unmapped;  // retired after the loop: a release erases mappings
      for (MapIt it : cover) {
        it->second.deferred = true;
        deferred_count_.fetch_add(1, std::memory_order_relaxed);
        ++stats_.deferred_unmaps;
        Handle& rec = *tracked(it->second.handle);
        rec.deferred_at = it->first;
        ++rec.deferred_maps;
        unmapped.push_back(it->second.handle);
      }
      ledger_.unmapped_held(addr, bytes);
      retire_orphans(&unmapped);
      return kOk;
    }
  }
  flush_overlap(addr, bytes);
  const int r = driver_.unmap(addr, bytes);
  if (r != kOk) return r;
  ledger_.unmapped_held(addr, bytes);
  const uint64_t end = addr + bytes;
  std::vector<uint64_t> unmapped;
  for (auto it = maps_.lower_bound(addr); it != maps_.end() && it->first < end;) {
    auto next = std::next(it);
    if (!it->second.deferred) {
      unmapped.push_back(it->second.handle);
      maps_.erase(it);
    }
    it = next;
  }
  retire_orphans(&unmapped);
  return r;
}

bool Cache::access_already(const Mapping& m, const std::string& descs) const {
  if (!m.access_known || descs.empty() || descs.size() % desc_bytes_ != 0) return false;
  for (size_t at = 0; at < descs.size(); at += desc_bytes_) {
    auto it = m.access.find(descs.substr(at, location_bytes_));
    if (it == m.access.end() || it->second != descs.substr(at + location_bytes_, desc_bytes_ - location_bytes_))
      return false;
  }
  return true;
}

void Cache::apply_access(Mapping& m, const std::string& descs) const {
  for (size_t at = 0; at + desc_bytes_ <= descs.size(); at += desc_bytes_)
    m.access[descs.substr(at, location_bytes_)] = descs.substr(at + location_bytes_, desc_bytes_ - location_bytes_);
}

int Cache::set_access(uint64_t addr, uint64_t bytes, const std::string& descs) {
  std::unique_lock<std::mutex> lock(mutex_);
  ahead_.settle(lock, addr, bytes);
  std::vector<MapIt> cover;
  if (exact_cover(addr, bytes, &cover)) {
    bool same = true;
    for (MapIt it : cover) same = same && access_already(it->second, descs);
    if (same) {
      ++stats_.access_skipped;
      return kOk;
    }
  }
  flush_overlap(addr, bytes);
  const int r = driver_.set_access(addr, bytes, descs);
  const uint64_t end = addr + bytes;
  auto it = maps_.upper_bound(addr);
  if (it != maps_.begin()) --it;
  for (; it != maps_.end() && it->first < end; ++it) {
    if (it->first + it->second.bytes <= addr || it->second.deferred) continue;
    // Known only while every call covered the whole mapping and succeeded.
    const bool whole = it->first >= addr && it->first + it->second.bytes <= end;
    if (r == kOk && whole) apply_access(it->second, descs);
    else it->second.access_known = false;
  }
  if (r == kOk && ahead_.enabled()) maybe_prefetch(addr, end, descs);
  return r;
}

void Cache::note_reserved(uint64_t base, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  reservations_[base] = bytes;
}

bool Cache::retain(uint64_t addr, uint64_t* handle) {
  std::unique_lock<std::mutex> lock(mutex_);
  ahead_.settle(lock, addr, 1);
  auto it = maps_.upper_bound(addr);
  if (it == maps_.begin()) return false;
  --it;
  if (addr >= it->first + it->second.bytes) return false;
  if (it->second.deferred) {
    flush_mapping(it);  // the program unmapped it: the driver answers
    return false;
  }
  ledger_.retained_held(it->second.handle);
  *handle = it->second.handle;
  return true;
}

bool Cache::check_handle(uint64_t handle, bool exporting, int* result) {
  std::lock_guard<std::mutex> guard(mutex_);
  Handle* rec = tracked(handle);
  if (!rec) return false;
  if (ledger_.facts_held(handle).refs <= 0) {
    *result = kInvalidValue;
    return true;
  }
  if (exporting && !rec->shared) {
    rec->shared = true;
    flush_handle(handle);
  }
  return false;
}

}  // namespace pagefast::policy::own_vmm
