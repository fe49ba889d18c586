// tests/policy/test_large_blocks.cpp: LargeBlocks alone (policy/
// large_blocks.h) on the fake provider: growth and reuse, stitching before
// growth, the shortfall under a limit, release, the headroom and peers.
#include <catch2/catch.hpp>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

TEST_CASE("large blocks: a growth serves a request, a given-back block serves the next") {
  PartsUnderTest t(config_with(2 * kGranuleBytes));
  LargeBlocks& large = t.large;
  CHECK(large.take(Granules(1), BlockState::Used) == nullptr);
  bool fresh = false, grew = false;
  GrowthNote note;
  Block* b = large.stitch_or_grow(Granules(1), BlockState::Used, &fresh, &grew, &note);
  REQUIRE(b);
  CHECK(fresh);
  CHECK(grew);
  CHECK(large.mapped_bytes() == 2 * kGranuleBytes);
  CHECK(large.growths() == 1);
  large.put_back(b);
  fresh = false;
  Block* again = large.stitch_or_grow(Granules(1), BlockState::Used, &fresh, &grew, &note);
  CHECK(again != nullptr);
  CHECK_FALSE(fresh);
  CHECK_FALSE(grew);
  CHECK(large.growths() == 1);
  large.put_back(again);
  CHECK(large.check().empty());
}

TEST_CASE("large blocks: scattered free granules are stitched rather than grown around") {
  PartsUnderTest t(config_with(2 * kGranuleBytes));
  bool fresh = false, grew = false;
  GrowthNote note;
  Block* blocks[4];
  for (Block*& b : blocks) b = t.large.stitch_or_grow(Granules(1), BlockState::Used, &fresh, &grew, &note);
  for (Block* b : blocks) REQUIRE(b);
  REQUIRE(t.large.growths() == 2);
  // One free granule in each chunk: two granules, no run of two.
  t.large.put_back(blocks[0]);
  t.large.put_back(blocks[3]);
  Block* stitched = t.large.stitch_or_grow(Granules(2), BlockState::Used, &fresh, &grew, &note);
  REQUIRE(stitched);
  CHECK(stitched->stitch != nullptr);
  CHECK_FALSE(grew);
  CHECK(t.large.growths() == 2);
  t.large.put_back(stitched);
  t.large.put_back(blocks[1]);
  t.large.put_back(blocks[2]);
  CHECK(t.large.check().empty());
}

TEST_CASE("large blocks: under a limit the shortfall says what was left") {
  PartsUnderTest t(config_with(2 * kGranuleBytes, 4 * kGranuleBytes));
  Shortfall shortfall;
  Block* a = t.large.take_under_pressure(Granules(4), BlockState::Used, &shortfall);
  REQUIRE(a);
  CHECK(t.large.take_under_pressure(Granules(1), BlockState::Used, &shortfall) == nullptr);
  CHECK(shortfall.free_bytes == 0);
  CHECK(shortfall.room_under_limit_bytes == 0);
  CHECK(shortfall.released_bytes == 0);
  t.large.put_back(a);
  const Shortfall now = t.large.shortfall();
  CHECK(now.free_bytes == 4 * kGranuleBytes);
  CHECK(t.large.check().empty());
}

TEST_CASE("large blocks: idle chunks go back one at a time or all at once") {
  PartsUnderTest t(config_with(2 * kGranuleBytes));
  bool fresh = false, grew = false;
  GrowthNote note;
  Block* a = t.large.stitch_or_grow(Granules(2), BlockState::Used, &fresh, &grew, &note);
  Block* b = t.large.stitch_or_grow(Granules(2), BlockState::Used, &fresh, &grew, &note);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(t.large.decay_chunk() == 0);  // nothing wholly free
  t.large.put_back(a);
  CHECK(t.large.decay_chunk() == 2 * kGranuleBytes);
  CHECK(t.large.mapped_bytes() == 2 * kGranuleBytes);
  t.large.put_back(b);
  CHECK(t.large.release_idle(kAllIdle) == 2 * kGranuleBytes);
  CHECK(t.large.mapped_bytes() == 0);
  PoolStats stats;
  t.large.read_figures(&stats);
  CHECK(stats.releases == 2);
  CHECK(stats.growths == 2);
  CHECK(stats.peak_mapped_bytes == 4 * kGranuleBytes);
  CHECK(t.large.check().empty());
}

TEST_CASE("large blocks: the headroom and peers") {
  PoolConfig config = config_with(2 * kGranuleBytes);
  config.headroom_bytes = 512 * kMiB;  // more than the fake device has
  PartsUnderTest t(config);
  CHECK_FALSE(t.large.growth_cuts_headroom(Granules(1)));  // the provider cannot tell yet
  t.provider.set_reports_free(true);
  CHECK(t.large.growth_cuts_headroom(Granules(1)));
  CHECK(t.large.add_peer(1) == 0);
  CHECK(t.large.peers() == 2);
  CHECK(t.large.add_peer(0) == 0);  // the pool's own device
  CHECK(t.large.peers() == 2);
  CHECK(t.large.remove_peer(1) == 0);
  CHECK(t.large.peers() == 0);
}
