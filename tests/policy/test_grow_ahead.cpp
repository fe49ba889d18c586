// tests/policy/test_grow_ahead.cpp: growth ahead (policy/grow_ahead.h,
// docs/POOL.md "Growth ahead"): the rule alone; a growing program (the
// seed loop's shape: PyTorch's caching allocator asking for 20 MiB
// segments) whose allocations no longer wait for a driver map, with the
// pool holding no more than 10% over its peak; and the step on a thread
// of its own beside the program's allocations and frees.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "harness.h"
#include "policy/grow_ahead.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

// The pool's ask (DevicePool::set_grow_ahead takes a plain function).
std::atomic<int> g_asks{0};
std::mutex g_ask_mutex;
std::condition_variable g_ask_cv;
void ask() {
  {
    std::lock_guard<std::mutex> lock(g_ask_mutex);
    g_asks.fetch_add(1);
  }
  g_ask_cv.notify_one();
}

PoolConfig ahead_config(int percent) {
  PoolConfig c;
  c.grow_ahead = percent;
  c.release_delay_ns = ~uint64_t(0);  // decay is another test's subject
  return c;
}

constexpr uint64_t kSegment = 20 * kMiB;  // PyTorch's segment for 1..10 MiB tensors

// The seed loop's first pass: `segments` allocations of 20 MiB, nothing
// freed. With `service`, every asked step is made before the next call (a
// service thread that keeps up). Returns the growths made on the calling
// thread (the allocations that waited for a driver map).
uint64_t seed_pass(PoolUnderTest& t, int segments, bool service, std::vector<uint64_t>* live) {
  Attached cache(t.pool);
  g_asks.store(0);
  for (int i = 0; i < segments; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, kSegment, &p) == AllocStatus::Ok);
    live->push_back(p);
    if (service && t.pool.ahead_asked()) t.pool.grow_ahead();
  }
  const PoolStats s = t.pool.stats();
  return s.growths - s.ahead_growths;
}

}  // namespace

TEST_CASE("grow ahead: the rule", "[grow_ahead]") {
  const Granules chunk = granules_floor(256 * kMiB);
  // The ceiling: 10% over the peak; none with nothing in use or when off.
  CHECK(grow_ahead_ceiling(1000 * kMiB, 10, kNoLimit) == 1100 * kMiB);
  CHECK(grow_ahead_ceiling(0, 10, kNoLimit) == 0);
  CHECK(grow_ahead_ceiling(1000 * kMiB, 0, kNoLimit) == 0);
  // A peak within the idle bound is not taken over it; one beyond it is
  // given its 10%.
  CHECK(grow_ahead_ceiling(3000 * kMiB, 10, 3200 * kMiB) == 3200 * kMiB);
  CHECK(grow_ahead_ceiling(4000 * kMiB, 10, 3200 * kMiB) == 4400 * kMiB);
  // No step at or over the ceiling.
  CHECK(grow_ahead_step(1100 * kMiB, 1100 * kMiB, 0, chunk, Granules(1)).count() == 0);
  CHECK(grow_ahead_step(0, 0, 0, chunk, Granules(1)).count() == 0);
  // What the ceiling leaves: 1100 MiB over 900 MiB held is 200 MiB ...
  CHECK(grow_ahead_step(1100 * kMiB, 900 * kMiB, 0, chunk, Granules(1)).bytes() == 200 * kMiB);
  // ... at most a chunk ...
  CHECK(grow_ahead_step(4400 * kMiB, 4000 * kMiB, 0, chunk, Granules(1)) == chunk);
  // ... none while at least that much is free ...
  CHECK(grow_ahead_step(1100 * kMiB, 900 * kMiB, 200 * kMiB, chunk, Granules(1)).count() == 0);
  CHECK(grow_ahead_step(1100 * kMiB, 900 * kMiB, 198 * kMiB, chunk, Granules(1)).bytes() == 200 * kMiB);
  // ... and none smaller than kMinAheadGranules (16 MiB).
  CHECK(grow_ahead_step(154 * kMiB, 140 * kMiB, 0, chunk, Granules(1)).count() == 0);
  CHECK(grow_ahead_step(156 * kMiB, 140 * kMiB, 0, chunk, Granules(1)) == kMinAheadGranules);
  // A step that could not hold the last request with what is free: none.
  CHECK(grow_ahead_step(1100 * kMiB, 900 * kMiB, 50 * kMiB, chunk, granules_floor(256 * kMiB)).count() == 0);
  CHECK(grow_ahead_step(1100 * kMiB, 900 * kMiB, 56 * kMiB, chunk, granules_floor(256 * kMiB)).bytes() == 200 * kMiB);
}

TEST_CASE("grow ahead: a growing program's allocations stop waiting for the driver's map", "[grow_ahead][pool]") {
  constexpr int kSegments = 200;  // 4000 MiB, as the seed loop's 1000 tensors of 4 MiB
  uint64_t waited[2] = {}, held[2] = {}, ahead[2] = {}, peak = 0;
  for (const int percent : {0, 10}) {
    PoolUnderTest t(80 * kGiB, FakeProvider::Backing::None, ahead_config(percent));
    t.pool.set_grow_ahead(&ask);
    std::vector<uint64_t> live;
    const int i = percent ? 1 : 0;
    waited[i] = seed_pass(t, kSegments, true, &live);
    const PoolStats s = t.pool.stats();
    held[i] = s.mapped_bytes;
    ahead[i] = s.ahead_growths;
    peak = s.peak_in_use_bytes;
    CHECK(t.pool.check() == "");
    CHECK(t.provider.violations() == 0);
  }
  INFO("peak " << peak / kMiB << " MiB; without: " << waited[0] << " growths on the program's thread, held "
               << held[0] / kMiB << " MiB; with: " << waited[1] << " (" << ahead[1] << " ahead), held "
               << held[1] / kMiB << " MiB");
  CHECK(peak == kSegments * kSegment);
  CHECK(ahead[0] == 0);
  CHECK(waited[0] == 16);  // a 256 MiB chunk every 12.8 segments
  // With growth ahead, only the first chunks (before 10% of what is in use
  // makes a step worth its access call) are grown on the program's thread.
  CHECK(waited[1] <= 2);
  CHECK(ahead[1] > 0);
  // What the pool holds after the pass: at most 10% over the peak.
  CHECK(held[1] * 10 <= peak * 11);
}

TEST_CASE("grow ahead: not under a limit, nor without a service thread", "[grow_ahead][pool]") {
  PoolConfig limited = ahead_config(10);
  limited.limit_bytes = 8 * kGiB;
  PoolUnderTest t(80 * kGiB, FakeProvider::Backing::None, limited);
  t.pool.set_grow_ahead(&ask);
  std::vector<uint64_t> live;
  const uint64_t waited = seed_pass(t, 100, true, &live);
  CHECK(waited == t.pool.stats().growths);
  CHECK(t.pool.stats().ahead_growths == 0);
  CHECK(g_asks.load() == 0);
  PoolUnderTest alone(80 * kGiB, FakeProvider::Backing::None, ahead_config(10));
  std::vector<uint64_t> more;
  const uint64_t waited_alone = seed_pass(alone, 100, false, &more);
  CHECK(waited_alone == alone.pool.stats().growths);
  CHECK_FALSE(alone.pool.ahead_asked());
}

TEST_CASE("grow ahead: the step on its own thread beside allocations, frees and trims", "[grow_ahead][pool][threads]") {
  // Host-backed: every block is written and checked; the service thread
  // makes each asked step while the program's thread allocates (its
  // memory growing round by round), frees and trims (releases whole free
  // chunks). 32 MiB chunks, so that growth comes often.
  PoolConfig config = ahead_config(10);
  config.chunk_bytes = 32 * kMiB;
  PoolUnderTest t(4 * kGiB, FakeProvider::Backing::Host, config, 4 * kGiB);
  t.pool.set_grow_ahead(&ask);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> steps{0};
  std::thread service([&] {
    int seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(g_ask_mutex);
        g_ask_cv.wait(lock, [&] { return g_asks.load() != seen || stop.load(); });
        seen = g_asks.load();
      }
      if (stop.load()) return;
      if (t.pool.grow_ahead()) steps.fetch_add(1);
    }
  });
  {
    Attached cache(t.pool);
    std::vector<Live> live;
    uint64_t seed = 1;
    for (int round = 0; round < 30; ++round) {
      for (int i = 0; i < 40; ++i) {
        const uint64_t bytes = (i % 3 == 0) ? 3 * kMiB : (i % 3 == 1) ? 1 * kMiB : 64 * 1024;
        uint64_t p = 0;
        REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
        fill(p, bytes, seed);
        live.push_back(Live{p, bytes, seed++});
      }
      if (round % 5 != 4) continue;
      REQUIRE(all_intact(live));
      // Half freed, then a trim: chunks are released while the service
      // thread may be growing the next one.
      const size_t keep = live.size() / 2;
      for (size_t k = keep; k < live.size(); ++k) REQUIRE(t.free(*cache, live[k].addr) == FreeStatus::Ok);
      live.resize(keep);
      t.pool.trim();
      REQUIRE(t.pool.check() == "");
    }
    for (const Live& l : live) REQUIRE(t.free(*cache, l.addr) == FreeStatus::Ok);
  }
  {
    std::lock_guard<std::mutex> lock(g_ask_mutex);
    stop.store(true);
  }
  g_ask_cv.notify_one();
  service.join();
  INFO("steps ahead " << steps.load());
  CHECK(steps.load() > 0);
  CHECK(t.provider.violations() == 0);
  CHECK(t.pool.check() == "");
}

TEST_CASE("grow ahead: a refused create, map or access leaves nothing behind", "[grow_ahead][pool]") {
  using Op = FakeProvider::Op;
  for (const Op op : {Op::Create, Op::Map, Op::SetAccess}) {
    INFO("op " << int(op));
    PoolUnderTest t(80 * kGiB, FakeProvider::Backing::None, ahead_config(10));
    t.pool.set_grow_ahead(&ask);
    Attached cache(t.pool);
    std::vector<uint64_t> live;
    // Grow until a step is asked for, then refuse the step's call.
    for (int i = 0; i < 200 && !t.pool.ahead_asked(); ++i) {
      uint64_t p = 0;
      REQUIRE(t.alloc(*cache, kSegment, &p) == AllocStatus::Ok);
      live.push_back(p);
    }
    REQUIRE(t.pool.ahead_asked());
    const uint64_t used = t.provider.used_bytes(), chunks = t.provider.live_chunks(), maps = t.provider.live_maps();
    const PoolStats before = t.pool.stats();
    t.provider.fail(op, 0);
    CHECK_FALSE(t.pool.grow_ahead());
    CHECK_FALSE(t.pool.ahead_asked());
    CHECK(t.provider.used_bytes() == used);
    CHECK(t.provider.live_chunks() == chunks);
    CHECK(t.provider.live_maps() == maps);
    CHECK(t.pool.stats().mapped_bytes == before.mapped_bytes);
    CHECK(t.pool.check() == "");
    // The next ask's step goes through, at the addresses the failed one gave back.
    t.provider.clear_faults();
    for (int i = 0; i < 200 && !t.pool.ahead_asked(); ++i) {
      uint64_t p = 0;
      REQUIRE(t.alloc(*cache, kSegment, &p) == AllocStatus::Ok);
      live.push_back(p);
    }
    REQUIRE(t.pool.ahead_asked());
    CHECK(t.pool.grow_ahead());
    CHECK(t.pool.stats().ahead_growths == 1);
    CHECK(t.pool.check() == "");
    CHECK(t.provider.violations() == 0);
  }
}
