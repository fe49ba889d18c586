// tests/policy/test_headroom.cpp: the device budget (policy/device_budget.h)
// and the pool's growth within the headroom (docs/POOL.md "Headroom").
#include <catch2/catch.hpp>

#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

// A holder that releases in whole units, as a pool releases whole chunks;
// `in_use` is what it holds beside its idle memory.
struct FakeHolder final : Holder {
  FakeHolder(uint64_t idle, uint64_t unit, uint64_t in_use = 0) : idle(idle), unit(unit), in_use(in_use) {}
  uint64_t held_bytes() override { return idle + in_use; }
  uint64_t idle_bytes() override { return idle; }
  uint64_t release(uint64_t bytes) override {
    ++asked;
    uint64_t given = 0;
    while (idle >= unit && (bytes == kAllIdle || given < bytes)) {
      idle -= unit;
      given += unit;
    }
    return given;
  }
  uint64_t idle, unit, in_use;
  int asked = 0;
};

}  // namespace

TEST_CASE("the budget gives back the shortfall under the headroom, in holder order", "[headroom]") {
  FakeHolder first(256 * kMiB, 64 * kMiB), second(1 * kGiB, 256 * kMiB);
  DeviceBudget budget(512 * kMiB);
  REQUIRE(budget.add(&first));
  REQUIRE(budget.add(&second));
  CHECK(budget.idle_bytes() == 256 * kMiB + 1 * kGiB);
  // At or over the headroom: nothing.
  CHECK(budget.relieve(512 * kMiB) == 0);
  CHECK(budget.relieve(8 * kGiB) == 0);
  CHECK(first.asked == 0);
  // 100 MiB under it: the first holder covers it, in its units.
  CHECK(budget.relieve(412 * kMiB) == 128 * kMiB);
  CHECK(first.idle == 128 * kMiB);
  CHECK(second.asked == 0);
  // 400 MiB under it: the first gives what it has, the second the rest.
  CHECK(budget.relieve(112 * kMiB) == 128 * kMiB + 512 * kMiB);
  CHECK(first.idle == 0);
  CHECK(second.idle == 512 * kMiB);
  // Out of memory: everything.
  CHECK(budget.reclaim() == 512 * kMiB);
  CHECK(budget.idle_bytes() == 0);
  CHECK(budget.reclaim() == 0);
  const DeviceBudget::Counters c = budget.counters();
  CHECK(c.relieves == 2);
  CHECK(c.relieved_bytes == 768 * kMiB);
  CHECK(c.releases == 1);
  CHECK(c.released_bytes == 512 * kMiB);
  CHECK(budget.room_above_headroom(600 * kMiB) == 88 * kMiB);
  CHECK(budget.room_above_headroom(100 * kMiB) == 0);
}

TEST_CASE("a budget without headroom only gives back on out of memory", "[headroom]") {
  FakeHolder holder(1 * kGiB, 2 * kMiB);
  DeviceBudget budget(0);
  REQUIRE(budget.add(&holder));
  CHECK(budget.relieve(0) == 0);
  CHECK(holder.asked == 0);
  CHECK(budget.reclaim() == 1 * kGiB);
}

TEST_CASE("a growth takes no more than leaves the headroom free, but always the request", "[headroom][pool]") {
  PoolConfig config = config_with(1 * kGiB);
  config.headroom_bytes = 1 * kGiB;
  PoolUnderTest t(1536 * kMiB, FakeProvider::Backing::None, config);
  t.provider.set_reports_free(true);
  Attached cache(t.pool);
  uint64_t a = 0, b = 0;
  // 1.5 GiB free, 1 GiB of headroom: the 1 GiB chunk shrinks to 512 MiB.
  REQUIRE(t.alloc(*cache, 4 * kMiB, &a) == AllocStatus::Ok);
  CHECK(t.provider.used_bytes() == 512 * kMiB);
  // No room left above the headroom: a 600 MiB request grows by itself
  // alone, as the driver would serve it.
  REQUIRE(t.alloc(*cache, 600 * kMiB, &b) == AllocStatus::Ok);
  CHECK(t.provider.used_bytes() == 1112 * kMiB);
  CHECK(t.pool.check() == "");
}

TEST_CASE("prewarm beyond what the device holds less the headroom is capped, and ends", "[headroom][prewarm]") {
  // Growing for prewarm past the headroom would make the growth give back
  // the chunks prewarm grew, to grow them again: it must stop at the room.
  for (uint64_t prewarm : {900 * kMiB, 1 * kGiB, 64 * kGiB}) {
    for (uint64_t chunk : {2 * kMiB, 256 * kMiB}) {
      PoolConfig config = config_with(chunk, 0, kUnlimited, prewarm);
      config.headroom_bytes = 256 * kMiB;
      PoolUnderTest t(1 * kGiB, FakeProvider::Backing::None, config, 0, true);
      CHECK(t.provider.used_bytes() == 768 * kMiB);
      Attached cache(t.pool);
      uint64_t p = 0;
      REQUIRE(t.alloc(*cache, 4 * kMiB, &p) == AllocStatus::Ok);
      CHECK(t.pool.stats().growths == (chunk == 2 * kMiB ? 384u : 3u));  // served from the prewarmed memory
      CHECK(t.pool.check() == "");
    }
  }
  // The default headroom of 1 GiB on a 1 GiB device leaves no room: none.
  PoolUnderTest none(1 * kGiB, FakeProvider::Backing::None, config_with(256 * kMiB, 0, kUnlimited, 900 * kMiB), 0,
                     true);
  CHECK(none.provider.used_bytes() == 0);
  // A limit below the room caps it as before.
  PoolConfig limited = config_with(256 * kMiB, 512 * kMiB, kUnlimited, 900 * kMiB);
  limited.headroom_bytes = 0;
  PoolUnderTest capped(1 * kGiB, FakeProvider::Backing::None, limited, 0, true);
  CHECK(capped.provider.used_bytes() == 512 * kMiB);
}

TEST_CASE("a provider that cannot tell free memory grows as before", "[headroom][pool]") {
  PoolConfig config = config_with(1 * kGiB);
  config.headroom_bytes = 1 * kGiB;
  PoolUnderTest t(1536 * kMiB, FakeProvider::Backing::None, config);
  Attached cache(t.pool);
  uint64_t a = 0;
  REQUIRE(t.alloc(*cache, 4 * kMiB, &a) == AllocStatus::Ok);
  CHECK(t.provider.used_bytes() == 1 * kGiB);
}

TEST_CASE("a growth that would cut into the headroom first releases chunks left wholly free", "[headroom][pool]") {
  for (const bool headroom : {false, true}) {
    CAPTURE(headroom);
    PoolConfig config = config_with(256 * kMiB);
    config.headroom_bytes = headroom ? 256 * kMiB : 0;
    PoolUnderTest t(1 * kGiB, FakeProvider::Backing::None, config);
    t.provider.set_reports_free(true);
    Attached cache(t.pool);
    uint64_t a = 0, b = 0, c = 0;
    REQUIRE(t.alloc(*cache, 256 * kMiB, &a) == AllocStatus::Ok);
    REQUIRE(t.alloc(*cache, 256 * kMiB, &b) == AllocStatus::Ok);
    CHECK(t.provider.used_bytes() == 512 * kMiB);
    REQUIRE(t.free(*cache, a) == FreeStatus::Ok);
    // Idle: a's chunk, once a sync retired it. 500 MiB does not fit there.
    REQUIRE(t.alloc(*cache, 500 * kMiB, &c) == AllocStatus::Ok);
    uint64_t free_now = 0;
    REQUIRE(t.provider.device_free_bytes(&free_now));
    if (headroom) {
      CHECK(free_now >= 256 * kMiB);
      CHECK(t.provider.used_bytes() == 256 * kMiB + 500 * kMiB);
      CHECK(t.pool.stats().headroom_releases == 1);
    } else {
      CHECK(free_now < 256 * kMiB);
      CHECK(t.pool.stats().headroom_releases == 0);
    }
    CHECK(t.pool.check() == "");
  }
}

TEST_CASE("the pool gives back idle memory in chunks until the bytes asked for went back", "[headroom][pool]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::None, config_with(128 * kMiB));
  Attached cache(t.pool);
  std::vector<uint64_t> blocks;
  REQUIRE(alloc_blocks(t, *cache, 8, 100 * kMiB, &blocks));
  for (uint64_t p : blocks) REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  const uint64_t held = t.provider.used_bytes();
  CHECK(held >= 800 * kMiB);
  CHECK(t.pool.idle_bytes() == held);
  // 200 MiB asked: whole chunks, one at a time, until 200 MiB went back.
  const uint64_t given = t.pool.release(200 * kMiB);
  CHECK(given >= 200 * kMiB);
  CHECK(given < 200 * kMiB + 128 * kMiB);
  CHECK(t.provider.used_bytes() == held - given);
  // All of it.
  CHECK(t.pool.release(kAllIdle) == held - given);
  CHECK(t.provider.used_bytes() == 0);
  CHECK(t.pool.idle_bytes() == 0);
  CHECK(t.pool.check() == "");
}

TEST_CASE("out of memory: the pool synchronizes before it refuses, whether or not its blocks wait", "[headroom][oom]") {
  // Nothing of the pool's waits for a synchronization, and the provider
  // runs out: before the answer, one sync (it would let the driver's
  // stream-ordered pools give back what the program freed into them), so
  // the answer never depends on whether another sync happened to run.
  PoolUnderTest t(64 * kMiB, FakeProvider::Backing::None, config_with(32 * kMiB, 0, kUnlimited));
  Attached cache(t.pool);
  uint64_t held = 0;
  REQUIRE(t.alloc(*cache, 48 * kMiB, &held) == AllocStatus::Ok);
  const uint64_t syncs_before = t.provider.calls(FakeProvider::Op::Sync);
  uint64_t p = 0;
  const AllocStatus refused = t.alloc(*cache, 48 * kMiB, &p);
  CHECK(refused != AllocStatus::Ok);
  CHECK(t.provider.calls(FakeProvider::Op::Sync) == syncs_before + 1);

  // In a stream capture the provider refuses to synchronize: the answer is
  // the same refusal, with no sync made.
  t.provider.set_sync_allowed(false);
  CHECK(t.alloc(*cache, 48 * kMiB, &p) == refused);
  CHECK(t.provider.violations() == 0);
  t.provider.set_sync_allowed(true);
  CHECK(t.free(*cache, held) == FreeStatus::Ok);
}

TEST_CASE("under a limit, a growing holder has the others release what would go over it", "[headroom][limit]") {
  // The pool holds 600 MiB (100 idle), the cache 300 MiB, all idle.
  FakeHolder cache(300 * kMiB, 2 * kMiB), pool(100 * kMiB, 100 * kMiB, 500 * kMiB);
  DeviceBudget budget(0, 1 * kGiB);
  REQUIRE(budget.add(&cache));
  REQUIRE(budget.add(&pool));
  CHECK(budget.held_bytes() == 900 * kMiB);
  CHECK(budget.limit_bytes() == 1 * kGiB);
  // Within the limit: nothing moves.
  CHECK(budget.make_room(&pool, 124 * kMiB) == 0);
  CHECK(cache.asked == 0);
  // 256 MiB more would be 132 MiB over it: the cache, not the pool, gives it.
  CHECK(budget.make_room(&pool, 256 * kMiB) == 132 * kMiB);
  CHECK(cache.idle == 168 * kMiB);
  CHECK(pool.asked == 0);
  // What each may keep beside the other.
  CHECK(budget.room_for(&cache) == 1 * kGiB - 600 * kMiB);
  CHECK(budget.room_for(&pool) == 1 * kGiB - 168 * kMiB);
  // Not a reclaim: the counters are the out-of-memory path's.
  CHECK(budget.counters().releases == 0);
}

TEST_CASE("without a limit nothing makes room, and the room is unbounded", "[headroom][limit]") {
  FakeHolder cache(300 * kMiB, 2 * kMiB), pool(0, 2 * kMiB, 8 * kGiB);
  DeviceBudget budget(0);
  REQUIRE(budget.add(&cache));
  REQUIRE(budget.add(&pool));
  CHECK(budget.make_room(&pool, 64 * kGiB) == 0);
  CHECK(budget.room_for(&cache) == kNoLimit);
  CHECK(cache.asked == 0);
}

TEST_CASE("a holder's refused growth is covered by the others only", "[headroom][oom]") {
  FakeHolder cache(64 * kMiB, 2 * kMiB), pool(512 * kMiB, 256 * kMiB);
  DeviceBudget budget(0);
  REQUIRE(budget.add(&cache));
  REQUIRE(budget.add(&pool));
  CHECK(budget.reclaim_for(&pool, 32 * kMiB) == 32 * kMiB);
  CHECK(budget.reclaim_for(&pool, 256 * kMiB) == 32 * kMiB);
  CHECK(pool.asked == 0);
  CHECK(budget.reclaim_for(&pool, 0) == 0);
  CHECK(budget.counters().releases == 0);
}
