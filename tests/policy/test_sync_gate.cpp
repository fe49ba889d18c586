// tests/policy/test_sync_gate.cpp: SyncGate alone (policy/sync_gate.h)
// over the other parts on the fake provider: when a batch is due, where a
// sync's retired blocks go (the cache or the arena), and the allowance's
// fixed figures.
#include <catch2/catch.hpp>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

Block* grown_block(PartsUnderTest& t, Granules granules) {
  bool fresh = false, grew = false;
  GrowthNote note;
  return t.large.stitch_or_grow(granules, BlockState::Used, &fresh, &grew, &note);
}

}  // namespace

TEST_CASE("sync gate: the fixed limits and an empty quarantine") {
  PoolConfig config = config_with(2 * kGranuleBytes);
  config.slack_ns = kNoSlack;
  PartsUnderTest t(config);
  const LargeLimits expected = large_limits(t.settings.device_total_bytes, 0);
  CHECK(t.gate.limits().batch_bytes == expected.batch_bytes);
  CHECK(t.gate.seal_bytes() == expected.batch_bytes);
  CHECK_FALSE(t.gate.adaptive());
  ThreadCache* cache = t.registry.attach(true);
  REQUIRE(cache);
  CHECK_FALSE(t.gate.due(*cache, Granules(0)));
  CHECK(t.gate.sync_if_waiting(cache));
  CHECK(t.quarantine.synchronizations() == 0);
  CHECK_FALSE(t.gate.reclaim_wanted(Granules(1)));
  t.registry.detach(cache);
}

TEST_CASE("sync gate: a retired block goes to the freeing thread's cache, or central") {
  PartsUnderTest t(config_with(2 * kGranuleBytes));
  ThreadCache* cache = t.registry.attach(true);
  REQUIRE(cache);
  Block* block = grown_block(t, Granules(1));
  REQUIRE(block);
  REQUIRE(t.quarantine_block(*cache, block));
  REQUIRE(t.gate.sync_and_retire(cache, true));
  CHECK(t.quarantine.synchronizations() == 1);
  CHECK(cache->large_count == 1);
  CHECK(block->load_state() == BlockState::Cached);
  CHECK(cache->cached_bytes.load() == kGranuleBytes);
  uint64_t addr = 0;
  REQUIRE(pop_large(*cache, Granules(1), AllocRequest{kGranuleBytes, kNoContextTag}, &addr));
  CHECK(addr == block->addr());
  // Freed again, retired without a route: back in the arena.
  REQUIRE(t.quarantine_block(*cache, block));
  REQUIRE(t.gate.sync_and_retire(cache, false));
  CHECK(cache->large_count == 0);
  const uint64_t block_addr = block->addr();
  Block* again = t.large.take(Granules(1), BlockState::Used);
  REQUIRE(again);
  CHECK(again->addr() == block_addr);
  t.large.put_back(again);
  CHECK(t.large.check().empty());
  t.registry.detach(cache);
}

TEST_CASE("sync gate: a batch over the allowance is due") {
  PoolConfig config = config_with(2 * kGranuleBytes);
  config.slack_ns = kNoSlack;
  PartsUnderTest t(config, 1 * kGiB);
  ThreadCache* cache = t.registry.attach(true);
  REQUIRE(cache);
  const Granules batch = granules_floor(t.gate.limits().batch_bytes);
  Block* block = grown_block(t, batch);
  REQUIRE(block);
  CHECK_FALSE(t.gate.due(*cache, batch));
  REQUIRE(t.quarantine_block(*cache, block));
  CHECK(t.gate.due(*cache, batch));
  // The out-of-memory path syncs whether or not anything waits.
  REQUIRE(t.gate.sync_before_refusing(cache));
  CHECK_FALSE(t.gate.due(*cache, batch));
  const uint64_t block_addr = block->addr();
  Block* again = t.large.take(batch, BlockState::Used);
  REQUIRE(again);
  CHECK(again->addr() == block_addr);
  t.large.put_back(again);
  t.registry.detach(cache);
}
