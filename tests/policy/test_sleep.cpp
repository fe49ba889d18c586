// tests/policy/test_sleep.cpp: DevicePool::sleep/wake on the host-backed
// fake: contents kept (or not) at the same addresses, stitches and small
// blocks included; allocation while asleep (fail and wait); 50
// cycles without leaks; faults in every provider call of sleep and wake.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;
using Op = FakeProvider::Op;

namespace {

// Large blocks, small blocks and a stitch, all filled.
std::vector<Live> populate(PoolUnderTest& t, ThreadCache& cache, uint64_t unit = 20 * kMiB) {
  std::vector<Live> live;
  std::vector<uint64_t> holes;
  uint64_t seed = 1;
  auto take = [&](uint64_t bytes) {
    uint64_t p = 0;
    REQUIRE(t.alloc(cache, bytes, &p) == AllocStatus::Ok);
    fill(p, bytes, ++seed);
    live.push_back({p, bytes, seed});
    return p;
  };
  for (int i = 0; i < 6; ++i) holes.push_back(take(unit));
  for (int i = 0; i < 50; ++i) take(1000 + 37 * i);
  take(3 * kMiB);
  // Free every other 20 MiB block: a 60 MiB request then needs a stitch
  // (or growth); either way the contents must survive.
  for (size_t i = 0; i < live.size();) {
    if (live[i].bytes == unit && (live[i].seed % 2) == 0) {
      REQUIRE(t.free(cache, live[i].addr) == FreeStatus::Ok);
      live.erase(live.begin() + long(i));
    } else {
      ++i;
    }
  }
  take(3 * unit);
  return live;
}

PoolConfig small_chunks() { return config_with(64 * kMiB); }

}  // namespace

TEST_CASE("sleep with keep: every byte back at the same address after wake", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  REQUIRE(all_intact(live));
  const uint64_t held = t.provider.used_bytes();
  REQUIRE(held > 0);
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  CHECK(t.pool.asleep());
  CHECK(t.provider.used_bytes() == 0);  // every chunk released
  CHECK(t.provider.live_chunks() == 0);
  CHECK(t.provider.live_maps() == 0);
  CHECK(t.pool.stats().mapped_bytes == 0);
  CHECK(t.pool.kept_bytes() > 0);
  // Addresses stay the pool's: a free while asleep is served.
  RangeInfo info{};
  CHECK(t.range(live[0].addr, &info));
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK_FALSE(t.pool.asleep());
  CHECK(all_intact(live));
  CHECK(t.pool.kept_bytes() == 0);
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
  // The pool goes on as before.
  for (const Live& l : live) REQUIRE(t.free(*cache, l.addr) == FreeStatus::Ok);
  uint64_t p = 0;
  REQUIRE(t.alloc(*cache, 100 * kMiB, &p) == AllocStatus::Ok);
  fill(p, 100 * kMiB, 99);
  CHECK(check(p, 100 * kMiB, 99));
}

TEST_CASE("sleep without keep: memory released, addresses valid, nothing copied", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  REQUIRE(t.pool.sleep(0) == SleepStatus::Ok);
  CHECK(t.provider.used_bytes() == 0);
  CHECK(t.provider.calls(Op::HostAlloc) == 0);
  CHECK(t.provider.calls(Op::Copy) == 0);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  // Fresh memory at the same addresses: writable, readable, the pool's.
  for (const Live& l : live) {
    fill(l.addr, l.bytes, l.seed + 100);
    CHECK(check(l.addr, l.bytes, l.seed + 100));
    REQUIRE(t.free(*cache, l.addr) == FreeStatus::Ok);
  }
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep: allocations fail (kSleepFail) or wait, frees are served", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  std::vector<uint64_t> warm;
  for (int i = 0; i < 8; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, i % 2 ? 4096 : 8 * kMiB, &p) == AllocStatus::Ok);
    warm.push_back(p);
  }
  // Cached blocks exist for both sizes (freed and retired).
  REQUIRE(t.free(*cache, warm[0]) == FreeStatus::Ok);
  REQUIRE(t.free(*cache, warm[1]) == FreeStatus::Ok);
  REQUIRE(t.pool.sleep(kSleepFail) == SleepStatus::Ok);
  uint64_t p = 0;
  CHECK(t.alloc(*cache, 4096, &p) == AllocStatus::OutOfMemory);
  CHECK(t.alloc(*cache, 8 * kMiB, &p) == AllocStatus::OutOfMemory);
  CHECK(t.alloc(*cache, 1 * kGiB, &p) == AllocStatus::OutOfMemory);
  CHECK(t.provider.calls(Op::Create) == t.provider.calls(Op::Create));  // no growth while asleep
  CHECK(t.provider.used_bytes() == 0);
  CHECK(t.free(*cache, warm[2]) == FreeStatus::Ok);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  REQUIRE(t.alloc(*cache, 4096, &p) == AllocStatus::Ok);

  // Default: an allocation waits for wake, on another thread.
  REQUIRE(t.pool.sleep(0) == SleepStatus::Ok);
  std::atomic<int> done{0};
  uint64_t got = 0;
  std::thread waiter([&] {
    Attached other(t.pool);
    uint64_t q = 0;
    if (t.alloc(*other, 8 * kMiB, &q) == AllocStatus::Ok) got = q;
    done = 1;
    if (got) t.free(*other, got);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(done.load() == 0);  // still waiting
  CHECK(t.provider.used_bytes() == 0);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  waiter.join();
  CHECK(done.load() == 1);
  CHECK(got != 0);
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep: refused while a capture forbids the sync, nothing changes", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  const uint64_t held = t.provider.used_bytes();
  t.provider.set_sync_allowed(false);
  CHECK(t.pool.sleep(kSleepKeep) == SleepStatus::Busy);
  CHECK_FALSE(t.pool.asleep());
  CHECK(t.provider.used_bytes() == held);
  uint64_t p = 0;
  CHECK(t.alloc(*cache, 4096, &p) == AllocStatus::Ok);
  CHECK(all_intact(live));
}

TEST_CASE("sleep: many cycles leak nothing", "[sleep]") {
  // 50 here (each pays the fake's page faults); the fake-driver case
  // (pool sleep) runs 1000.
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
  Attached cache(t.pool);
  std::vector<Live> live;
  for (int i = 0; i < 4; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 3 * kMiB + uint64_t(i) * 4096, &p) == AllocStatus::Ok);
    live.push_back({p, 3 * kMiB + uint64_t(i) * 4096, uint64_t(i) + 7});
  }
  uint64_t small = 0;
  REQUIRE(t.alloc(*cache, 700, &small) == AllocStatus::Ok);
  live.push_back({small, 700, 3});
  for (const Live& l : live) fill(l.addr, l.bytes, l.seed);
  const uint64_t chunks = t.provider.live_chunks();
  for (int cycle = 0; cycle < 50; ++cycle) {
    REQUIRE(t.pool.sleep(cycle % 2 ? kSleepKeep : kSleepKeep | kSleepFail) == SleepStatus::Ok);
    REQUIRE(t.provider.live_chunks() == 0);
    REQUIRE(t.pool.wake() == SleepStatus::Ok);
    // A free and an allocation in between, as a program would.
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 1 * kMiB, &p) == AllocStatus::Ok);
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  }
  CHECK(all_intact(live));
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.provider.live_chunks() <= chunks + 1);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep and wake under injected faults: usable, nothing lost", "[sleep][faults]") {
  const Op ops[] = {Op::HostAlloc, Op::Copy, Op::Unmap, Op::Release, Op::Create, Op::Map, Op::SetAccess};
  for (Op op : ops) {
    for (int phase = 0; phase < 2; ++phase) {      // 0: during sleep, 1: during wake
      for (uint64_t nth = 0; nth < 2; ++nth) {
        for (int persistent = 0; persistent < 2; ++persistent) {
          CAPTURE(int(op), phase, nth, persistent);
          // Small chunks and blocks: many chunks, little to copy.
          PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
          Attached cache(t.pool);
          const std::vector<Live> live = populate(t, *cache, 4 * kMiB);
          if (phase == 0) t.provider.fail(op, nth, ProviderStatus::Failed, persistent);
          const SleepStatus slept = t.pool.sleep(kSleepKeep);
          REQUIRE((slept == SleepStatus::Ok || slept == SleepStatus::Partial));
          if (phase == 1) t.provider.fail(op, nth, ProviderStatus::Failed, persistent);
          SleepStatus woke = t.pool.wake();
          for (int retry = 0; woke != SleepStatus::Ok && retry < 3; ++retry) woke = t.pool.wake();
          t.provider.clear_faults();
          for (int retry = 0; woke != SleepStatus::Ok && retry < 3; ++retry) woke = t.pool.wake();
          REQUIRE(woke == SleepStatus::Ok);
          CHECK(all_intact(live));
          CHECK(t.pool.check().empty());
          CHECK(t.provider.live_host_buffers() == 0);
          // Usable: free all, allocate again, data right.
          for (const Live& l : live) REQUIRE(t.free(*cache, l.addr) == FreeStatus::Ok);
          uint64_t p = 0;
          REQUIRE(t.alloc(*cache, 20 * kMiB, &p) == AllocStatus::Ok);
          fill(p, 20 * kMiB, 5);
          CHECK(check(p, 20 * kMiB, 5));
          CHECK(t.provider.violations() == 0);
          INFO(t.provider.violation_log());
        }
      }
    }
  }
}
