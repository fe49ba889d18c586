// policy/own_memory.cpp: see own_memory.h.
#include "policy/own_memory.h"

namespace pagefast::policy {

void OwnMemory::created(uint64_t handle, uint64_t bytes, int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  // A handle value the driver hands out again was released for real before.
  Handle& h = handles_[handle];
  h = Handle{bytes, device, 1, 0, next_allocation_++, true};
}

void OwnMemory::exported(uint64_t handle, const ShareKey& key) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it != handles_.end() && it->second.bytes_known)
    exports_[key] = Export{it->second.allocation, it->second.bytes, it->second.device};
}

void OwnMemory::imported(uint64_t handle, const ShareKey* key, int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it != handles_.end()) {
    // The driver handed out a handle the program holds: one more reference.
    ++it->second.refs;
    return;
  }
  auto exported = key ? exports_.find(*key) : exports_.end();
  if (exported != exports_.end())
    handles_[handle] = Handle{exported->second.bytes, exported->second.device, 1, 0, exported->second.allocation, true};
  else handles_[handle] = Handle{0, device, 1, 0, next_allocation_++, false};
}

void OwnMemory::retained(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it != handles_.end()) ++it->second.refs;
}

void OwnMemory::released(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.refs == 0) return;
  --it->second.refs;
  settle(it);
}

void OwnMemory::mapped(uint64_t addr, uint64_t bytes, uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  ++it->second.maps;
  if (!it->second.bytes_known && bytes > it->second.bytes) it->second.bytes = bytes;
  maps_[addr] = Mapping{bytes, handle};
}

void OwnMemory::unmapped(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto m = maps_.lower_bound(addr);
  while (m != maps_.end() && m->first - addr < bytes) {
    auto h = handles_.find(m->second.handle);
    if (h != handles_.end() && h->second.maps > 0) {
      --h->second.maps;
      settle(h);
    }
    m = maps_.erase(m);
  }
}

void OwnMemory::forget_device(int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto m = maps_.begin(); m != maps_.end();) {
    auto h = handles_.find(m->second.handle);
    m = (h != handles_.end() && h->second.device == device) ? maps_.erase(m) : std::next(m);
  }
  for (auto h = handles_.begin(); h != handles_.end();)
    h = h->second.device == device ? handles_.erase(h) : std::next(h);
  for (auto e = exports_.begin(); e != exports_.end();)
    e = e->second.device == device ? exports_.erase(e) : std::next(e);
}

OwnMemory::Resident OwnMemory::resident(int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  Resident r;
  // An allocation with several handles counts once: the largest bytes
  // any of them knows (an unplaced import knows only what it maps).
  std::map<uint64_t, uint64_t> allocations;
  for (const auto& [handle, h] : handles_)
    if (h.device == device) {
      uint64_t& bytes = allocations[h.allocation];
      if (h.bytes > bytes) bytes = h.bytes;
      ++r.handles;
    }
  for (const auto& [allocation, bytes] : allocations) r.bytes += bytes;
  return r;
}

void OwnMemory::settle(std::unordered_map<uint64_t, Handle>::iterator it) {
  if (it->second.refs != 0 || it->second.maps != 0) return;
  const uint64_t allocation = it->second.allocation;
  handles_.erase(it);
  // Once the allocation's last handle is gone the driver has freed it, and
  // its shareable handles name nothing of this process's any more. Exports
  // are few: the handles are looked through only for an exported one.
  bool named = false;
  for (const auto& [key, e] : exports_) named = named || e.allocation == allocation;
  if (!named) return;
  for (const auto& [handle, h] : handles_)
    if (h.allocation == allocation) return;
  for (auto e = exports_.begin(); e != exports_.end();)
    e = e->second.allocation == allocation ? exports_.erase(e) : std::next(e);
}

}  // namespace pagefast::policy
