// tests/policy/test_give_back.cpp: idle memory reaching other processes
// (policy/device_budget.h "give back" and "neighbours"). A free that takes
// the device's idle memory over the budget's bound gives the rest back at
// once; a program that takes it back keeps it from then on; a growth the
// driver refuses with nothing idle here asks the neighbours, and not when
// the limit is what refused.
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

constexpr uint64_t kRelearnNs = 5ull * 1000 * 1000 * 1000;

struct PoolHolder final : Holder {
  DevicePool* pool = nullptr;
  uint64_t held_bytes() override { return pool->mapped_bytes(); }
  uint64_t idle_bytes() override { return pool->idle_bytes(); }
  uint64_t release(uint64_t bytes) override { return pool->release(bytes); }
};

// Another process on the same fake device: it holds `idle` bytes of it,
// which it gives back when asked.
struct OtherProcess final : Neighbours {
  explicit OtherProcess(FakeProvider& provider, uint64_t bytes) : provider(provider), idle(bytes) {
    REQUIRE(provider.take_direct(bytes));
  }
  uint64_t give_back(uint64_t) override {
    ++asks;
    const uint64_t given = idle;
    provider.give_direct(given);
    idle = 0;
    return given;
  }
  FakeProvider& provider;
  uint64_t idle;
  int asks = 0;
};

// One pool of a fake device with its budget, as the glue wires it.
struct Device {
  Device(uint64_t capacity, uint64_t chunk, uint64_t limit, uint64_t idle_limit)
      : inner(capacity, FakeProvider::Backing::None),
        budget(0, limit),
        budgeted(inner, budget),
        page_map(new PageMap()) {
    PoolSettings s;
    s.config = config_with(chunk, limit);
    s.device_total_bytes = capacity;
    pool.reset(new DevicePool(budgeted, clock, *page_map, s, budget, nullptr));
    holder.pool = pool.get();
    pool->join_budget(&holder);
    REQUIRE(budget.add(&holder));
    budget.set_idle_limit(idle_limit, kRelearnNs);
  }
  ~Device() {
    pool.reset();
    page_map->destroy_leaves_for_tests();
  }
  FreeStatus free(ThreadCache& cache, uint64_t addr) {
    Span* span = page_map->lookup(addr);
    return span ? pool->free(cache, span, addr) : FreeStatus::Invalid;
  }
  // `count` blocks of `bytes`, then every one freed.
  void fill_and_empty(ThreadCache& cache, int count, uint64_t bytes) {
    std::vector<uint64_t> held;
    for (int i = 0; i < count; ++i) {
      uint64_t p = 0;
      REQUIRE(pool->alloc(cache, bytes, &p) == AllocStatus::Ok);
      held.push_back(p);
    }
    for (uint64_t p : held) REQUIRE(free(cache, p) == FreeStatus::Ok);
  }
  FakeProvider inner;
  DeviceBudget budget;
  BudgetedProvider budgeted;
  FakeClock clock;
  std::unique_ptr<PageMap> page_map;
  PoolHolder holder;
  std::unique_ptr<DevicePool> pool;
};

}  // namespace

TEST_CASE("a free that takes idle memory over the bound gives the rest back at once", "[budget][give_back]") {
  Device d(1 * kGiB, 32 * kMiB, 0, 64 * kMiB);
  ThreadCache* c = d.pool->attach_thread();
  d.fill_and_empty(*c, 16, 32 * kMiB);
  // 512 MiB were freed: what stays on the device is the bound and what the
  // last batch of frees holds (under one more step of the bound).
  CHECK(d.inner.used_bytes() <= 64 * kMiB + 64 * kMiB);
  CHECK(d.budget.counters().given_back_bytes >= 384 * kMiB);
  CHECK(d.budget.counters().give_backs >= 1);
  // Everything still serves: the pool grows again.
  d.fill_and_empty(*c, 4, 32 * kMiB);
  CHECK(d.pool->check().empty());
  CHECK(d.inner.violations() == 0);
  d.pool->detach_thread(c);
}

TEST_CASE("without a bound, freed memory stays for reuse", "[budget][give_back]") {
  Device d(1 * kGiB, 32 * kMiB, 0, kNoLimit);
  ThreadCache* c = d.pool->attach_thread();
  d.fill_and_empty(*c, 16, 32 * kMiB);
  CHECK(d.inner.used_bytes() == 512 * kMiB);
  CHECK(d.budget.counters().given_back_bytes == 0);
  d.pool->detach_thread(c);
}

TEST_CASE("idle memory within the bound stays: a loop that frees and allocates again keeps its speed",
          "[budget][give_back]") {
  // The pool holds the loop's blocks and what waits for a sync beside
  // them, within the bound.
  Device d(1 * kGiB, 32 * kMiB, 0, 512 * kMiB);
  ThreadCache* c = d.pool->attach_thread();
  d.fill_and_empty(*c, 6, 32 * kMiB);
  const uint64_t growths = d.pool->stats().growths;
  for (int round = 0; round < 8; ++round) d.fill_and_empty(*c, 6, 32 * kMiB);
  CHECK(d.budget.counters().given_back_bytes == 0);
  CHECK(d.inner.used_bytes() <= 512 * kMiB);
  CHECK(d.pool->stats().growths <= growths + 6);
  d.pool->detach_thread(c);
}

TEST_CASE("a program that takes back what was given back keeps it from then on", "[budget][give_back]") {
  Device d(1 * kGiB, 32 * kMiB, 0, 64 * kMiB);
  ThreadCache* c = d.pool->attach_thread();
  d.fill_and_empty(*c, 16, 32 * kMiB);
  const uint64_t first = d.budget.counters().given_back_bytes;
  REQUIRE(first >= 384 * kMiB);
  // Within release_delay it allocates all of it again and frees it: the
  // second emptying is a loop's, and stays.
  d.clock.advance_ns(kRelearnNs / 10);
  d.fill_and_empty(*c, 16, 32 * kMiB);
  CHECK(d.budget.counters().given_back_bytes == first);
  CHECK(d.inner.used_bytes() == 512 * kMiB);
  // And the next rounds: no release, no growth.
  const uint64_t growths = d.pool->stats().growths;
  d.fill_and_empty(*c, 16, 32 * kMiB);
  CHECK(d.pool->stats().growths == growths);
  d.pool->detach_thread(c);
}

TEST_CASE("an emptying long after the last one gives back again", "[budget][give_back]") {
  Device d(1 * kGiB, 32 * kMiB, 0, 64 * kMiB);
  ThreadCache* c = d.pool->attach_thread();
  d.fill_and_empty(*c, 16, 32 * kMiB);
  const uint64_t first = d.budget.counters().given_back_bytes;
  d.clock.advance_ns(2 * kRelearnNs);
  d.fill_and_empty(*c, 16, 32 * kMiB);
  CHECK(d.budget.counters().given_back_bytes >= first + 384 * kMiB);
  CHECK(d.inner.used_bytes() <= 128 * kMiB);
  d.pool->detach_thread(c);
}

TEST_CASE("the prewarm and a partly used chunk are not asked for at every free", "[budget][give_back]") {
  // One 256 MiB chunk holds a live block: nothing of it can go back, and
  // frees beside it ask the budget once per step of the bound, not each.
  Device d(1 * kGiB, 256 * kMiB, 0, 64 * kMiB);
  ThreadCache* c = d.pool->attach_thread();
  uint64_t live = 0;
  REQUIRE(d.pool->alloc(*c, 2 * kMiB, &live) == AllocStatus::Ok);
  d.fill_and_empty(*c, 100, 2 * kMiB);
  CHECK(d.budget.counters().given_back_bytes == 0);
  const uint64_t syncs = d.pool->stats().synchronizations;
  CHECK(syncs <= 4);
  REQUIRE(d.free(*c, live) == FreeStatus::Ok);
  d.pool->detach_thread(c);
}

TEST_CASE("a growth the driver refuses, with nothing idle here, asks the other processes on the device",
          "[budget][neighbours]") {
  Device d(256 * kMiB, 32 * kMiB, 0, kNoLimit);
  OtherProcess other(d.inner, 224 * kMiB);
  d.budget.set_neighbours(&other);
  ThreadCache* c = d.pool->attach_thread();
  uint64_t p = 0;
  REQUIRE(d.pool->alloc(*c, 32 * kMiB, &p) == AllocStatus::Ok);
  CHECK(other.asks == 0);
  // The device is full: the other process gives its idle memory back.
  uint64_t q = 0;
  REQUIRE(d.pool->alloc(*c, 128 * kMiB, &q) == AllocStatus::Ok);
  CHECK(other.asks == 1);
  CHECK(d.budget.counters().neighbour_bytes == 224 * kMiB);
  CHECK(d.budget.counters().neighbour_asks == 1);
  REQUIRE(d.free(*c, p) == FreeStatus::Ok);
  REQUIRE(d.free(*c, q) == FreeStatus::Ok);
  d.pool->detach_thread(c);
}

TEST_CASE("a growth that the limit refuses asks no other process", "[budget][neighbours]") {
  Device d(1 * kGiB, 32 * kMiB, 64 * kMiB, kNoLimit);
  OtherProcess other(d.inner, 128 * kMiB);
  d.budget.set_neighbours(&other);
  ThreadCache* c = d.pool->attach_thread();
  uint64_t p = 0;
  CHECK(d.pool->alloc(*c, 96 * kMiB, &p) == AllocStatus::OutOfMemory);
  CHECK(other.asks == 0);
  d.pool->detach_thread(c);
}

TEST_CASE("frees giving back on several threads while others allocate", "[budget][give_back][threads]") {
  Device d(2 * kGiB, 16 * kMiB, 0, 64 * kMiB);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&d, &failed, t] {
      ThreadCache* c = d.pool->attach_thread();
      if (!c) {
        failed = true;
        return;
      }
      for (int round = 0; round < 20; ++round) {
        std::vector<uint64_t> held;
        for (int i = 0; i < 8; ++i) {
          uint64_t p = 0;
          if (d.pool->alloc(*c, uint64_t(1 + (i + t) % 4) * 8 * kMiB, &p) != AllocStatus::Ok) {
            failed = true;
            break;
          }
          held.push_back(p);
        }
        for (uint64_t p : held)
          if (d.free(*c, p) != FreeStatus::Ok) failed = true;
        d.clock.advance_ns(kRelearnNs);
      }
      d.pool->detach_thread(c);
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK_FALSE(failed.load());
  CHECK(d.pool->check().empty());
  CHECK(d.inner.violations() == 0);
  CHECK(d.budget.counters().give_backs > 0);
}
