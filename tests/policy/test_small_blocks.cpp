// tests/policy/test_small_blocks.cpp: SmallBlocks alone (policy/
// small_blocks.h) over LargeBlocks on the fake provider: slabs made and
// given back, bins refilled and drained, a larger class's block borrowed.
#include <catch2/catch.hpp>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

// A slab of `class_index` on fresh arena memory.
bool add_slab(PartsUnderTest& t, int class_index) {
  const Granules granules = t.small.next_slab_granules(class_index);
  bool fresh = false, grew = false;
  GrowthNote note;
  Block* backing = t.large.stitch_or_grow(granules, BlockState::SlabBacking, &fresh, &grew, &note);
  return backing && t.small.add_slab(class_index, backing, granules);
}

}  // namespace

TEST_CASE("small blocks: a slab fills a bin, the bin serves hits, the slab goes back empty") {
  PartsUnderTest t(config_with(2 * kGranuleBytes));
  const int c = class_of(256);
  ThreadCache cache;
  CHECK(t.small.next_slab_granules(c) == Granules(1));
  CHECK_FALSE(t.small.refill(cache, c));
  REQUIRE(add_slab(t, c));
  CHECK(t.small.next_slab_granules(c) == min_granules(Granules(2), Granules(kSizeClasses[c].slab_granules)));
  REQUIRE(t.small.refill(cache, c));
  CHECK(cache.bins[c].count > 0);
  uint64_t addr = 0;
  REQUIRE(pop_small(cache, c, AllocRequest{200, kNoContextTag}, &addr));
  Slab* slab = static_cast<Slab*>(t.page_map->lookup(addr));
  REQUIRE(slab);
  CHECK(slab->info[(addr - slab->base_addr()) / slab->block_bytes].live.load() == 1);
  CHECK(t.small.describe().find("slabs") != std::string::npos);
  // The block comes back as a retire would bring it, the rest with the bins.
  slab->info[(addr - slab->base_addr()) / slab->block_bytes].live.store(0);
  const SmallEntry entry{slab, uint32_t((addr - slab->base_addr()) / slab->block_bytes)};
  t.small.put_back(&entry, 1, c);
  t.small.drain_bins(cache);
  CHECK(cache.bins[c].count == 0);
  CHECK(cache.cached_bytes.load() == 0);
  t.small.release_all_empty();
  CHECK(t.small.describe().empty());
  CHECK(t.large.check().empty());
}

TEST_CASE("small blocks: a full device borrows a larger class's free block") {
  PartsUnderTest t(config_with(2 * kGranuleBytes));
  const int small_class = class_of(256);
  const int larger_class = class_of(4096);
  REQUIRE(larger_class > small_class);
  ThreadCache cache;
  uint64_t addr = 0;
  CHECK_FALSE(t.small.borrow(cache, small_class, AllocRequest{256, kNoContextTag}, &addr));
  REQUIRE(add_slab(t, larger_class));
  REQUIRE(t.small.borrow(cache, small_class, AllocRequest{256, kNoContextTag}, &addr));
  const Slab* slab = static_cast<const Slab*>(t.page_map->lookup(addr));
  REQUIRE(slab);
  CHECK(slab->class_index == larger_class);
  CHECK(slab->info[(addr - slab->base_addr()) / slab->block_bytes].requested_bytes.load() == 256);
  CHECK(cache.in_use_delta.load() == slab->block_bytes);
}

TEST_CASE("small blocks: occupancy counts blocks in the centres and the bins") {
  PartsUnderTest t(config_with(2 * kGranuleBytes));
  const int c = class_of(1024);
  REQUIRE(add_slab(t, c));
  ThreadCache cache;
  REQUIRE(t.small.refill(cache, c));
  uint64_t in_bins[kClassCount] = {};
  in_bins[c] = cache.bins[c].count;
  ClassOccupancy rows[kClassCount];
  int count = 0;
  REQUIRE(t.small.occupancy(in_bins, rows, &count));
  REQUIRE(count == 1);
  CHECK(rows[0].block_bytes == kSizeClasses[c].block_bytes);
  CHECK(rows[0].slabs == 1);
  CHECK(rows[0].blocks_in_use == 0);
  t.small.drain_bins(cache);
}

TEST_CASE("small blocks: a slab's block index is the quotient for every offset inside it") {
  // Slab::block_index replaces a divide on the free's path by a multiply:
  // it must agree with the divide for every class and every offset a slab
  // can have (each 512-byte step of a slab of the most granules, and the
  // bytes on either side of each block's start), and for the largest
  // offsets below 2^32.
  for (const SizeClass& c : kSizeClasses) {
    Slab slab;
    slab.set_block_bytes(c.block_bytes);
    const uint64_t slab_bytes = kMaxSlabGranules * kGranuleBytes;
    uint64_t wrong = 0;
    for (uint64_t offset = 0; offset < slab_bytes; offset += kMinAlignBytes)
      wrong += slab.block_index(offset) != offset / c.block_bytes;
    for (uint64_t start = c.block_bytes; start < slab_bytes; start += c.block_bytes)
      wrong += slab.block_index(start - 1) != start / c.block_bytes - 1 ||
               slab.block_index(start + 1) != start / c.block_bytes;
    for (uint64_t offset = (uint64_t(1) << 32) - 4096; offset < (uint64_t(1) << 32); ++offset)
      wrong += slab.block_index(offset) != offset / c.block_bytes;
    INFO("class of " << c.block_bytes << " bytes");
    CHECK(wrong == 0);
  }
}
