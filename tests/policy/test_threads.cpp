// tests/policy/test_threads.cpp: blocks freed on another thread than the
// one that allocated them, the flush of a thread's cache when it detaches
// (thread exit), and memory held by an idle thread's cache taken back when
// another thread runs out.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

TEST_CASE("blocks allocated on one thread and freed on another", "[threads]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(32 * kMiB));
  struct Item {
    uint64_t addr, bytes, seed;
  };
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Item> queue;
  bool done = false;
  std::atomic<int> bad{0};
  constexpr int kItems = 20000;

  std::thread consumer([&] {
    Attached cache(t.pool);
    while (true) {
      std::unique_lock<std::mutex> lock(mutex);
      ready.wait(lock, [&] { return !queue.empty() || done; });
      if (queue.empty()) return;
      Item item = queue.front();
      queue.pop_front();
      lock.unlock();
      if (!check(item.addr, item.bytes, item.seed)) ++bad;
      if (t.free(*cache, item.addr) != FreeStatus::Ok) ++bad;
    }
  });
  {
    Attached cache(t.pool);
    std::mt19937_64 rng(5);
    for (int i = 0; i < kItems; ++i) {
      const uint64_t bytes = (i % 50 == 0) ? 1 + rng() % (6 * kMiB) : 1 + rng() % 20000;
      uint64_t p = 0;
      REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
      t.provider.assert_idle(p, bytes);
      fill(p, bytes, uint64_t(i));
      t.provider.launch(p, bytes);
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back({p, bytes, uint64_t(i)});
      ready.notify_one();
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      ready.notify_one();
    }
    consumer.join();
  }
  CHECK(bad == 0);
  CHECK(t.pool.stats().in_use_bytes == 0);
  CHECK(t.provider.violations() == 0);
  CHECK(t.pool.check() == "");
  t.pool.trim();
  CHECK(t.provider.used_bytes() == 0);
}

TEST_CASE("a detached thread's cache and quarantine are flushed", "[threads]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::None, config_with(32 * kMiB));
  std::thread worker([&] {
    Attached cache(t.pool);
    std::vector<uint64_t> blocks;
    for (int i = 0; i < 3000; ++i) {
      uint64_t p = 0;
      REQUIRE(t.alloc(*cache, 100 + (i % 7) * 1000, &p) == AllocStatus::Ok);
      blocks.push_back(p);
      if (blocks.size() > 100) {
        REQUIRE(t.free(*cache, blocks.front()) == FreeStatus::Ok);
        blocks.erase(blocks.begin());
      }
    }
    for (uint64_t p : blocks) REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    CHECK(t.pool.stats().cached_bytes > 0);
  });
  worker.join();
  const PoolStats s = t.pool.stats();
  CHECK(s.cached_bytes == 0);
  CHECK(s.in_use_bytes == 0);
  CHECK(s.hits > 0);  // the detached thread's counts are kept
  t.pool.trim();
  CHECK(t.provider.used_bytes() == 0);
}

TEST_CASE("an idle thread's cached memory is taken back under pressure", "[threads][oom]") {
  PoolUnderTest t(128 * kMiB, FakeProvider::Backing::None, config_with(32 * kMiB));
  std::mutex mutex;
  std::condition_variable cv;
  bool filled = false, release = false;
  std::thread idle([&] {
    Attached cache(t.pool);
    std::vector<uint64_t> blocks;
    for (int i = 0; i < 8; ++i) {
      uint64_t p = 0;
      REQUIRE(t.alloc(*cache, 24 * kMiB, &p) == AllocStatus::Ok);
      blocks.push_back(p);
      if (blocks.size() == 4) break;
    }
    for (uint64_t p : blocks) REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    uint64_t p = 0;  // a miss retires the quarantine into this thread's cache
    REQUIRE(t.alloc(*cache, 24 * kMiB, &p) == AllocStatus::Ok);
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    std::unique_lock<std::mutex> lock(mutex);
    filled = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return filled; });
  }
  {
    Attached cache(t.pool);
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 120 * kMiB, &p) == AllocStatus::Ok);
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
    cv.notify_all();
  }
  idle.join();
  CHECK(t.provider.violations() == 0);
  CHECK(t.pool.check() == "");
}

TEST_CASE("a give-back on another thread never leaves an allocation short of idle memory", "[threads][oom]") {
  // The trim thread gives idle memory back (the headroom, the decay) while
  // the program runs out. A reclaim beside another once found nothing: the
  // other had taken the retired blocks and empty slabs and not yet put them
  // back, so the allocation went to the driver with that memory still idle
  // in the pool (a fill got about half the blocks it gets alone).
  constexpr uint64_t kCapacity = 512 * kMiB;
  constexpr uint64_t kSmall = 1000;
  PoolUnderTest t(kCapacity, FakeProvider::Backing::None, config_with(64 * kMiB));
  std::mutex mutex;
  std::condition_variable cv;
  int requested = 0;
  bool quit = false;
  std::atomic<int> started{0};
  std::thread trimmer([&] {
    for (int done = 0;; ++done) {
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [&] { return quit || requested > done; });
      if (quit) return;
      lock.unlock();
      started.fetch_add(1);
      t.pool.release(kAllIdle);
    }
  });
  Attached cache(t.pool);
  std::string short_rounds;
  for (int round = 0; round < 40; ++round) {
    // Small blocks for a quarter of the device, granule blocks for the
    // rest; then the small ones are freed: they wait in the quarantine and
    // in slabs, and the device is full.
    std::vector<uint64_t> small, large, refill;
    uint64_t p = 0;
    while (small.size() < kCapacity / 4 / 1024 && t.alloc(*cache, kSmall, &p) == AllocStatus::Ok) small.push_back(p);
    while (t.alloc(*cache, kGranuleBytes, &p) == AllocStatus::Ok) large.push_back(p);
    for (uint64_t b : small) REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
    // The give-back starts; granule blocks until out of memory: every
    // granule not held by a live block is reachable.
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++requested;
    }
    cv.notify_all();
    while (started.load() < round + 1) std::this_thread::yield();
    while (t.alloc(*cache, kGranuleBytes, &p) == AllocStatus::Ok) refill.push_back(p);
    const uint64_t expected = kCapacity / kGranuleBytes - large.size();
    if (refill.size() != expected)
      short_rounds += std::to_string(refill.size()) + " of " + std::to_string(expected) + "; ";
    for (uint64_t b : large) REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
    for (uint64_t b : refill) REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    quit = true;
  }
  cv.notify_all();
  trimmer.join();
  INFO("rounds whose refill fell short: " << short_rounds);
  CHECK(short_rounds.empty());
  CHECK(t.provider.violations() == 0);
  CHECK(t.pool.check() == "");
}

TEST_CASE("hits and frees go on while other threads hold and drain their caches", "[threads]") {
  // The hit neither waits for a thread cache's lock nor calls anything: a
  // pop that finds the lock held (a drainer copying entries out) takes the
  // allocation's slow path, and a free that finds it held, with the block
  // already taken, pushes it through free_finish, waiting. Here one thread
  // holds the workers' cache locks, and now and then drains every cache
  // (release), while the workers allocate, check and free small blocks and
  // cached large ones: no block may be handed out twice, lost, or reused
  // before its sync.
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(32 * kMiB));
  constexpr int kWorkers = 2, kRounds = 10000, kLive = 8;
  std::atomic<ThreadCache*> caches[kWorkers] = {};
  std::atomic<int> running{kWorkers}, bad{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.emplace_back([&, w] {
      Attached cache(t.pool);
      caches[w].store(cache.cache);
      std::mt19937_64 rng(uint64_t(w) + 11);
      struct Live {
        uint64_t addr, bytes, seed;
      };
      std::deque<Live> live;
      auto release_oldest = [&] {
        const Live b = live.front();
        live.pop_front();
        if (!check(b.addr, b.bytes, b.seed)) ++bad;
        if (t.free(*cache, b.addr) != FreeStatus::Ok) ++bad;
      };
      for (int i = 0; i < kRounds; ++i) {
        const uint64_t bytes = i % 8 == 0 ? kGranuleBytes * (1 + rng() % 3) : 1 + rng() % 4096;
        const uint64_t seed = uint64_t(w) << 32 | uint64_t(i);
        uint64_t p = 0;
        if (t.alloc(*cache, bytes, &p) != AllocStatus::Ok) {
          ++bad;
          continue;
        }
        t.provider.assert_idle(p, bytes);
        fill(p, bytes, seed);
        t.provider.launch(p, bytes);
        live.push_back({p, bytes, seed});
        if (live.size() > size_t(kLive)) release_oldest();
      }
      while (!live.empty()) release_oldest();
      running.fetch_sub(1);
    });
  std::thread holder([&] {
    for (int n = 0; running.load() > 0; ++n) {
      for (std::atomic<ThreadCache*>& c : caches) {
        ThreadCache* cache = c.load();
        if (!cache) continue;
        cache->lock.lock();
        for (int spin = 0; spin < 200; ++spin) cpu_relax();
        cache->lock.unlock();
      }
      if (n % 64 == 0) t.pool.release(kAllIdle);
      std::this_thread::yield();
    }
  });
  for (std::thread& w : workers) w.join();
  holder.join();
  CHECK(bad == 0);
  CHECK(t.provider.violations() == 0);
  const PoolStats s = t.pool.stats();
  CHECK(s.in_use_bytes == 0);
  CHECK(s.hits > 0);
  CHECK(t.pool.check() == "");
  t.pool.trim();
  CHECK(t.provider.used_bytes() == 0);
}
