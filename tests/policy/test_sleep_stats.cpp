// tests/policy/test_sleep_stats.cpp: the pool's figures read while a
// sleep or a wake holds the device lock (as pagefast-stat's publisher
// reads them, from another thread). A provider in front of the fake runs a
// reader thread from inside the first unmap of the sleep and the first map
// of the wake, and waits for it: the reads happen at those fixed steps,
// never by timing. Reserved bytes stay, and no counter goes back, also
// when the first read of all comes while the lock is held.
#include <catch2/catch.hpp>

#include <functional>
#include <thread>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

// Forwards everything to a FakeProvider; runs `tap` once at the next
// unmap or map while armed.
class TappedProvider final : public Provider {
 public:
  TappedProvider() : fake_(2 * kGiB, FakeProvider::Backing::Host) {}
  ProviderStatus reserve_address(uint64_t bytes, uint64_t* base) override { return fake_.reserve_address(bytes, base); }
  ProviderStatus create_chunk(Granules g, ChunkHandle* c) override { return fake_.create_chunk(g, c); }
  bool release_chunk(ChunkHandle c) override { return fake_.release_chunk(c); }
  ProviderStatus map(uint64_t addr, ChunkHandle c, Granules offset, Granules g) override {
    run_tap();
    return fake_.map(addr, c, offset, g);
  }
  bool unmap(uint64_t addr, Granules g) override {
    run_tap();
    return fake_.unmap(addr, g);
  }
  ProviderStatus set_access(uint64_t addr, Granules g, const AccessSet& a) override {
    return fake_.set_access(addr, g, a);
  }
  SyncStatus synchronize() override { return fake_.synchronize(); }
  void copy_to_host(HostCopy* copies, uint64_t count) override { fake_.copy_to_host(copies, count); }
  void copy_from_host(HostCopy* copies, uint64_t count) override { fake_.copy_from_host(copies, count); }
  void host_free(void* host, uint64_t bytes) override { fake_.host_free(host, bytes); }

  std::function<void()> tap;  // run once, then cleared

 private:
  void run_tap() {
    if (!tap) return;
    std::function<void()> once = std::move(tap);
    tap = nullptr;
    once();
  }
  FakeProvider fake_;
};

struct Reading {
  PoolStats stats;
  bool asleep = false;
};

// Reads the pool's figures from another thread while this one (inside the
// provider, under the device lock) waits for it.
Reading read_from_another_thread(DevicePool& pool) {
  Reading r;
  std::thread reader([&] {
    r.stats = pool.stats();
    r.asleep = pool.asleep();
  });
  reader.join();
  return r;
}

}  // namespace

TEST_CASE("figures during sleep and wake: reserved stays, counters never go back", "[sleep][stats]") {
  TappedProvider provider;
  FakeClock clock;
  PageMap* page_map = new PageMap();
  {
    DeviceBudget budget(kDefaultHeadroomBytes);  // config_with's limit and headroom
    DevicePool pool(provider, clock, *page_map, PoolUnderTest::settings(config_with(64 * kMiB), 2 * kGiB), budget,
                    nullptr);
    ThreadCache* cache = pool.attach_thread();
    std::vector<uint64_t> blocks;
    for (int i = 0; i < 6; ++i) {
      uint64_t p = 0;
      REQUIRE(pool.alloc(*cache, 60 * kMiB, &p) == AllocStatus::Ok);
      blocks.push_back(p);
    }
    const PoolStats before = pool.stats();
    REQUIRE(before.growths >= 6);
    REQUIRE(before.reserved_bytes > 0);

    Reading during_sleep, during_wake;
    bool sleep_tapped = false, wake_tapped = false;
    provider.tap = [&] {
      during_sleep = read_from_another_thread(pool);
      sleep_tapped = true;
    };
    REQUIRE(pool.sleep(kSleepKeep) == SleepStatus::Ok);
    REQUIRE(sleep_tapped);
    const PoolStats asleep = pool.stats();
    provider.tap = [&] {
      during_wake = read_from_another_thread(pool);
      wake_tapped = true;
    };
    REQUIRE(pool.wake() == SleepStatus::Ok);
    REQUIRE(wake_tapped);
    const PoolStats after = pool.stats();

    CHECK(during_sleep.asleep);
    CHECK(during_wake.asleep);
    CHECK_FALSE(pool.asleep());
    for (const PoolStats* s : std::vector<const PoolStats*>{&during_sleep.stats, &asleep, &during_wake.stats, &after}) {
      CHECK(s->reserved_bytes == before.reserved_bytes);
      CHECK(s->growths >= before.growths);
      CHECK(s->hits >= before.hits);
      CHECK(s->releases >= before.releases);
      CHECK(s->stitches >= before.stitches);
    }
    CHECK(asleep.growths >= during_sleep.stats.growths);
    CHECK(during_wake.stats.growths >= asleep.growths);
    CHECK(after.growths >= during_wake.stats.growths);
    CHECK(during_sleep.stats.in_use_bytes == before.in_use_bytes);
    for (uint64_t p : blocks) {
      Span* span = page_map->lookup(p);
      REQUIRE(span);
      CHECK(pool.free(*cache, span, p) == FreeStatus::Ok);
    }
    pool.detach_thread(cache);
  }
  page_map->destroy_leaves_for_tests();
  delete page_map;
}

namespace {

struct GrownPool {
  TappedProvider provider;
  FakeClock clock;
  PageMap* page_map = new PageMap();
  DeviceBudget budget{kDefaultHeadroomBytes};  // config_with's limit and headroom
  DevicePool* pool = nullptr;
  ThreadCache* cache = nullptr;
  std::vector<uint64_t> blocks;

  explicit GrownPool(int count) {
    pool = new DevicePool(provider, clock, *page_map, PoolUnderTest::settings(config_with(64 * kMiB), 2 * kGiB), budget,
                          nullptr);
    cache = pool->attach_thread();
    for (int i = 0; i < count; ++i) alloc();
  }
  void alloc() {
    uint64_t p = 0;
    REQUIRE(pool->alloc(*cache, 60 * kMiB, &p) == AllocStatus::Ok);
    blocks.push_back(p);
  }
  ~GrownPool() {
    for (uint64_t p : blocks)
      if (Span* span = page_map->lookup(p)) pool->free(*cache, span, p);
    pool->detach_thread(cache);
    delete pool;
    page_map->destroy_leaves_for_tests();
    delete page_map;
  }
};

}  // namespace

// No read before the sleep: a reader that met the busy lock used to repeat
// what the last read under it saw, which was nothing (0 reserved bytes, 0
// growths), and the next read after the wake jumped back.
TEST_CASE("figures first read during a sleep: the last step's, not zeros", "[sleep][stats]") {
  GrownPool grown(6);
  Reading during;
  bool tapped = false;
  grown.provider.tap = [&] {
    during = read_from_another_thread(*grown.pool);
    tapped = true;
  };
  REQUIRE(grown.pool->sleep(0) == SleepStatus::Ok);
  REQUIRE(tapped);
  REQUIRE(grown.pool->wake() == SleepStatus::Ok);
  const PoolStats after = grown.pool->stats();
  CHECK(during.asleep);
  CHECK(after.reserved_bytes > 0);
  CHECK(during.stats.reserved_bytes == after.reserved_bytes);
  CHECK(during.stats.growths >= 6);
  CHECK(during.stats.growths <= after.growths);
  CHECK(during.stats.mapped_bytes >= 6 * 60 * kMiB);
}

// A growth holds the device lock across the provider's calls: a read then
// shows every earlier growth.
TEST_CASE("figures read during a growth show the growths before it", "[stats]") {
  GrownPool grown(6);
  Reading during;
  bool tapped = false;
  grown.provider.tap = [&] {
    during = read_from_another_thread(*grown.pool);
    tapped = true;
  };
  grown.alloc();
  REQUIRE(tapped);
  const PoolStats after = grown.pool->stats();
  CHECK(during.stats.growths >= 6);
  CHECK(during.stats.growths < after.growths);
  CHECK(during.stats.reserved_bytes == after.reserved_bytes);
}
