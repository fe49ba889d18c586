// policy/address_space.h: the virtual address space of one device's pool:
// the reserved ranges and which parts of them are not mapped. Home chunks
// take the lowest free addresses, so that chunks grown one after another
// sit side by side and their free blocks coalesce across the boundary;
// stitches take the highest, away from that growth. A new range is
// reserved when none fits (each of PoolConfig::reserve_bytes, by default
// twice the device's memory).
//
// Slow path only (growth, stitch, release), under the device lock; the
// ordered maps allocate, and a host out-of-memory answers OutOfMemory.
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "policy/provider.h"
#include "policy/units.h"

namespace pagefast::policy {

class AddressSpace {
 public:
  enum class End { Low, High };

  // REQUIRES: range_bytes is granule-aligned and not 0.
  AddressSpace(Provider& provider, uint64_t range_bytes) : provider_(provider), range_bytes_(range_bytes) {}

  ProviderStatus take(Granules granules, End end, uint64_t* addr);
  // REQUIRES: [addr, addr + granules) came from take() and is unmapped.
  void give(uint64_t addr, Granules granules);

  uint64_t reserved_bytes() const { return reserved_bytes_; }
  // Calls visit(addr, end_addr) for each extent of the reserved ranges
  // that take() handed out (mapped, or about to be), in address order.
  template <typename Visit>
  void for_each_taken(Visit visit) const {
    auto end = range_ends_.begin();
    for (auto start = range_starts_.begin(); start != range_starts_.end(); ++start, ++end) {
      uint64_t at = *start;
      for (auto f = free_.lower_bound(*start); f != free_.end() && f->first < *end; ++f) {
        if (at < f->first) visit(at, f->first);
        at = f->second;
      }
      if (at < *end) visit(at, *end);
    }
  }
  uint64_t free_bytes() const;
  int range_count() const { return int(range_starts_.size()); }

 private:
  bool fits(Granules granules, End end, uint64_t* addr) const;
  void insert_free(uint64_t addr, uint64_t end_addr);

  Provider& provider_;
  const uint64_t range_bytes_;
  uint64_t reserved_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;  // start -> end of each unmapped extent
  std::set<uint64_t> range_starts_;    // extents never merge across these
  std::set<uint64_t> range_ends_;
};

}  // namespace pagefast::policy
