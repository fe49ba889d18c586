// policy/own_vmm/sleep_book.cpp: see sleep_book.h.
#include "policy/own_vmm/sleep_book.h"

#include <iterator>

#include "policy/own_vmm/driver.h"

namespace pagefast::policy::own_vmm {

bool SleepBook::to_driver(uint64_t program, uint64_t* driver) const {
  if (asleep_.count(program)) return false;
  auto it = aliases_.find(program);
  *driver = it == aliases_.end() ? program : it->second;
  return true;
}

uint64_t SleepBook::to_program(uint64_t driver) const {
  auto it = reverse_.find(driver);
  return it == reverse_.end() ? driver : it->second;
}

uint64_t SleepBook::adopt(uint64_t driver) {
  auto it = reverse_.find(driver);
  if (it != reverse_.end()) return it->second;  // a handle the program holds already (an import)
  if (!held(driver)) return driver;
  while (held(next_own_) || reverse_.count(next_own_)) --next_own_;
  const uint64_t own = next_own_--;
  aliases_[own] = driver;
  reverse_[driver] = own;
  return own;
}

void SleepBook::drop_alias(uint64_t program) {
  auto it = aliases_.find(program);
  if (it == aliases_.end()) return;
  auto back = reverse_.find(it->second);
  if (back != reverse_.end() && back->second == program) reverse_.erase(back);
  aliases_.erase(it);
}

void SleepBook::put(SlotHandle handle) {
  ever_ = true;
  const uint64_t program = handle.program;
  drop_alias(program);
  for (const SlotMapping& m : handle.maps) places_[m.addr] = Place{m.bytes, program};
  asleep_[program] = std::move(handle);
}

std::vector<const SlotHandle*> SleepBook::slot_handles(int slot) const {
  std::map<uint64_t, const SlotHandle*> ordered;
  for (const auto& [program, h] : asleep_)
    if (h.slot == slot) ordered[program] = &h;
  std::vector<const SlotHandle*> out;
  for (const auto& [program, h] : ordered) out.push_back(h);
  return out;
}

void SleepBook::woke(uint64_t program, uint64_t driver) {
  auto it = asleep_.find(program);
  if (it == asleep_.end()) return;
  for (const SlotMapping& m : it->second.maps) places_.erase(m.addr);
  asleep_.erase(it);
  if (program == driver) return;
  aliases_[program] = driver;
  reverse_[driver] = program;
}

const SlotHandle* SleepBook::find(uint64_t program) const {
  auto it = asleep_.find(program);
  return it == asleep_.end() ? nullptr : &it->second;
}

int SleepBook::release(uint64_t program, bool* gone, void** host) {
  *gone = false;
  *host = nullptr;
  auto it = asleep_.find(program);
  if (it == asleep_.end() || it->second.refs <= 0) return kInvalidValue;
  if (--it->second.refs == 0 && it->second.maps.empty()) {
    *gone = true;
    *host = it->second.host;
    asleep_.erase(it);
  }
  return kOk;
}

int SleepBook::tiled(uint64_t addr, uint64_t bytes, Places::iterator* first) {
  const uint64_t end = addr + bytes;
  *first = places_.lower_bound(addr);
  if (*first == places_.end() || (*first)->first >= end || end < addr) return -1;
  // They must tile the range exactly, as the driver acts on whole mappings.
  uint64_t at = addr;
  for (auto it = *first; it != places_.end() && it->first < end; ++it) {
    if (it->first != at) return kInvalidValue;
    at += it->second.bytes;
  }
  return at == end ? kOk : kInvalidValue;
}

int SleepBook::unmap(uint64_t addr, uint64_t bytes, std::vector<void*>* gone) {
  const uint64_t end = addr + bytes;
  Places::iterator first;
  if (const int r = tiled(addr, bytes, &first); r != kOk) return r;
  while (first != places_.end() && first->first < end) {
    auto h = asleep_.find(first->second.program);
    if (h != asleep_.end()) {
      auto& maps = h->second.maps;
      for (auto m = maps.begin(); m != maps.end(); ++m)
        if (m->addr == first->first) {
          maps.erase(m);
          break;
        }
      if (maps.empty() && h->second.refs == 0) {
        gone->push_back(h->second.host);
        asleep_.erase(h);
      }
    }
    first = places_.erase(first);
  }
  return kOk;
}

int SleepBook::access_records(uint64_t addr, uint64_t bytes, std::vector<std::string*>* out) {
  const uint64_t end = addr + bytes;
  Places::iterator first;
  if (const int r = tiled(addr, bytes, &first); r != kOk) return r;
  for (auto it = first; it != places_.end() && it->first < end; ++it) {
    auto h = asleep_.find(it->second.program);
    if (h == asleep_.end()) continue;
    for (SlotMapping& m : h->second.maps)
      if (m.addr == it->first) out->push_back(&m.access);
  }
  return kOk;
}

bool SleepBook::overlaps(uint64_t addr, uint64_t bytes) const {
  const uint64_t end = addr + bytes < addr ? UINT64_MAX : addr + bytes;
  auto it = places_.upper_bound(addr);
  if (it != places_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.bytes > addr) return true;
  }
  return it != places_.end() && it->first < end;
}

void SleepBook::slot_bytes(int slot, uint64_t* asleep, uint64_t* kept) const {
  *asleep = *kept = 0;
  for (const auto& [program, h] : asleep_)
    if (h.slot == slot) {
      *asleep += h.bytes;
      if (h.host) *kept += h.bytes;
    }
}

}  // namespace pagefast::policy::own_vmm
