// policy/size_classes.h: the size classes of small requests (below
// kSmallLimitBytes) and the slab geometry of each. Built at compile time:
// the table must be usable before any dynamic initialiser runs (a hook can
// be called from another library's constructor).
//
// Why these classes:
//  - every class is a multiple of kMinAlignBytes (512), so every block of a
//    slab that starts on a granule is 512-byte aligned, as the driver's
//    (docs/DRIVER-FACTS.md: two 100-byte cuMemAlloc blocks come back 512 bytes apart);
//  - 512-byte steps up to 4 KiB, then 8 classes per doubling (mimalloc's
//    12.5% spacing): at most 12.5% internal waste, about 6% on average.
//    That rounding is all the capacity small blocks lose against a driver
//    that packs perfectly (docs/POOL.md);
//  - requests of 1 MiB and more take whole granules and come back 2 MiB
//    aligned, as the driver's do (docs/DRIVER-FACTS.md), so the largest class is 1 MiB.
#pragma once

#include <array>
#include <cstdint>

#include "policy/units.h"

namespace pagefast::policy {

constexpr uint64_t kMinAlignBytes = 512;
// Requests below this are carved from slabs; from it on, from the arena.
constexpr uint64_t kSmallLimitBytes = 1 * kMiB;
constexpr uint64_t kLinearClassLimitBytes = 4 * kKiB;  // 512-byte steps up to here
constexpr int kClassesPerDoubling = 8;
// A slab spans at most this many granules; more would let one small class
// pin too much memory.
constexpr uint64_t kMaxSlabGranules = 16;
static_assert(kMaxSlabGranules * kGranuleBytes < (uint64_t(1) << 32), "Slab::block_index is exact inside a slab");
// A slab geometry is accepted once its tail waste is below 1/256 of it
// (else the least wasteful up to kMaxSlabGranules): the tail is memory
// that no request of the class can use, so it counts against capacity.
constexpr uint64_t kSlabWasteDenominator = 256;
// Per-thread cache of one class: about this many bytes, within the bounds.
// 4 MiB gives every class up to 64 KiB the full kMaxCacheBlocks, so a
// steady loop of such a size cycles between the bin and the quarantine
// batch (also 64) without touching the class's shared lock (docs/POOL.md).
constexpr uint64_t kThreadCacheClassBytes = 4 * kMiB;
constexpr uint32_t kMinCacheBlocks = 2;
constexpr uint32_t kMaxCacheBlocks = 64;

struct SizeClass {
  uint32_t block_bytes;
  uint32_t slab_granules;
  uint32_t blocks_per_slab;
  uint32_t cache_blocks;  // capacity of a thread's bin of this class
  uint32_t batch_blocks;  // moved between a thread bin and the centre at once
};

namespace detail {

constexpr int count_classes() {
  int count = int(kLinearClassLimitBytes / kMinAlignBytes);
  for (uint64_t base = kLinearClassLimitBytes; base < kSmallLimitBytes; base *= 2) count += kClassesPerDoubling;
  return count;
}

}  // namespace detail

constexpr int kClassCount = detail::count_classes();

namespace detail {

constexpr SizeClass make_class(uint64_t block_bytes) {
  uint64_t best_granules = 1;
  uint64_t best_waste_num = kGranuleBytes % block_bytes, best_waste_den = kGranuleBytes;
  for (uint64_t g = 1; g <= kMaxSlabGranules; ++g) {
    const uint64_t span = g * kGranuleBytes;
    const uint64_t waste = span % block_bytes;
    if (waste * best_waste_den < best_waste_num * span) {
      best_granules = g;
      best_waste_num = waste;
      best_waste_den = span;
    }
    if (waste * kSlabWasteDenominator <= span) {
      best_granules = g;
      break;
    }
  }
  uint64_t cache = kThreadCacheClassBytes / block_bytes;
  if (cache < kMinCacheBlocks) cache = kMinCacheBlocks;
  if (cache > kMaxCacheBlocks) cache = kMaxCacheBlocks;
  SizeClass c{};
  c.block_bytes = uint32_t(block_bytes);
  c.slab_granules = uint32_t(best_granules);
  c.blocks_per_slab = uint32_t(best_granules * kGranuleBytes / block_bytes);
  c.cache_blocks = uint32_t(cache);
  c.batch_blocks = uint32_t(cache / 2 > 0 ? cache / 2 : 1);
  return c;
}

constexpr std::array<SizeClass, kClassCount> make_classes() {
  std::array<SizeClass, kClassCount> classes{};
  int i = 0;
  for (uint64_t b = kMinAlignBytes; b <= kLinearClassLimitBytes; b += kMinAlignBytes) classes[i++] = make_class(b);
  for (uint64_t base = kLinearClassLimitBytes; base < kSmallLimitBytes; base *= 2)
    for (int step = 1; step <= kClassesPerDoubling; ++step)
      classes[i++] = make_class(base + base / kClassesPerDoubling * step);
  return classes;
}

constexpr int kLookupEntries = int(kSmallLimitBytes / kMinAlignBytes);

constexpr std::array<uint8_t, kLookupEntries> make_lookup(const std::array<SizeClass, kClassCount>& classes) {
  std::array<uint8_t, kLookupEntries> lookup{};
  int c = 0;
  for (int i = 0; i < kLookupEntries; ++i) {
    const uint64_t largest_request = uint64_t(i + 1) * kMinAlignBytes;
    while (classes[c].block_bytes < largest_request) ++c;
    lookup[i] = uint8_t(c);
  }
  return lookup;
}

}  // namespace detail

constexpr std::array<SizeClass, kClassCount> kSizeClasses = detail::make_classes();
constexpr std::array<uint8_t, detail::kLookupEntries> kClassLookup = detail::make_lookup(kSizeClasses);

static_assert(kSizeClasses[kClassCount - 1].block_bytes == kSmallLimitBytes, "the last class is 1 MiB");
static_assert(kClassCount <= 255, "class indices fit a byte");

// REQUIRES: 0 < request_bytes < kSmallLimitBytes.
inline int class_of(uint64_t request_bytes) { return kClassLookup[(request_bytes - 1) / kMinAlignBytes]; }

}  // namespace pagefast::policy
