// policy/units.h: the units the pool counts in, as distinct types, so that
// bytes and granules cannot be mixed up (the idea of Temeraire's Length and
// HugeLength). Device addresses stay uint64_t, always named *_addr.
//
// The granule is fixed at 2 MiB: it is the VMM allocation granularity
// (minimum and recommended) of every NVIDIA GPU measured (docs/DRIVER-FACTS.md: H200),
// and the page size of device memory. A device whose minimum granularity
// does not divide it is not pooled (interpose/pool/vmm_provider.cpp checks).
// A compile-time granule lets the page map and the rounding be shifts.
#pragma once

#include <cstdint>

#include "policy/config.h"

namespace pagefast::policy {

constexpr int kGranuleShift = 21;
constexpr uint64_t kGranuleBytes = uint64_t(1) << kGranuleShift;
static_assert(kGranuleBytes == 2 * kMiB, "the granule is the 2 MiB VMM page");

// A count of granules (or a granule offset inside a chunk or a range).
class Granules {
 public:
  constexpr Granules() : count_(0) {}
  constexpr explicit Granules(uint64_t count) : count_(count) {}

  constexpr uint64_t count() const { return count_; }
  constexpr uint64_t bytes() const { return count_ << kGranuleShift; }

  constexpr Granules operator+(Granules other) const { return Granules(count_ + other.count_); }
  // REQUIRES: other <= *this.
  constexpr Granules operator-(Granules other) const { return Granules(count_ - other.count_); }
  Granules& operator+=(Granules other) {
    count_ += other.count_;
    return *this;
  }
  Granules& operator-=(Granules other) {
    count_ -= other.count_;
    return *this;
  }
  constexpr bool operator==(Granules other) const { return count_ == other.count_; }
  constexpr bool operator!=(Granules other) const { return count_ != other.count_; }
  constexpr bool operator<(Granules other) const { return count_ < other.count_; }
  constexpr bool operator<=(Granules other) const { return count_ <= other.count_; }
  constexpr bool operator>(Granules other) const { return count_ > other.count_; }
  constexpr bool operator>=(Granules other) const { return count_ >= other.count_; }

 private:
  uint64_t count_;
};

// The largest byte count the pool ever rounds: no device comes near it,
// and rounding anything larger up to a granule would wrap past 2^64.
// Callers refuse larger requests before rounding (DevicePool::alloc).
constexpr uint64_t kMaxRoundableBytes = uint64_t(1) << 56;

// REQUIRES: bytes <= kMaxRoundableBytes. Larger counts saturate at the
// granules of kMaxRoundableBytes rather than wrap to a small number (a
// wrapped count once let a request of nearly 2^64 bytes pass every size
// check as zero granules and alias a live block: docs/POOL.md).
constexpr Granules granules_ceil(uint64_t bytes) {
  return bytes > kMaxRoundableBytes ? Granules(kMaxRoundableBytes >> kGranuleShift)
                                    : Granules((bytes + kGranuleBytes - 1) >> kGranuleShift);
}
constexpr Granules granules_floor(uint64_t bytes) { return Granules(bytes >> kGranuleShift); }
constexpr bool granule_aligned(uint64_t bytes_or_addr) { return (bytes_or_addr & (kGranuleBytes - 1)) == 0; }
// The index of the granule that holds an address, for the page map.
constexpr uint64_t granule_index(uint64_t addr) { return addr >> kGranuleShift; }
constexpr Granules min_granules(Granules a, Granules b) { return a < b ? a : b; }
constexpr Granules max_granules(Granules a, Granules b) { return a < b ? b : a; }

}  // namespace pagefast::policy
