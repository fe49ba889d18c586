// tests/policy/test_units.cpp: the small building blocks: units, size
// classes, free bins, the page map and the address space.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "policy/address_space.h"
#include "policy/fake_provider.h"
#include "policy/free_bins.h"
#include "policy/page_map.h"
#include "policy/size_classes.h"
#include "policy/units.h"

using namespace pagefast;
using namespace pagefast::policy;

TEST_CASE("granules round and convert", "[units]") {
  CHECK(granules_ceil(1).count() == 1);
  CHECK(granules_ceil(kGranuleBytes).count() == 1);
  CHECK(granules_ceil(kGranuleBytes + 1).count() == 2);
  CHECK(granules_floor(kGranuleBytes - 1).count() == 0);
  CHECK(Granules(3).bytes() == 6 * kMiB);
  CHECK(granule_aligned(4 * kMiB));
  CHECK_FALSE(granule_aligned(4 * kMiB + 512));
  Granules g(5);
  g -= Granules(2);
  CHECK(g == Granules(3));
  CHECK(max_granules(Granules(2), Granules(7)) == Granules(7));
}

TEST_CASE("rounding never wraps: sizes near 2^64 stay huge", "[units]") {
  for (uint64_t d : {uint64_t(0), uint64_t(1), kGranuleBytes - 2, kGranuleBytes - 1, kGranuleBytes})
    CHECK(granules_ceil(~uint64_t(0) - d).bytes() >= kMaxRoundableBytes);
  CHECK(granules_ceil(kMaxRoundableBytes).bytes() == kMaxRoundableBytes);
  for (int k = 0; k < 57; ++k) {
    const uint64_t b = uint64_t(1) << k;
    CHECK(granules_ceil(b).bytes() >= b);
    CHECK(granules_ceil(b).bytes() - b < kGranuleBytes);
  }
}

TEST_CASE("size classes are 512-aligned, ordered, and cover every small size", "[classes]") {
  for (int c = 0; c < kClassCount; ++c) {
    const SizeClass& sc = kSizeClasses[c];
    CHECK(sc.block_bytes % kMinAlignBytes == 0);
    if (c) CHECK(sc.block_bytes > kSizeClasses[c - 1].block_bytes);
    CHECK(sc.blocks_per_slab >= 2);
    CHECK(uint64_t(sc.blocks_per_slab) * sc.block_bytes <= sc.slab_granules * kGranuleBytes);
    // Tail waste of a slab stays small (<= 1/8 for the few odd classes).
    const uint64_t span = sc.slab_granules * kGranuleBytes;
    CHECK((span - uint64_t(sc.blocks_per_slab) * sc.block_bytes) * 8 <= span);
    CHECK(sc.cache_blocks >= kMinCacheBlocks);
    CHECK(sc.cache_blocks <= kMaxCacheBlocks);
    CHECK(sc.batch_blocks >= 1);
  }
  for (uint64_t bytes = 1; bytes < kSmallLimitBytes; bytes += (bytes < 8192 ? 1 : 97)) {
    const int c = class_of(bytes);
    REQUIRE(kSizeClasses[c].block_bytes >= bytes);
    if (c) REQUIRE(kSizeClasses[c - 1].block_bytes < bytes);  // the tightest class
  }
  CHECK(class_of(kSmallLimitBytes - 1) == kClassCount - 1);
  CHECK(kSizeClasses[class_of(100)].block_bytes == 512);
  // Above 4 KiB, waste is at most 12.5% of the request.
  for (uint64_t bytes = 4097; bytes < kSmallLimitBytes; bytes += 4093)
    CHECK(kSizeClasses[class_of(bytes)].block_bytes * 8 <= bytes * 9);
}

TEST_CASE("free bins find the tightest fitting block", "[bins]") {
  FreeBins bins;
  std::vector<Block> blocks(6);
  const uint64_t lengths[] = {1, 3, 17, 40, 200, 1000};
  for (int i = 0; i < 6; ++i) {
    blocks[i].set_range(uint64_t(i) << 40, Granules(lengths[i]));
    bins.insert(&blocks[i]);
  }
  CHECK(bins.total() == Granules(1 + 3 + 17 + 40 + 200 + 1000));
  CHECK(bins.find(Granules(1)) == &blocks[0]);
  CHECK(bins.find(Granules(2)) == &blocks[1]);
  CHECK(bins.find(Granules(17)) == &blocks[2]);
  CHECK(bins.find(Granules(18))->granules() >= Granules(18));
  CHECK(bins.find(Granules(1000)) == &blocks[5]);
  CHECK(bins.find(Granules(1001)) == nullptr);
  bins.remove(&blocks[5]);
  CHECK(bins.find(Granules(300)) == nullptr);
  // Bin indices grow with the length and stay in range.
  int last = 0;
  for (uint64_t n = 1; n < (uint64_t(1) << 40); n = n * 5 / 4 + 1) {
    const int b = FreeBins::bin_of(Granules(n));
    CHECK(b >= last);
    CHECK(b < FreeBins::kBinCount);
    last = b;
  }
  std::vector<uint64_t> seen;
  bins.for_each_largest_first([&](Block* b) {
    seen.push_back(b->granules().count());
    return true;
  });
  CHECK(seen == std::vector<uint64_t>{200, 40, 17, 3, 1});
}

TEST_CASE("page map entries, leaves and limits", "[page_map]") {
  auto map = std::make_unique<PageMap>();
  Span a{SpanKind::Block, nullptr}, b{SpanKind::Slab, nullptr};
  const uint64_t base = uint64_t(0x7f12) << 32;
  CHECK(map->lookup(base) == nullptr);
  REQUIRE(map->ensure(base, Granules(4)));
  map->set(base, Granules(4), &a);
  map->set_one(base + 2 * kGranuleBytes, &b);
  CHECK(map->lookup(base) == &a);
  CHECK(map->lookup(base + kGranuleBytes + 12345) == &a);
  CHECK(map->lookup(base + 2 * kGranuleBytes) == &b);
  CHECK(map->lookup(base + 4 * kGranuleBytes) == nullptr);
  // A range across a leaf boundary.
  const uint64_t leaf_bytes = (uint64_t(1) << PageMap::kLeafBits) * kGranuleBytes;
  const uint64_t edge = leaf_bytes * 3 - kGranuleBytes;
  REQUIRE(map->ensure(edge, Granules(2)));
  map->set(edge, Granules(2), &b);
  CHECK(map->lookup(edge + kGranuleBytes) == &b);
  // Beyond 57 bits: never pool memory.
  CHECK(map->lookup(~uint64_t(0) - 5) == nullptr);
  CHECK_FALSE(map->ensure(uint64_t(1) << 60, Granules(1)));
  map->destroy_leaves_for_tests();
}

TEST_CASE("address space: low and high ends, coalescing, new ranges", "[address_space]") {
  FakeProvider provider(64 * kMiB, FakeProvider::Backing::None);
  AddressSpace space(provider, 16 * kMiB);
  uint64_t a = 0, b = 0, c = 0, h = 0;
  REQUIRE(space.take(Granules(2), AddressSpace::End::Low, &a) == ProviderStatus::Ok);
  CHECK(space.range_count() == 1);
  REQUIRE(space.take(Granules(2), AddressSpace::End::Low, &b) == ProviderStatus::Ok);
  CHECK(b == a + 2 * kGranuleBytes);  // growth packs
  REQUIRE(space.take(Granules(1), AddressSpace::End::High, &h) == ProviderStatus::Ok);
  CHECK(h == a + 7 * kGranuleBytes);  // stitches from the top
  space.give(a, Granules(2));
  REQUIRE(space.take(Granules(1), AddressSpace::End::Low, &c) == ProviderStatus::Ok);
  CHECK(c == a);
  // Too big for the range: a new, larger one.
  uint64_t big = 0;
  REQUIRE(space.take(Granules(20), AddressSpace::End::Low, &big) == ProviderStatus::Ok);
  CHECK(space.range_count() == 2);
  CHECK(space.reserved_bytes() == 16 * kMiB + 40 * kMiB);
  space.give(big, Granules(20));
  space.give(b, Granules(2));
  space.give(h, Granules(1));
  space.give(c, Granules(1));
  CHECK(space.free_bytes() == space.reserved_bytes());
  // A failing reservation is reported, not hidden.
  provider.fail(FakeProvider::Op::Reserve, 0, ProviderStatus::Failed);
  uint64_t x = 0;
  CHECK(space.take(Granules(100), AddressSpace::End::Low, &x) == ProviderStatus::Failed);
  CHECK(provider.violations() == 0);
}
