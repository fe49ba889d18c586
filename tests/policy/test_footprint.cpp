// tests/policy/test_footprint.cpp: the footprint policy (policy/footprint.h)
// alone and through DevicePool::decay_step over a fake clock, and the
// limit as a cap on everything the pool holds (idle memory included).
#include <catch2/catch.hpp>

#include <vector>

#include "harness.h"
#include "policy/footprint.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;
using Op = FakeProvider::Op;

namespace {
constexpr uint64_t kSecond = 1000ull * 1000 * 1000;
constexpr uint64_t kMs = 1000ull * 1000;
}  // namespace

TEST_CASE("footprint: idle memory is released only after a whole window", "[footprint]") {
  Footprint f(4 * kSecond, 0);
  uint64_t now = FakeClock::kStartNs;
  CHECK(f.step(now, 1 * kGiB, false) == 0);
  now += 2 * kSecond;
  CHECK(f.step(now, 1 * kGiB, false) == 0);  // half a window watched
  now += 2 * kSecond + kMs;
  CHECK(f.step(now, 1 * kGiB, false) == 1 * kGiB);
  f.note_released(1 * kGiB);
  CHECK(f.step(now + kMs, 0, false) == 0);
}

TEST_CASE("footprint: a dip of idle memory inside the window protects it", "[footprint]") {
  Footprint f(4 * kSecond, 0);
  uint64_t now = FakeClock::kStartNs;
  // A loop that uses 768 MiB of 1 GiB for a moment every second.
  for (int i = 0; i < 40; ++i) {
    const uint64_t idle = i % 8 == 0 ? 256 * kMiB : 1 * kGiB;
    const uint64_t r = f.step(now, idle, false);
    if (i >= 33) CHECK(r <= 256 * kMiB);  // only the part never used
    if (r) f.note_released(r);
    now += 125 * kMs;
  }
  // A growth counts as no idle memory at all for its slice.
  Footprint g(1 * kSecond, 0);
  now = FakeClock::kStartNs;
  g.step(now, 1 * kGiB, false);
  g.step(now + 500 * kMs, 1 * kGiB, true);
  CHECK(g.step(now + 1100 * kMs, 1 * kGiB, false) == 0);
  CHECK(g.step(now + 2100 * kMs, 1 * kGiB, false) == 1 * kGiB);
}

TEST_CASE("footprint: the floor, zero delay and off", "[footprint]") {
  Footprint floor(1 * kSecond, 300 * kMiB);
  uint64_t now = FakeClock::kStartNs;
  floor.step(now, 1 * kGiB, false);
  CHECK(floor.step(now + 2 * kSecond, 1 * kGiB, false) == 1 * kGiB - 300 * kMiB);
  CHECK(floor.step(now + 3 * kSecond, 200 * kMiB, false) == 0);  // at or below the floor: kept
  Footprint now_(0, 0);
  CHECK(now_.step(now, 64 * kMiB, false) == 64 * kMiB);
  Footprint off(kNoReleaseDelay, 0);
  CHECK(off.step(now, 64 * kGiB, false) == 0);
  CHECK(off.step(now + 1000 * kSecond, 64 * kGiB, false) == 0);
  CHECK(Footprint(5 * kSecond, 0).step_interval_ns() >= kFootprintMinStepNs);
  CHECK(Footprint(5 * kSecond, 0).step_interval_ns() <= kFootprintMaxStepNs);
}

namespace {
PoolConfig decay_config(uint64_t delay_ns, uint64_t threshold = kUnlimited) {
  PoolConfig c = config_with(64 * kMiB, 0, threshold);
  c.release_delay_ns = delay_ns;
  return c;
}

// Steps the pool's decay for `ns` of fake time at its own interval.
uint64_t run_decay(PoolUnderTest& t, uint64_t ns) {
  uint64_t released = 0;
  const uint64_t interval = t.pool.footprint_interval_ns();
  for (uint64_t passed = 0; passed < ns; passed += interval) {
    t.clock.advance_ns(interval);
    released += t.pool.decay_step();
  }
  return released;
}
}  // namespace

TEST_CASE("decay: idle memory goes back after release_delay, the working set stays", "[footprint][decay]") {
  PoolUnderTest t(4 * kGiB, FakeProvider::Backing::Host, decay_config(2 * kSecond));
  Attached cache(t.pool);
  std::vector<uint64_t> big, small;
  // A peak of 1 GiB, then a working set of 128 MiB in use and reused.
  for (int i = 0; i < 16; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 64 * kMiB, &p) == AllocStatus::Ok);
    big.push_back(p);
  }
  for (uint64_t p : big) REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  big.clear();
  const uint64_t peak_mapped = t.pool.stats().mapped_bytes;
  CHECK(peak_mapped >= 1 * kGiB);
  // Before the delay: nothing goes.
  CHECK(run_decay(t, 1 * kSecond) == 0);
  CHECK(t.provider.used_bytes() == peak_mapped);
  // A loop keeps 128 MiB busy for a moment in every slice of the window.
  uint64_t released = 0;
  for (int step = 0; step < 64; ++step) {
    uint64_t a = 0, b = 0;
    REQUIRE(t.alloc(*cache, 64 * kMiB, &a) == AllocStatus::Ok);
    REQUIRE(t.alloc(*cache, 64 * kMiB, &b) == AllocStatus::Ok);
    fill(a, 64 * kMiB, 1);
    fill(b, 64 * kMiB, 2);
    released += run_decay(t, 50 * kMs);  // sampled while in use
    CHECK(check(a, 64 * kMiB, 1));
    CHECK(check(b, 64 * kMiB, 2));
    REQUIRE(t.free(*cache, a) == FreeStatus::Ok);
    REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
    released += run_decay(t, 50 * kMs);
  }
  CHECK(released > 0);
  const PoolStats s = t.pool.stats();
  CHECK(s.mapped_bytes <= 256 * kMiB);  // the working set and at most a chunk of slack
  CHECK(s.mapped_bytes >= 128 * kMiB);
  CHECK(s.releases > 0);
  CHECK(t.provider.used_bytes() == s.mapped_bytes);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("decay: release_threshold is a floor, release_delay off keeps everything", "[footprint][decay]") {
  {
    PoolUnderTest t(4 * kGiB, FakeProvider::Backing::None, decay_config(1 * kSecond, 512 * kMiB));
    Attached cache(t.pool);
    std::vector<uint64_t> blocks;
    REQUIRE(alloc_blocks(t, *cache, 16, 64 * kMiB, &blocks));
    for (uint64_t p : blocks) REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    run_decay(t, 5 * kSecond);
    const PoolStats s = t.pool.stats();
    CHECK(s.idle_bytes >= 512 * kMiB);
    CHECK(s.idle_bytes < 512 * kMiB + 64 * kMiB);
  }
  {
    PoolUnderTest t(4 * kGiB, FakeProvider::Backing::None, decay_config(kNoReleaseDelay));
    Attached cache(t.pool);
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 512 * kMiB, &p) == AllocStatus::Ok);
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    const uint64_t before = t.provider.used_bytes();
    CHECK(run_decay(t, 60 * kSecond) == 0);
    CHECK(t.provider.used_bytes() == before);
  }
}

TEST_CASE("decay: a failing release leaves the pool usable", "[footprint][decay][faults]") {
  PoolUnderTest t(4 * kGiB, FakeProvider::Backing::Host, decay_config(0));
  Attached cache(t.pool);
  uint64_t p = 0;
  REQUIRE(t.alloc(*cache, 256 * kMiB, &p) == AllocStatus::Ok);
  REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  t.provider.fail(Op::Unmap, 0, ProviderStatus::Failed, true);
  run_decay(t, 1 * kSecond);
  t.provider.clear_faults();
  CHECK(t.pool.check().empty());
  REQUIRE(t.alloc(*cache, 256 * kMiB, &p) == AllocStatus::Ok);
  fill(p, 256 * kMiB, 7);
  CHECK(check(p, 256 * kMiB, 7));
  REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("limit: what the pool holds, idle included, never passes it", "[release][limit]") {
  // Mixed sizes freed and re-allocated, so idle memory (cached, quarantined,
  // free runs, stitches) is always there: mapped stays within the limit.
  PoolUnderTest t(8 * kGiB, FakeProvider::Backing::None, config_with(64 * kMiB, 600 * kMiB));
  Attached cache(t.pool);
  std::vector<uint64_t> live;
  uint64_t seed = 12345;
  for (int i = 0; i < 3000; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t sizes[] = {3 * kMiB, 17 * kMiB, 40 * kMiB, 100 * kMiB, 4096, 200 * kKiB};
    const uint64_t bytes = sizes[(seed >> 33) % 6];
    if (!live.empty() && ((seed >> 20) & 1)) {
      const size_t k = (seed >> 40) % live.size();
      REQUIRE(t.free(*cache, live[k]) == FreeStatus::Ok);
      live[k] = live.back();
      live.pop_back();
    } else {
      uint64_t p = 0;
      const AllocStatus s = t.alloc(*cache, bytes, &p);
      CHECK(s != AllocStatus::Forward);  // with a limit the pool answers
      if (s == AllocStatus::Ok) live.push_back(p);
    }
    REQUIRE(t.provider.used_bytes() <= 600 * kMiB);
    REQUIRE(t.pool.stats().mapped_bytes <= 600 * kMiB);
  }
  for (uint64_t p : live) REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  CHECK(t.pool.check().empty());
}
