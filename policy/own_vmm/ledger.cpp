// policy/own_vmm/ledger.cpp: see ledger.h.
#include "policy/own_vmm/ledger.h"

namespace pagefast::policy::own_vmm {

void Ledger::created(uint64_t handle, uint64_t bytes, int device, int slot) {
  std::lock_guard<std::mutex> guard(mutex_);
  created_held(handle, bytes, device, slot);
}

void Ledger::created_held(uint64_t handle, uint64_t bytes, int device, int slot) {
  // A handle value the driver hands out again was released for real before.
  Handle& h = handles_[handle];
  h = Handle{};
  h.bytes = bytes;
  h.device = device;
  h.refs = 1;
  h.slot = slot;
  h.allocation = next_allocation_++;
}

void Ledger::tag(uint64_t handle, int slot) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it != handles_.end()) it->second.slot = slot;
}

void Ledger::shared(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it != handles_.end()) it->second.shared = true;
}

void Ledger::exported(uint64_t handle, const ShareKey& key) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  it->second.shared = true;
  if (it->second.bytes_known) exports_[key] = Export{it->second.allocation, it->second.bytes, it->second.device};
}

void Ledger::imported(uint64_t handle, const ShareKey* key, int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it != handles_.end()) {
    // The driver handed out a handle the program holds: one more reference.
    ++it->second.refs;
    ++it->second.imports;
    it->second.shared = true;
    return;
  }
  Handle h;
  h.device = device;
  h.refs = 1;
  h.shared = true;
  auto exported = key ? exports_.find(*key) : exports_.end();
  if (exported != exports_.end()) {
    h.bytes = exported->second.bytes;
    h.device = exported->second.device;
    h.allocation = exported->second.allocation;
  } else {
    h.allocation = next_allocation_++;
    h.bytes_known = false;
  }
  handles_[handle] = h;
}

void Ledger::retained(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  retained_held(handle);
}

void Ledger::retained_held(uint64_t handle) {
  auto it = handles_.find(handle);
  if (it != handles_.end()) ++it->second.refs;
}

void Ledger::released(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  released_held(handle);
}

void Ledger::released_held(uint64_t handle) {
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.refs == 0) return;
  --it->second.refs;
  if (it->second.imports > 0) --it->second.imports;
  settle(it);
}

void Ledger::bound(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it != handles_.end()) it->second.multicast = true;
}

std::vector<uint64_t> Ledger::bound_at(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::vector<uint64_t> out;
  // The mapping that holds `addr`, and every one that starts inside the range.
  auto m = maps_.upper_bound(addr);
  if (m != maps_.begin()) {
    auto prev = std::prev(m);
    if (prev->first + prev->second.bytes > addr) m = prev;
  }
  const uint64_t end = addr + bytes < addr ? UINT64_MAX : addr + bytes;
  for (; m != maps_.end() && m->first < end; ++m) {
    auto h = handles_.find(m->second.handle);
    if (h == handles_.end()) continue;
    h->second.multicast = true;
    out.push_back(m->second.handle);
  }
  return out;
}

void Ledger::mapped(uint64_t addr, uint64_t bytes, uint64_t handle, uint64_t offset) {
  std::lock_guard<std::mutex> guard(mutex_);
  mapped_held(addr, bytes, handle, offset);
}

void Ledger::mapped_held(uint64_t addr, uint64_t bytes, uint64_t handle, uint64_t offset) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  ++it->second.maps;
  if (!it->second.bytes_known && bytes > it->second.bytes) it->second.bytes = bytes;
  maps_[addr] = Mapping{bytes, handle, offset};
}

void Ledger::unmapped(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  unmapped_held(addr, bytes);
}

void Ledger::unmapped_held(uint64_t addr, uint64_t bytes) {
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

void Ledger::forget_device(int device) {
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

void Ledger::keep(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it != handles_.end()) it->second.kept = true;
}

void Ledger::made(uint64_t handle, uint64_t bytes, int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  made_held(handle, bytes, device);
}

void Ledger::made_held(uint64_t handle, uint64_t bytes, int device) {
  Handle& h = handles_[handle];
  h = Handle{};
  h.bytes = bytes;
  h.device = device;
  h.allocation = next_allocation_++;
  h.kept = true;
}

void Ledger::taken(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  taken_held(handle);
}

void Ledger::taken_held(uint64_t handle) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  it->second.refs = 1;
  it->second.imports = 0;
}

void Ledger::let_go(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  let_go_held(handle);
}

void Ledger::let_go_held(uint64_t handle) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  it->second.kept = false;
  it->second.cache = CachePart{};
  settle(it);
}

CachePart& Ledger::keep_held(uint64_t handle, const std::string& key) {
  Handle& h = handles_.at(handle);
  if (!h.kept) {
    h.kept = true;
    h.cache = CachePart{};
    h.cache.key = key;
  }
  return h.cache;
}

CachePart* Ledger::cache_part(uint64_t handle) {
  auto it = handles_.find(handle);
  return it != handles_.end() && it->second.kept ? &it->second.cache : nullptr;
}

void Ledger::unkeep_all_held(int device) {
  for (auto it = handles_.begin(); it != handles_.end();) {
    auto next = std::next(it);
    if (it->second.kept && (device < 0 || it->second.device == device)) {
      it->second.kept = false;
      it->second.cache = CachePart{};
      settle(it);  // erases `it` alone, if anything
    }
    it = next;
  }
}

std::vector<uint64_t> Ledger::kept_handles() const {
  std::vector<uint64_t> out;
  for (const auto& [handle, h] : handles_)
    if (h.kept) out.push_back(handle);
  return out;
}

HandleFacts Ledger::facts(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  return facts_held(handle);
}

HandleFacts Ledger::facts_held(uint64_t handle) const {
  HandleFacts f;
  auto it = handles_.find(handle);
  if (it == handles_.end()) return f;
  const Handle& h = it->second;
  f.known = true;
  f.bytes = h.bytes;
  f.device = h.device;
  f.refs = h.refs;
  f.maps = h.maps;
  f.imports = h.imports;
  f.slot = h.slot;
  f.shared = h.shared;
  return f;
}

std::vector<SlotHandle> Ledger::program_handles(int slot) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::vector<SlotHandle> out;
  std::unordered_map<uint64_t, size_t> at;
  for (const auto& [handle, h] : handles_)
    if (h.slot == slot && h.programs()) {
      at[handle] = out.size();
      SlotHandle s;
      s.handle = handle;
      s.slot = slot;
      s.device = h.device;
      s.refs = h.refs;
      s.bytes = h.bytes;
      s.shared = h.shared;
      s.multicast = h.multicast;
      out.push_back(std::move(s));
    }
  for (const auto& [addr, m] : maps_) {
    auto it = at.find(m.handle);
    if (it != at.end()) out[it->second].maps.push_back(SlotMapping{addr, m.bytes, m.offset, std::string()});
  }
  return out;
}

void Ledger::forget(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  for (auto m = maps_.begin(); m != maps_.end();) m = m->second.handle == handle ? maps_.erase(m) : std::next(m);
  Handle& h = it->second;
  h.refs = h.maps = h.imports = 0;
  h.kept = false;
  settle(it);
}

void Ledger::restore(uint64_t handle, uint64_t bytes, int device, int slot, int refs) {
  std::lock_guard<std::mutex> guard(mutex_);
  Handle& h = handles_[handle];
  h = Handle{};
  h.bytes = bytes;
  h.device = device;
  h.refs = refs;
  h.slot = slot;
  h.allocation = next_allocation_++;
}

std::vector<uint64_t> Ledger::mapped_in(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::vector<uint64_t> out;
  for (auto m = maps_.lower_bound(addr); m != maps_.end() && m->first - addr < bytes; ++m)
    out.push_back(m->second.handle);
  return out;
}

uint64_t Ledger::slot_resident(int slot) {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t bytes = 0;
  for (const auto& [handle, h] : handles_)
    if (h.slot == slot && h.programs()) bytes += h.bytes;
  return bytes;
}

Ledger::Resident Ledger::resident(int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  Resident r;
  // An allocation with several handles counts once: the largest bytes
  // any of them knows (an unplaced import knows only what it maps).
  std::map<uint64_t, uint64_t> allocations;
  for (const auto& [handle, h] : handles_)
    if (h.device == device && h.programs()) {
      uint64_t& bytes = allocations[h.allocation];
      if (h.bytes > bytes) bytes = h.bytes;
      ++r.handles;
    }
  for (const auto& [allocation, bytes] : allocations) r.bytes += bytes;
  return r;
}

void Ledger::settle(std::unordered_map<uint64_t, Handle>::iterator it) {
  if (it->second.programs() || it->second.kept) return;
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

}  // namespace pagefast::policy::own_vmm
