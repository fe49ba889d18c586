// policy/client_vmm.cpp: the client VMM cache (policy/client_vmm.h says
// what and why; docs/VMM-CLIENTS.md the residual differences).
#include "policy/client_vmm.h"

#include <cstring>

namespace pagefast::policy {

std::string ClientVmmCache::slot_of(uint64_t bytes, const std::string& prop) {
  std::string slot = prop;
  slot.append(reinterpret_cast<const char*>(&bytes), sizeof bytes);
  return slot;
}

bool ClientVmmCache::take(uint64_t bytes, const std::string& prop, uint64_t* handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto slot = free_.find(slot_of(bytes, prop));
  if (slot == free_.end() || slot->second.empty()) {
    ++stats_.create_misses;
    return false;
  }
  // Lowest deferred address first: a segment grows from its start again,
  // so each handle meets its own deferred mapping.
  const uint64_t h = slot->second.begin()->second;
  slot->second.erase(slot->second.begin());
  Handle& rec = handles_[h];
  rec.cached = false;
  rec.refs = 1;
  cached_bytes_[rec.device] -= rec.bytes;
  ++stats_.create_hits;
  *handle = h;
  return true;
}

void ClientVmmCache::note_created(uint64_t handle, uint64_t bytes, const std::string& prop, int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  Handle& rec = handles_[handle];
  rec = Handle{};
  rec.bytes = bytes;
  rec.slot = slot_of(bytes, prop);
  rec.device = device;
  rec.refs = 1;
}

int ClientVmmCache::release(uint64_t handle) {
  std::unique_lock<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) {
    guard.unlock();
    return driver_.release(handle);
  }
  Handle& rec = it->second;
  if (rec.refs <= 0) return kClientInvalidValue;  // released already
  if (--rec.refs > 0 || rec.live_maps > 0) return kClientOk;
  return retire(handle);
}

int ClientVmmCache::retire(uint64_t handle) {
  Handle& rec = handles_[handle];
  if (!rec.shared) {
    const uint64_t room = driver_.cache_room(rec.device);
    uint64_t& held = cached_bytes_[rec.device];
    if (room >= held && room - held >= rec.bytes) {
      rec.cached = true;
      held += rec.bytes;
      uint64_t where = UINT64_MAX;
      for (auto& [addr, m] : maps_)
        if (m.handle == handle && m.deferred && addr < where) where = addr;
      free_[rec.slot].emplace(std::make_pair(where, arrivals_++), handle);
      return kClientOk;
    }
  }
  return release_for_real(handle);
}

int ClientVmmCache::release_for_real(uint64_t handle) {
  flush_handle(handle);
  const int r = driver_.release(handle);
  // A refused release leaves a handle nobody can name again: forget it
  // (at worst its memory stays until exit, as the driver would keep it).
  handles_.erase(handle);
  return r;
}

bool ClientVmmCache::exact_cover(uint64_t addr, uint64_t bytes, std::vector<MapIt>* out) {
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

bool ClientVmmCache::flush_mapping(MapIt it) {
  if (driver_.unmap(it->first, it->second.bytes) != kClientOk) return false;
  deferred_count_.fetch_sub(1, std::memory_order_relaxed);
  ++stats_.real_unmaps;
  maps_.erase(it);
  return true;
}

bool ClientVmmCache::flush_overlap(uint64_t addr, uint64_t bytes) {
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

void ClientVmmCache::flush_handle(uint64_t handle) {
  for (auto it = maps_.begin(); it != maps_.end();) {
    auto next = std::next(it);
    if (it->second.handle == handle && it->second.deferred) flush_mapping(it);
    it = next;
  }
}

void ClientVmmCache::flush_at(uint64_t addr) {
  std::lock_guard<std::mutex> guard(mutex_);
  flush_overlap(addr, 1);
}

int ClientVmmCache::map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle, uint64_t flags) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto h = handles_.find(handle);
  const bool tracked = h != handles_.end();
  if (tracked && h->second.refs <= 0) return kClientInvalidValue;  // released by the program
  if (tracked && flags == 0) {
    auto it = maps_.find(addr);
    if (it != maps_.end() && it->second.deferred && it->second.handle == handle && it->second.bytes == bytes &&
        it->second.offset == offset) {
      it->second.deferred = false;
      deferred_count_.fetch_sub(1, std::memory_order_relaxed);
      ++h->second.live_maps;
      ++stats_.revived_maps;
      return kClientOk;
    }
  }
  flush_overlap(addr, bytes);
  const int r = driver_.map(addr, bytes, offset, handle, flags);
  if (r == kClientOk && tracked) {
    Mapping m;
    m.bytes = bytes;
    m.offset = offset;
    m.handle = handle;
    maps_[addr] = m;
    ++h->second.live_maps;
  }
  return r;
}

int ClientVmmCache::unmap(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::vector<MapIt> cover;
  if (exact_cover(addr, bytes, &cover)) {
    bool deferrable = true;
    for (MapIt it : cover) deferrable = deferrable && !handles_[it->second.handle].shared;
    if (deferrable) {
      std::vector<uint64_t> orphans;  // retired after the loop: a release erases mappings
      for (MapIt it : cover) {
        it->second.deferred = true;
        deferred_count_.fetch_add(1, std::memory_order_relaxed);
        ++stats_.deferred_unmaps;
        Handle& rec = handles_[it->second.handle];
        if (--rec.live_maps == 0 && rec.refs == 0) orphans.push_back(it->second.handle);
      }
      for (uint64_t handle : orphans) retire(handle);
      return kClientOk;
    }
  }
  flush_overlap(addr, bytes);
  const int r = driver_.unmap(addr, bytes);
  if (r != kClientOk) return r;
  const uint64_t end = addr + bytes;
  std::vector<uint64_t> orphans;
  for (auto it = maps_.lower_bound(addr); it != maps_.end() && it->first < end;) {
    auto next = std::next(it);
    if (!it->second.deferred) {
      Handle& rec = handles_[it->second.handle];
      if (--rec.live_maps == 0 && rec.refs == 0) orphans.push_back(it->second.handle);
      maps_.erase(it);
    }
    it = next;
  }
  for (uint64_t handle : orphans) retire(handle);
  return r;
}

bool ClientVmmCache::access_already(const Mapping& m, const std::string& descs) const {
  if (!m.access_known || descs.empty() || descs.size() % desc_bytes_ != 0) return false;
  for (size_t at = 0; at < descs.size(); at += desc_bytes_) {
    auto it = m.access.find(descs.substr(at, location_bytes_));
    if (it == m.access.end() || it->second != descs.substr(at + location_bytes_, desc_bytes_ - location_bytes_))
      return false;
  }
  return true;
}

void ClientVmmCache::apply_access(Mapping& m, const std::string& descs) const {
  for (size_t at = 0; at + desc_bytes_ <= descs.size(); at += desc_bytes_)
    m.access[descs.substr(at, location_bytes_)] = descs.substr(at + location_bytes_, desc_bytes_ - location_bytes_);
}

int ClientVmmCache::set_access(uint64_t addr, uint64_t bytes, const std::string& descs) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::vector<MapIt> cover;
  if (exact_cover(addr, bytes, &cover)) {
    bool same = true;
    for (MapIt it : cover) same = same && access_already(it->second, descs);
    if (same) {
      ++stats_.access_skipped;
      return kClientOk;
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
    if (r == kClientOk && whole) apply_access(it->second, descs);
    else it->second.access_known = false;
  }
  if (r == kClientOk && prefetch_pages_ > 0) maybe_prefetch(addr, end, descs);
  return r;
}

void ClientVmmCache::note_reserved(uint64_t base, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  reservations_[base] = bytes;
}

void ClientVmmCache::maybe_prefetch(uint64_t addr, uint64_t end, const std::string& descs) {
  // The range must end with a live whole-handle mapping of a tracked,
  // unshared handle, inside one of the program's reservations.
  auto last = maps_.lower_bound(end);
  if (last == maps_.begin()) return;
  --last;
  const Mapping& m = last->second;
  if (last->first < addr || last->first + m.bytes != end || m.deferred || m.offset != 0) return;
  auto h = handles_.find(m.handle);
  if (h == handles_.end() || h->second.shared || h->second.bytes != m.bytes) return;
  const uint64_t page = m.bytes;
  auto res = reservations_.upper_bound(addr);
  if (res == reservations_.begin()) return;
  --res;
  const uint64_t res_end = res->first + res->second;
  if (addr < res->first || end > res_end) return;
  const Handle proto = h->second;
  int& next = next_prefetch_[proto.slot];
  if (next == 0) next = 2;
  uint64_t pages = uint64_t(next);
  if (pages > (res_end - end) / page) pages = (res_end - end) / page;
  const uint64_t room = driver_.cache_room(proto.device);
  const uint64_t held = cached_bytes_[proto.device];
  if (room < held) return;
  if (pages > (room - held) / page) pages = (room - held) / page;
  // Only onto addresses the cache knows to be free of the program's maps.
  auto clash = maps_.lower_bound(end);
  if (clash != maps_.end() && clash->first < end + pages * page) pages = (clash->first - end) / page;
  if (pages == 0) return;
  const std::string prop = proto.slot.substr(0, proto.slot.size() - sizeof(uint64_t));
  std::vector<uint64_t> made;
  for (uint64_t i = 0; i < pages; ++i) {
    uint64_t handle = 0;
    if (driver_.create(page, prop, &handle) != kClientOk) break;
    if (driver_.map(end + i * page, page, 0, handle, 0) != kClientOk) {
      driver_.release(handle);
      break;
    }
    made.push_back(handle);
  }
  if (!made.empty() && driver_.set_access(end, made.size() * page, descs) != kClientOk) {
    for (size_t i = 0; i < made.size(); ++i) {
      driver_.unmap(end + i * page, page);
      driver_.release(made[i]);
    }
    made.clear();
  }
  if (made.empty()) return;
  if (next < prefetch_pages_) next = next * 2 > prefetch_pages_ ? prefetch_pages_ : next * 2;
  for (size_t i = 0; i < made.size(); ++i) {
    const uint64_t at = end + i * page;
    Handle& rec = handles_[made[i]];
    rec = Handle{};
    rec.bytes = page;
    rec.slot = proto.slot;
    rec.device = proto.device;
    rec.cached = true;
    Mapping& map = maps_[at];
    map = Mapping{};
    map.bytes = page;
    map.handle = made[i];
    map.deferred = true;
    apply_access(map, descs);
    deferred_count_.fetch_add(1, std::memory_order_relaxed);
    cached_bytes_[proto.device] += page;
    free_[proto.slot].emplace(std::make_pair(at, arrivals_++), made[i]);
    ++stats_.prefetched;
  }
}

int ClientVmmCache::address_free(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  flush_overlap(addr, bytes);
  const int r = driver_.address_free(addr, bytes);
  if (r == kClientOk) reservations_.erase(addr);
  return r;
}

bool ClientVmmCache::retain(uint64_t addr, uint64_t* handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = maps_.upper_bound(addr);
  if (it == maps_.begin()) return false;
  --it;
  if (addr >= it->first + it->second.bytes) return false;
  if (it->second.deferred) {
    flush_mapping(it);  // the program unmapped it: the driver answers
    return false;
  }
  Handle& rec = handles_[it->second.handle];
  ++rec.refs;
  *handle = it->second.handle;
  return true;
}

bool ClientVmmCache::check_handle(uint64_t handle, bool exporting, int* result) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return false;
  if (it->second.refs <= 0) {
    *result = kClientInvalidValue;
    return true;
  }
  if (exporting && !it->second.shared) {
    it->second.shared = true;
    flush_handle(handle);
  }
  return false;
}

uint64_t ClientVmmCache::trim(int device, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t freed = 0;
  for (auto& [slot, queue] : free_) {
    // Highest addresses first: the end of a segment is the last to grow back.
    while (!queue.empty() && freed < bytes) {
      const auto last = std::prev(queue.end());
      const uint64_t h = last->second;
      Handle& rec = handles_[h];
      if (rec.device != device) break;  // one slot is one device (the location is in the key)
      queue.erase(last);
      const uint64_t held = rec.bytes;
      cached_bytes_[device] -= held;
      if (release_for_real(h) == kClientOk) {
        freed += held;
        stats_.trimmed_bytes += held;
      }
    }
    if (freed >= bytes) break;
  }
  return freed;
}

uint64_t ClientVmmCache::cached_bytes(int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = cached_bytes_.find(device);
  return it == cached_bytes_.end() ? 0 : it->second;
}

void ClientVmmCache::forget_device(int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto it = maps_.begin(); it != maps_.end();) {
    auto h = handles_.find(it->second.handle);
    if (h != handles_.end() && h->second.device == device) {
      if (it->second.deferred) deferred_count_.fetch_sub(1, std::memory_order_relaxed);
      it = maps_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [slot, queue] : free_)
    for (auto it = queue.begin(); it != queue.end();) {
      auto h = handles_.find(it->second);
      it = h != handles_.end() && h->second.device == device ? queue.erase(it) : std::next(it);
    }
  for (auto it = handles_.begin(); it != handles_.end();)
    it = it->second.device == device ? handles_.erase(it) : std::next(it);
  auto held = cached_bytes_.find(device);  // find, not []: nothing is allocated here
  if (held != cached_bytes_.end()) held->second = 0;
}

void ClientVmmCache::abandon() {
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto& [addr, m] : maps_)
    if (m.deferred) driver_.unmap(addr, m.bytes);
  for (auto& [slot, queue] : free_)
    for (auto& [order, handle] : queue) driver_.release(handle);
  maps_.clear();
  free_.clear();
  handles_.clear();
  for (auto& [device, held] : cached_bytes_) held = 0;
  deferred_count_.store(0, std::memory_order_relaxed);
}

ClientVmmStats ClientVmmCache::stats() {
  std::lock_guard<std::mutex> guard(mutex_);
  ClientVmmStats s = stats_;
  s.cached_bytes = 0;
  for (auto& [device, held] : cached_bytes_) s.cached_bytes += held;
  return s;
}

}  // namespace pagefast::policy
