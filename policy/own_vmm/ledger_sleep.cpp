// policy/own_vmm/ledger_sleep.cpp: the ledger's records asleep and the
// translation of the program's handle values (ledger.h, "Asleep").
#include <iterator>

#include "policy/own_vmm/driver.h"
#include "policy/own_vmm/ledger.h"

namespace pagefast::policy::own_vmm {

bool Ledger::ever() {
  std::lock_guard<std::mutex> guard(mutex_);
  return ever_;
}

bool Ledger::to_driver(uint64_t program, uint64_t* driver) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (asleep_.count(program)) return false;
  auto it = aliases_.find(program);
  *driver = it == aliases_.end() ? program : it->second;
  return true;
}

uint64_t Ledger::to_program(uint64_t driver) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = reverse_.find(driver);
  return it == reverse_.end() ? driver : it->second;
}

uint64_t Ledger::adopt(uint64_t driver) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = reverse_.find(driver);
  if (it != reverse_.end()) return it->second;  // a handle the program holds already (an import)
  if (!held(driver)) return driver;
  while (held(next_own_) || reverse_.count(next_own_)) --next_own_;
  const uint64_t own = next_own_--;
  aliases_[own] = driver;
  reverse_[driver] = own;
  return own;
}

void Ledger::drop_alias(uint64_t program) {
  std::lock_guard<std::mutex> guard(mutex_);
  drop_alias_held(program);
}

void Ledger::drop_alias_held(uint64_t program) {
  auto it = aliases_.find(program);
  if (it == aliases_.end()) return;
  auto back = reverse_.find(it->second);
  if (back != reverse_.end() && back->second == program) reverse_.erase(back);
  aliases_.erase(it);
}

bool Ledger::aliases_empty() {
  std::lock_guard<std::mutex> guard(mutex_);
  return aliases_.empty();
}

bool Ledger::translates() {
  std::lock_guard<std::mutex> guard(mutex_);
  return !asleep_.empty() || !aliases_.empty();
}

void Ledger::slept(SlotHandle s) {
  std::lock_guard<std::mutex> guard(mutex_);
  ever_ = true;
  // The record itself goes to sleep, keyed by the program's value from now on.
  Handles::node_type node = handles_.extract(s.handle);
  if (node.empty()) {  // a handle the ledger did not record
    Handles one;
    one[0].allocation = next_allocation_++;
    node = one.extract(one.begin());
  }
  for (auto m = maps_.begin(); m != maps_.end();) m = m->second.handle == s.handle ? maps_.erase(m) : std::next(m);
  drop_alias_held(s.program);
  Handle& h = node.mapped();
  h.bytes = s.bytes;
  h.device = s.device;
  h.slot = s.slot;
  h.refs = s.refs;
  h.maps = h.imports = 0;
  h.kept = false;
  h.cache = CachePart{};
  h.prop = std::move(s.prop);
  h.slept = std::move(s.maps);
  h.host = s.host;
  for (const SlotMapping& m : h.slept) places_[m.addr] = Mapping{m.bytes, s.program, m.offset};
  node.key() = s.program;
  asleep_.erase(s.program);
  asleep_.insert(std::move(node));
}

std::vector<SlotHandle> Ledger::asleep_handles(int slot) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::map<uint64_t, const Handle*> ordered;
  for (const auto& [program, h] : asleep_)
    if (h.slot == slot) ordered[program] = &h;
  std::vector<SlotHandle> out;
  for (const auto& [program, h] : ordered) {
    SlotHandle s;
    s.program = program;
    s.slot = h->slot;
    s.device = h->device;
    s.refs = h->refs;
    s.bytes = h->bytes;
    s.prop = h->prop;
    s.maps = h->slept;
    s.host = h->host;
    out.push_back(std::move(s));
  }
  return out;
}

void Ledger::woke(uint64_t program, uint64_t driver) {
  std::lock_guard<std::mutex> guard(mutex_);
  Handles::node_type node = asleep_.extract(program);
  if (node.empty()) return;
  Handle& h = node.mapped();
  for (const SlotMapping& m : h.slept) {
    places_.erase(m.addr);
    maps_[m.addr] = Mapping{m.bytes, driver, m.offset};
  }
  h.maps = int(h.slept.size());
  h.allocation = next_allocation_++;
  h.prop.clear();
  h.slept.clear();
  h.host = nullptr;
  node.key() = driver;
  handles_.erase(driver);  // a value the driver hands out again was released for real before
  auto it = handles_.insert(std::move(node)).position;
  if (program != driver) {
    aliases_[program] = driver;
    reverse_[driver] = program;
  }
  settle(it);
}

bool Ledger::asleep(uint64_t program) {
  std::lock_guard<std::mutex> guard(mutex_);
  return asleep_.count(program) != 0;
}

bool Ledger::asleep_properties(uint64_t program, std::string* prop) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = asleep_.find(program);
  if (it == asleep_.end()) return false;
  *prop = it->second.prop;
  return true;
}

size_t Ledger::asleep_count() {
  std::lock_guard<std::mutex> guard(mutex_);
  return asleep_.size();
}

int Ledger::release_asleep(uint64_t program, bool* gone, void** host) {
  std::lock_guard<std::mutex> guard(mutex_);
  *gone = false;
  *host = nullptr;
  auto it = asleep_.find(program);
  if (it == asleep_.end() || it->second.refs <= 0) return kInvalidValue;
  if (--it->second.refs == 0 && it->second.slept.empty()) {
    *gone = true;
    *host = it->second.host;
    asleep_.erase(it);
  }
  return kOk;
}

int Ledger::tiled(uint64_t addr, uint64_t bytes, Places::iterator* first) {
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

int Ledger::unmap_asleep(uint64_t addr, uint64_t bytes, std::vector<void*>* gone) {
  std::lock_guard<std::mutex> guard(mutex_);
  const uint64_t end = addr + bytes;
  Places::iterator first;
  if (const int r = tiled(addr, bytes, &first); r != kOk) return r;
  while (first != places_.end() && first->first < end) {
    auto h = asleep_.find(first->second.handle);
    if (h != asleep_.end()) {
      auto& maps = h->second.slept;
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

int Ledger::access_asleep(uint64_t addr, uint64_t bytes, const std::function<void(std::string*)>& update) {
  std::lock_guard<std::mutex> guard(mutex_);
  const uint64_t end = addr + bytes;
  Places::iterator first;
  if (const int r = tiled(addr, bytes, &first); r != kOk) return r;
  for (auto it = first; it != places_.end() && it->first < end; ++it) {
    auto h = asleep_.find(it->second.handle);
    if (h == asleep_.end()) continue;
    for (SlotMapping& m : h->second.slept)
      if (m.addr == it->first) update(&m.access);
  }
  return kOk;
}

bool Ledger::overlaps_asleep(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  const uint64_t end = addr + bytes < addr ? UINT64_MAX : addr + bytes;
  auto it = places_.upper_bound(addr);
  if (it != places_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.bytes > addr) return true;
  }
  return it != places_.end() && it->first < end;
}

void Ledger::slot_asleep(int slot, uint64_t* asleep, uint64_t* kept) {
  std::lock_guard<std::mutex> guard(mutex_);
  *asleep = *kept = 0;
  for (const auto& [program, h] : asleep_)
    if (h.slot == slot) {
      *asleep += h.bytes;
      if (h.host) *kept += h.bytes;
    }
}

}  // namespace pagefast::policy::own_vmm
