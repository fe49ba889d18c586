// tests/policy/test_pools_budget.cpp: several pools of one device meeting
// in its budget (policy/device_budget.h "Lock rule"), as the glue wires the
// device's pool and the regions' pools: one BudgetedProvider (the limit),
// one DeviceBudget, a holder per pool. A growth or a wake that the limit
// or the driver refused gets the other pools' idle memory, and pools
// growing at once on several threads never wait for each other's locks.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "harness.h"
#include "policy/budgeted_provider.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

constexpr Granules granules_of(uint64_t bytes) { return Granules(bytes >> kGranuleShift); }

// A pool's holder, as the glue's PoolShare: what it holds resident, its
// idle memory, its release.
struct PoolHolder final : Holder {
  DevicePool* pool = nullptr;
  uint64_t held_bytes() override { return pool->mapped_bytes(); }
  uint64_t idle_bytes() override { return pool->idle_bytes(); }
  uint64_t release(uint64_t bytes) override { return pool->release(bytes); }
};

// `count` pools of one fake device of `capacity` bytes; the first is the
// device's (chunks of `chunk`), the others regions' pools (slot 1..),
// which grow from one granule.
struct Pools {
  Pools(int count, uint64_t capacity, uint64_t chunk, uint64_t limit)
      : inner(capacity, FakeProvider::Backing::Host),
        budget(0, limit),
        budgeted(inner, budget),
        page_map(new PageMap()),
        holders(count) {
    for (int i = 0; i < count; ++i) {
      PoolSettings s;
      s.config = config_with(chunk, limit);
      s.device_total_bytes = capacity;
      s.slot = i;
      pools.emplace_back(new DevicePool(budgeted, clock, *page_map, s, budget, nullptr));
      holders[i].pool = pools[i].get();
      pools[i]->join_budget(&holders[i]);
      REQUIRE(budget.add(&holders[i]));
    }
  }
  ~Pools() {
    pools.clear();
    page_map->destroy_leaves_for_tests();
  }
  FreeStatus free(DevicePool& pool, ThreadCache& cache, uint64_t addr) {
    Span* span = page_map->lookup(addr);
    return span ? pool.free(cache, span, addr) : FreeStatus::Invalid;
  }
  FakeProvider inner;
  DeviceBudget budget;
  BudgetedProvider budgeted;
  FakeClock clock;
  std::unique_ptr<PageMap> page_map;
  std::vector<PoolHolder> holders;
  std::vector<std::unique_ptr<DevicePool>> pools;
};

// A cache holding memory of the same fake device (taken directly, as the
// program's own VMM memory is), released in 2 MiB handles.
struct DeviceCache final : Holder {
  DeviceCache(FakeProvider& provider, uint64_t bytes) : provider(provider), idle(bytes) {
    REQUIRE(provider.take_direct(bytes));
  }
  uint64_t held_bytes() override { return idle; }
  uint64_t idle_bytes() override { return idle; }
  uint64_t release(uint64_t bytes) override {
    uint64_t given = 0;
    while (idle && (bytes == kAllIdle || given < bytes)) {
      idle -= 2 * kMiB;
      given += 2 * kMiB;
    }
    provider.give_direct(given);
    return given;
  }
  FakeProvider& provider;
  uint64_t idle;
};

}  // namespace

TEST_CASE("a pool growing under the limit has the own-VMM cache release what would go over it", "[budget][limit]") {
  FakeProvider inner(1 * kGiB, FakeProvider::Backing::None);
  DeviceBudget budget(0, 768 * kMiB);
  BudgetedProvider budgeted(inner, budget);
  DeviceCache cache(inner, 512 * kMiB);
  PoolHolder share;
  FakeClock clock;
  std::unique_ptr<PageMap> page_map(new PageMap());
  PoolSettings s;
  s.config = config_with(256 * kMiB, 768 * kMiB);
  s.device_total_bytes = 1 * kGiB;
  {
    DevicePool pool(budgeted, clock, *page_map, s, budget, nullptr);
    share.pool = &pool;
    pool.join_budget(&share);
    REQUIRE(budget.add(&cache));
    REQUIRE(budget.add(&share));
    ThreadCache* c = pool.attach_thread();
    // 512 MiB cached and 512 MiB more would be 256 MiB over the limit: the
    // cache gives that back, the pool grows.
    uint64_t p = 0;
    REQUIRE(pool.alloc(*c, 512 * kMiB, &p) == AllocStatus::Ok);
    CHECK(cache.idle == 256 * kMiB);
    CHECK(budgeted.held_bytes() == 512 * kMiB);
    // At the driver's refusal (the device is full): the cache gives what the
    // growth needs, and it is tried once more.
    inner.fail(FakeProvider::Op::Create, 0, ProviderStatus::OutOfMemory);
    uint64_t q = 0;
    REQUIRE(pool.alloc(*c, 128 * kMiB, &q) == AllocStatus::Ok);
    CHECK(cache.idle < 256 * kMiB);
    CHECK(inner.violations() == 0);
    pool.detach_thread(c);
  }
  page_map->destroy_leaves_for_tests();
}

TEST_CASE("a budgeted provider keeps what its pools hold under the limit, and asks no one", "[budget][limit]") {
  FakeProvider inner(1 * kGiB, FakeProvider::Backing::None);
  DeviceBudget limited(0, 512 * kMiB);
  BudgetedProvider provider(inner, limited);
  ChunkHandle a{}, b{}, c{};
  REQUIRE(provider.create_chunk(granules_of(384 * kMiB), &a) == ProviderStatus::Ok);
  CHECK(provider.held_bytes() == 384 * kMiB);
  // 256 MiB more would be over the limit: refused before the driver.
  CHECK(provider.create_chunk(granules_of(256 * kMiB), &b) == ProviderStatus::OutOfMemory);
  CHECK(inner.used_bytes() == 384 * kMiB);
  CHECK(provider.release_chunk(a));
  CHECK(provider.held_bytes() == 0);
  REQUIRE(provider.create_chunk(granules_of(256 * kMiB), &b) == ProviderStatus::Ok);
  // The driver's own refusal is passed on, and counts nothing.
  inner.fail(FakeProvider::Op::Create, 0, ProviderStatus::OutOfMemory);
  CHECK(provider.create_chunk(granules_of(2 * kMiB), &c) == ProviderStatus::OutOfMemory);
  CHECK(provider.held_bytes() == 256 * kMiB);
  // Without a limit, none.
  DeviceBudget none(0);
  BudgetedProvider unlimited(inner, none);
  CHECK(unlimited.create_chunk(granules_of(512 * kMiB), &c) == ProviderStatus::Ok);
}

TEST_CASE("under a limit, one pool's idle memory serves another pool's growth", "[budget][limit]") {
  Pools t(3, 256 * kMiB, 2 * kMiB, 64 * kMiB);
  DevicePool& b = *t.pools[1];
  DevicePool& c = *t.pools[2];
  ThreadCache* cb = b.attach_thread();
  ThreadCache* cc = c.attach_thread();
  std::vector<uint64_t> held;
  for (int i = 0; i < 8; ++i) {
    uint64_t p = 0;
    REQUIRE(b.alloc(*cb, 8 * kMiB, &p) == AllocStatus::Ok);
    held.push_back(p);
  }
  for (uint64_t p : held) REQUIRE(t.free(b, *cb, p) == FreeStatus::Ok);
  b.detach_thread(cb);
  CHECK(t.budgeted.held_bytes() == 64 * kMiB);
  // C grows into what B holds idle; then the device's pool.
  uint64_t p = 0;
  REQUIRE(c.alloc(*cc, 40 * kMiB, &p) == AllocStatus::Ok);
  REQUIRE(t.free(c, *cc, p) == FreeStatus::Ok);
  c.detach_thread(cc);
  ThreadCache* ca = t.pools[0]->attach_thread();
  REQUIRE(t.pools[0]->alloc(*ca, 56 * kMiB, &p) == AllocStatus::Ok);
  CHECK(t.budgeted.held_bytes() <= 64 * kMiB);
  REQUIRE(t.free(*t.pools[0], *ca, p) == FreeStatus::Ok);
  t.pools[0]->detach_thread(ca);
  CHECK(t.inner.violations() == 0);
}

TEST_CASE("at the driver's out of memory, one pool's idle memory serves another's growth", "[budget][oom]") {
  Pools t(2, 64 * kMiB, 2 * kMiB, 0);
  ThreadCache* c0 = t.pools[0]->attach_thread();
  ThreadCache* c1 = t.pools[1]->attach_thread();
  uint64_t p = 0;
  REQUIRE(t.pools[0]->alloc(*c0, 60 * kMiB, &p) == AllocStatus::Ok);
  REQUIRE(t.free(*t.pools[0], *c0, p) == FreeStatus::Ok);
  // The device is full of pool 0's idle memory: pool 1 gets it.
  REQUIRE(t.pools[1]->alloc(*c1, 48 * kMiB, &p) == AllocStatus::Ok);
  REQUIRE(t.free(*t.pools[1], *c1, p) == FreeStatus::Ok);
  t.pools[0]->detach_thread(c0);
  t.pools[1]->detach_thread(c1);
}

TEST_CASE("a tag's pool grows from one granule, doubling up to the chunk", "[budget][ramp]") {
  Pools t(2, 1 * kGiB, 256 * kMiB, 0);
  DevicePool& tag = *t.pools[1];
  ThreadCache* c = tag.attach_thread();
  uint64_t p = 0;
  REQUIRE(tag.alloc(*c, 1 * kMiB, &p) == AllocStatus::Ok);
  CHECK(tag.mapped_bytes() <= 4 * kMiB);
  std::vector<uint64_t> held{p};
  for (int i = 0; i < 16; ++i) {
    REQUIRE(tag.alloc(*c, 2 * kMiB, &p) == AllocStatus::Ok);
    held.push_back(p);
  }
  // 33 MiB live: the steps doubled, never more than twice what was needed.
  CHECK(tag.mapped_bytes() <= 72 * kMiB);
  for (uint64_t q : held) REQUIRE(t.free(tag, *c, q) == FreeStatus::Ok);
  tag.detach_thread(c);
}

TEST_CASE("a wake under the limit has the other pools release their idle memory", "[budget][sleep]") {
  Pools t(3, 256 * kMiB, 2 * kMiB, 64 * kMiB);
  DevicePool& keep = *t.pools[1];
  DevicePool& other = *t.pools[2];
  ThreadCache* ck = keep.attach_thread();
  uint64_t k = 0;
  REQUIRE(keep.alloc(*ck, 24 * kMiB, &k) == AllocStatus::Ok);
  fill(k, 24 * kMiB, 7);
  REQUIRE(keep.sleep(kSleepKeep) == SleepStatus::Ok);
  CHECK(t.budgeted.held_bytes() == 0);
  // Another pool takes the whole limit, then holds it idle.
  ThreadCache* co = other.attach_thread();
  uint64_t p = 0;
  REQUIRE(other.alloc(*co, 60 * kMiB, &p) == AllocStatus::Ok);
  REQUIRE(t.free(other, *co, p) == FreeStatus::Ok);
  other.detach_thread(co);
  CHECK(keep.wake() == SleepStatus::Ok);
  CHECK(check(k, 24 * kMiB, 7));
  REQUIRE(t.free(keep, *ck, k) == FreeStatus::Ok);
  keep.detach_thread(ck);
}

TEST_CASE("pools growing at once, each into the others' idle memory, never wait for each other", "[budget][threads]") {
  // Tagged and untagged pools on several threads fill the device (under a
  // limit, and to the driver's refusal), write, check and free, again and
  // again: before the budget was asked with no pool lock held, two pools
  // growing at once each held its own lock and waited for the other's.
  for (uint64_t limit : {uint64_t(64 * kMiB), uint64_t(0)}) {
    Pools t(3, 64 * kMiB, 2 * kMiB, limit);
    constexpr int kThreads = 6;
    std::atomic<int> wrong{0};
    std::atomic<long> got{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&, i] {
        DevicePool& pool = *t.pools[i % 3];
        ThreadCache* cache = pool.attach_thread();
        std::vector<std::pair<uint64_t, uint64_t>> held;
        for (int round = 0; round < 40; ++round) {
          for (int n = 0; n < 32; ++n) {
            const uint64_t bytes = (1 + (i * 7 + n * 5 + round) % 12) * kMiB;
            uint64_t p = 0;
            if (pool.alloc(*cache, bytes, &p) != AllocStatus::Ok) break;
            fill(p, bytes, uint64_t(i) << 32 | uint64_t(n));
            held.emplace_back(p, bytes);
          }
          for (size_t n = 0; n < held.size(); ++n)
            if (!check(held[n].first, held[n].second, uint64_t(i) << 32 | uint64_t(n))) ++wrong;
          got += long(held.size());
          for (auto& h : held)
            if (t.free(pool, *cache, h.first) != FreeStatus::Ok) ++wrong;
          held.clear();
        }
        pool.detach_thread(cache);
      });
    for (auto& th : threads) th.join();
    CHECK(wrong.load() == 0);
    CHECK(got.load() > 0);
    CHECK(t.budgeted.held_bytes() <= 64 * kMiB);
    CHECK(t.inner.violations() == 0);
  }
}

TEST_CASE("the budget answers cuMemGetInfo: idle memory is free, the limit is the total", "[budget][mem_info]") {
  Pools t(2, 1 * kGiB, 32 * kMiB, 0);
  ThreadCache* c0 = t.pools[0]->attach_thread();
  uint64_t p = 0, q = 0;
  REQUIRE(t.pools[0]->alloc(*c0, 64 * kMiB, &p) == AllocStatus::Ok);
  REQUIRE(t.pools[0]->alloc(*c0, 64 * kMiB, &q) == AllocStatus::Ok);
  REQUIRE(t.free(*t.pools[0], *c0, q) == FreeStatus::Ok);
  const uint64_t idle = t.pools[0]->idle_bytes();
  REQUIRE(idle >= 64 * kMiB);
  // No limit: the driver's free memory and the idle memory, within the total.
  uint64_t free_bytes = 512 * kMiB, total = 1 * kGiB;
  t.budget.mem_info(&free_bytes, &total);
  CHECK(free_bytes == 512 * kMiB + idle);
  CHECK(total == 1 * kGiB);
  free_bytes = 1 * kGiB - 16 * kMiB;
  t.budget.mem_info(&free_bytes, &total);
  CHECK(free_bytes == 1 * kGiB);
  // Under a limit: the limit is the total; free is what the memory in use
  // leaves of it, never more than the device could back.
  DeviceBudget limited(0, 256 * kMiB);
  REQUIRE(limited.add(&t.holders[0]));
  REQUIRE(limited.add(&t.holders[1]));
  free_bytes = 800 * kMiB;
  total = 1 * kGiB;
  limited.mem_info(&free_bytes, &total);
  CHECK(total == 256 * kMiB);
  CHECK(free_bytes == 256 * kMiB - t.pools[0]->in_use_bytes());
  free_bytes = 16 * kMiB;
  limited.mem_info(&free_bytes, nullptr);
  CHECK(free_bytes == 16 * kMiB + idle);
  REQUIRE(t.free(*t.pools[0], *c0, p) == FreeStatus::Ok);
  t.pools[0]->detach_thread(c0);
}
