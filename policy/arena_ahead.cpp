// policy/arena_ahead.cpp: Arena's growth in three steps, for growth ahead
// on a service thread (arena.h "Growth ahead", policy/grow_ahead.h): the
// addresses taken under the device lock, the driver's create, map and
// access without it, the chunk made the arena's under it again.
#include "policy/arena.h"

namespace pagefast::policy {

bool Arena::begin_growth(Granules step, PendingGrowth* out) {
  if (sleep_.asleep() || step.count() == 0 || step > settings_.chunk_granules) return false;
  if (!runs_.reserve(1)) return false;
  uint64_t addr = 0;
  if (address_space_.take(step, AddressSpace::End::Low, &addr) != ProviderStatus::Ok) return false;
  if (!page_map_.ensure(addr, step)) {
    address_space_.give(addr, step);
    return false;
  }
  *out = PendingGrowth{addr, step, chunks_.peers()};
  return true;
}

ProviderStatus Arena::create_ahead(const PendingGrowth& growth, ChunkHandle* handle, bool* created, bool* mapped) {
  *created = *mapped = false;
  ProviderStatus status = provider_.create_chunk(growth.step, handle);
  if (status != ProviderStatus::Ok) return status;
  *created = true;
  status = provider_.map(growth.addr, *handle, Granules(0), growth.step);
  if (status != ProviderStatus::Ok) return status;
  *mapped = true;
  return provider_.set_access(growth.addr, growth.step, AccessSet{growth.peers, 0});
}

void Arena::abandon_growth(const PendingGrowth& growth, const ChunkHandle* handle, bool mapped) {
  if (mapped && !provider_.unmap(growth.addr, growth.step)) {
    // The addresses stay mapped: never reused, the handle never released.
    ++counters_.leaks;
    return;
  }
  if (handle) chunks_.release_or_keep(*handle);
  address_space_.give(growth.addr, growth.step);
}

ProviderStatus Arena::finish_growth(const PendingGrowth& growth, ChunkHandle handle) {
  // Sleep waits for the slow paths in flight (the caller holds a pass of
  // the sleep gate), so the arena is awake; the peers may have changed
  // while the chunk was opened: it gets the current set.
  ProviderStatus status = ProviderStatus::Ok;
  const uint64_t peers = chunks_.peers();
  if (peers != growth.peers)
    status = provider_.set_access(growth.addr, growth.step, AccessSet{peers, growth.peers & ~peers});
  if (status == ProviderStatus::Ok && !chunks_.add(growth.addr, handle, growth.step))
    status = ProviderStatus::OutOfMemory;
  if (status != ProviderStatus::Ok) {
    abandon_growth(growth, &handle, true);
    return status;
  }
  runs_.add_run(growth.addr, growth.step, false);
  ++counters_.growths;
  return ProviderStatus::Ok;
}

}  // namespace pagefast::policy
