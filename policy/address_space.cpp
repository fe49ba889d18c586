// policy/address_space.cpp: first-fit from either end over the unmapped
// extents of the reserved ranges. The extent count stays small (holes left
// by released chunks and dissolved stitches), so a walk is fine here.
#include "policy/address_space.h"

#include <new>

namespace pagefast::policy {

bool AddressSpace::fits(Granules granules, End end, uint64_t* addr) const {
  const uint64_t bytes = granules.bytes();
  if (end == End::Low) {
    for (const auto& [start, stop] : free_)
      if (stop - start >= bytes) {
        *addr = start;
        return true;
      }
  } else {
    for (auto it = free_.rbegin(); it != free_.rend(); ++it)
      if (it->second - it->first >= bytes) {
        *addr = it->second - bytes;
        return true;
      }
  }
  return false;
}

ProviderStatus AddressSpace::take(Granules granules, End end, uint64_t* addr) {
  try {
    if (!fits(granules, end, addr)) {
      const uint64_t bytes = granules.bytes() > range_bytes_ ? granules.bytes() : range_bytes_;
      uint64_t base = 0;
      const ProviderStatus status = provider_.reserve_address(bytes, &base);
      if (status != ProviderStatus::Ok) return status;
      reserved_bytes_ += bytes;
      range_starts_.insert(base);
      range_ends_.insert(base + bytes);
      insert_free(base, base + bytes);
      if (!fits(granules, end, addr)) return ProviderStatus::Failed;
    }
    // Carve [*addr, *addr + bytes) out of the extent that holds it.
    const uint64_t bytes = granules.bytes();
    auto it = free_.upper_bound(*addr);
    --it;
    const uint64_t start = it->first, stop = it->second;
    free_.erase(it);
    if (start < *addr) free_.emplace(start, *addr);
    if (*addr + bytes < stop) free_.emplace(*addr + bytes, stop);
    return ProviderStatus::Ok;
  } catch (const std::bad_alloc&) {
    return ProviderStatus::OutOfMemory;
  }
}

void AddressSpace::insert_free(uint64_t addr, uint64_t end_addr) {
  // Merge with the neighbours unless a range boundary separates them:
  // one mapping must never straddle two reservations.
  auto next = free_.lower_bound(addr);
  if (next != free_.end() && next->first == end_addr && !range_starts_.count(end_addr)) {
    end_addr = next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->second == addr && !range_ends_.count(addr)) {
      prev->second = end_addr;
      return;
    }
  }
  free_.emplace(addr, end_addr);
}

void AddressSpace::give(uint64_t addr, Granules granules) {
  try {
    insert_free(addr, addr + granules.bytes());
  } catch (const std::bad_alloc&) {
    // The extent is lost to reuse; address space is plentiful.
  }
}

uint64_t AddressSpace::free_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [start, stop] : free_) bytes += stop - start;
  return bytes;
}

}  // namespace pagefast::policy
