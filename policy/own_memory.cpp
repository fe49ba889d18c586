// policy/own_memory.cpp: see own_memory.h.
#include "policy/own_memory.h"

namespace pagefast::policy {

void OwnMemory::created(uint64_t handle, uint64_t bytes, int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  // A handle value the driver hands out again was released for real before.
  Handle& h = handles_[handle];
  h = Handle{bytes, device, 1, 0};
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
}

OwnMemory::Resident OwnMemory::resident(int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  Resident r;
  for (const auto& [handle, h] : handles_)
    if (h.device == device) {
      r.bytes += h.bytes;
      ++r.handles;
    }
  return r;
}

void OwnMemory::settle(std::unordered_map<uint64_t, Handle>::iterator it) {
  if (it->second.refs == 0 && it->second.maps == 0) handles_.erase(it);
}

}  // namespace pagefast::policy
