// tests/policy/own_vmm/test_growth_ahead.cpp: growth ahead
// (policy/own_vmm/growth_ahead.h) driven by the cache: on the caller,
// and on a worker (the case's own thread, or the test's between calls).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/policy/own_vmm/fakes.h"

using namespace own_vmm_test;

TEST_CASE("own vmm: two segments of the same properties growing in turns stop growth ahead after two misses") {
  FakeDriver fake;
  Cache cache(fake, 2, 1, 32);
  const uint64_t base[2] = {kBase, kBase + 1000 * kSeg};
  for (uint64_t b : base) cache.note_reserved(b, 100 * kSeg);
  Program p{fake, &cache};
  // cuMemCreate cannot tell which segment a page is for: the lowest page
  // made ahead (segment 0's) goes to segment 1's growth too.
  // Both segments grow a page each in turns (create, map at its end, open
  // it); the handles each got, in order.
  auto grow_in_turns = [&](std::vector<uint64_t>(&got)[2]) {
    for (int i = 0; i < 40; ++i)
      for (int s = 0; s < 2; ++s) {
        uint64_t h = 0;
        const uint64_t at = base[s] + uint64_t(i) * kSeg;
        REQUIRE(p.create(kSeg, kProp, &h) == kOk);
        REQUIRE(p.map(at, kSeg, 0, h) == kOk);
        REQUIRE(p.access(at, kSeg, kRW) == kOk);
        got[s].push_back(h);
      }
  };
  std::vector<uint64_t> hs[2];
  grow_in_turns(hs);
  // It stopped at the second miss: a batch or two made before it (taken,
  // and most of them misdirected too), none after.
  INFO("prefetched " << cache.stats().prefetched << ", misdirected " << cache.stats().ahead_misdirected);
  CHECK(cache.stats().ahead_misdirected >= 2);
  CHECK(cache.stats().prefetched <= 8);
  CHECK(cache.stats().ahead_misdirected <= cache.stats().prefetched);
  // Every page is the program's own handle where it asked, open.
  std::set<uint64_t> seen;
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 40; ++i) {
      const FakeMap& m = fake.maps[base[s] + uint64_t(i) * kSeg];
      CHECK(m.handle == hs[s][size_t(i)]);
      CHECK(m.access.at("r") == "w");
      seen.insert(hs[s][size_t(i)]);
    }
  CHECK(seen.size() == 80);
  // Both shrunk (one, then the other), then grown in turns again: each
  // released page goes back in the order the pages grew, so each segment
  // gets its own pages back and the driver sees no call.
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 40; ++i) {
      REQUIRE(p.unmap(base[s] + uint64_t(i) * kSeg, kSeg) == kOk);
      REQUIRE(p.release(hs[s][size_t(i)]) == kOk);
    }
  const int before = fake.total_calls();
  std::vector<uint64_t> again[2];
  grow_in_turns(again);
  CHECK(again[0] == hs[0]);
  CHECK(again[1] == hs[1]);
  CHECK(fake.total_calls() == before);
  // One segment alone: a new cache grows ahead as before.
  FakeDriver fake2;
  Cache one(fake2, 2, 1, 32);
  one.note_reserved(kBase, 100 * kSeg);
  Program p2{fake2, &one};
  std::vector<uint64_t> hs2;
  REQUIRE(grow_page_by_page(p2, 40, &hs2) == 40);
  CHECK(one.stats().ahead_misdirected == 0);
  CHECK(one.stats().prefetched >= 30);
}

TEST_CASE("own vmm: growth ahead opens a growing segment with one access call per doubling") {
  FakeDriver fake;
  Cache cache(fake, 2, 1, 32);
  cache.note_reserved(kBase, 100 * kSeg);
  Program p{fake, &cache};
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 64, &hs) == 64);
  // Pages 0, 1 (then 2 ahead), 3 (4 ahead), 8 (8), 17 (16), 34 (32), 67: 6 real calls, 6 prefetches.
  CHECK(fake.calls["set_access"] <= 12);
  CHECK(fake.calls["set_access"] >= 6);
  CHECK(cache.stats().prefetched > 0);
  // Each page the program holds is its own handle, mapped where it asked, open.
  for (int i = 0; i < 64; ++i) {
    const FakeMap& m = fake.maps[kBase + uint64_t(i) * kSeg];
    CHECK(m.handle == hs[size_t(i)]);
    CHECK(m.access.at("r") == "w");
  }
  // Handles differ (no page handed out twice).
  std::sort(hs.begin(), hs.end());
  CHECK(std::unique(hs.begin(), hs.end()) == hs.end());
  // Shrink all, grow again: no driver call.
  for (int i = 0; i < 64; ++i) {
    REQUIRE(p.unmap(kBase + uint64_t(i) * kSeg, kSeg) == kOk);
    REQUIRE(p.release(fake.maps[kBase + uint64_t(i) * kSeg].handle) == kOk);
  }
  const int before = fake.total_calls();
  REQUIRE(grow_page_by_page(p, 64, &hs) == 64);
  CHECK(fake.total_calls() == before);
  // Never past the reservation, and all of it given back by a trim.
  for (auto& [a, m] : fake.maps) CHECK(a + m.bytes <= kBase + 100 * kSeg);
  shrink_page_by_page(p, hs);
  cache.trim(0, UINT64_MAX);
  CHECK(fake.maps.empty());
  CHECK(fake.handles.empty());
}

TEST_CASE("own vmm: growth ahead stays within the cache's room and undoes a failed step") {
  FakeDriver fake;
  Cache cache(fake, 2, 1, 32);
  cache.note_reserved(kBase, 100 * kSeg);
  Program p{fake, &cache};
  std::vector<uint64_t> hs;
  FakeRoom three(3 * kSeg);
  cache.join(0, &three);
  REQUIRE(grow_page_by_page(p, 16, &hs) == 16);
  CHECK(cache.cached_bytes(0) <= 3 * kSeg);
  for (int i = 0; i < 16; ++i) CHECK(fake.maps[kBase + uint64_t(i) * kSeg].handle == hs[size_t(i)]);
  // A refused access call while growing ahead: the prefetch is undone.
  FakeDriver fake2;
  Cache cache2(fake2, 2, 1, 32);
  cache2.note_reserved(kBase, 100 * kSeg);
  Program p2{fake2, &cache2};
  uint64_t h = 0;
  REQUIRE(p2.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p2.map(kBase, kSeg, 0, h) == kOk);
  // The program's access call is the first set_access, the prefetch's the second.
  fake2.fail_op = "set_access";
  fake2.fail_skip = 1;
  REQUIRE(p2.access(kBase, kSeg, kRW) == kOk);
  CHECK(cache2.stats().prefetched == 0);
  CHECK(fake2.maps.size() == 1);
  CHECK(fake2.handles.size() == 1);
  CHECK(fake2.maps[kBase].access.at("r") == "w");
  FakeDriver fake3;
  Cache cache3(fake3, 2, 1, 32);
  cache3.note_reserved(kBase, 100 * kSeg);
  Program p3{fake3, &cache3};
  REQUIRE(p3.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p3.map(kBase, kSeg, 0, h) == kOk);
  fake3.fail_op = "map";  // the prefetch's second map
  fake3.fail_skip = 1;
  REQUIRE(p3.access(kBase, kSeg, kRW) == kOk);
  CHECK(cache3.stats().prefetched == 1);  // the first page made it; the second is undone
  CHECK(fake3.maps.size() == 2);
  CHECK(fake3.handles.size() == 2);
}

TEST_CASE_METHOD(WorkerCase<>,
                 "own vmm: growth ahead on a worker: the program's thread opens few pages, each page its own") {
  std::vector<uint64_t> hs(64);
  {
    Worker worker(cache);
    for (int i = 0; i < 64; ++i) REQUIRE(p.grow(kBase + uint64_t(i) * kSeg, &hs[size_t(i)]) == kOk);
    // Everything queued is made before the worker stops.
    while (cache.pending_pages() != 0) std::this_thread::yield();
  }
  INFO("program's calls: set_access " << driver.program_calls["set_access"] << ", create "
                                      << driver.program_calls["create"]);
  CHECK(driver.program_calls["set_access"] <= 4);
  CHECK(driver.program_calls["create"] <= 4);
  CHECK(cache.stats().prefetched >= 60);
  std::lock_guard<std::mutex> l(driver.mutex);
  for (int i = 0; i < 64; ++i) {
    const FakeMap& m = fake.maps[kBase + uint64_t(i) * kSeg];
    CHECK(m.handle == hs[size_t(i)]);
    CHECK(m.access.at("r") == "w");
  }
  std::sort(hs.begin(), hs.end());
  CHECK(std::unique(hs.begin(), hs.end()) == hs.end());
  for (auto& [a, m] : fake.maps) CHECK(a + m.bytes <= kBase + 100 * kSeg);
}

TEST_CASE_METHOD(WorkerCase<>,
                 "own vmm: a program's call over pages queued ahead cancels them; one in flight is waited for") {
  uint64_t h0 = 0;
  REQUIRE(p.grow(kBase, &h0) == kOk);
  CHECK(driver.woken == 1);
  CHECK(cache.pending_pages() == 2);
  // No worker ran: the program maps a handle of other properties over
  // the first queued page. The job stops; the driver gets the map.
  uint64_t other = 0;
  REQUIRE(driver.create(kSeg, "other", &other) == kOk);
  cache.note_created(other, kSeg, "other", 0);
  REQUIRE(cache.map(kBase + kSeg, kSeg, 0, other, 0) == kOk);
  CHECK(cache.pending_pages() == 0);
  CHECK(cache.stats().ahead_cancelled == 2);
  CHECK(!cache.work_one());
  CHECK(fake.maps.at(kBase + kSeg).handle == other);
  // Unmap the program's page 1, then grow page 1 again: a new job queued.
  REQUIRE(cache.unmap(kBase + kSeg, kSeg) == kOk);
  REQUIRE(cache.release(other) == kOk);
  uint64_t h1 = 0;
  driver.close_gate();
  {
    Worker worker(cache);
    REQUIRE(p.grow(kBase + kSeg, &h1) == kOk);
    // The worker is inside its create for page 2; the program frees the
    // whole reservation: it waits for that page, which is then unmapped.
    driver.wait_at_gate();
    std::atomic<bool> freed{false};
    int answers[3] = {-1, -1, -1};  // Catch's assertions stay on this thread
    uint64_t program_ns = 0;
    const CacheStats before = cache.stats();
    std::thread program2([&] {
      const uint64_t t0 = monotonic_now_ns();
      answers[0] = cache.unmap(kBase, kSeg);
      answers[1] = cache.unmap(kBase + kSeg, kSeg);
      answers[2] = cache.address_free(kBase, 100 * kSeg);
      program_ns = monotonic_now_ns() - t0;
      freed.store(true);
    });
    // The gate opens once the program waits for the page in flight.
    REQUIRE(wait_for_ahead_waits(cache, before.ahead_waits + 1));
    CHECK(!freed.load());
    driver.open_gate();
    program2.join();
    CHECK(freed.load());
    for (int a : answers) CHECK(a == kOk);
    // The wait is counted, and within the program's calls.
    const uint64_t waited_ns = cache.stats().ahead_wait_ns - before.ahead_wait_ns;
    CHECK(waited_ns > 0);
    CHECK(waited_ns <= program_ns);
  }
  // The range held only deferred mappings: kept whole, with them (the
  // worker's page included); a trim gives the memory and the range back.
  CHECK(cache.stats().ranges_kept == 1);
  CHECK(cache.address_free(kBase, 100 * kSeg) == kInvalidValue);  // freed twice
  REQUIRE(cache.release(h0) == kOk);
  REQUIRE(cache.release(h1) == kOk);
  cache.trim(0, UINT64_MAX);
  std::lock_guard<std::mutex> l(driver.mutex);
  CHECK(fake.maps.empty());
  CHECK(driver.program_calls["address_free"] >= 1);
}

TEST_CASE_METHOD(WorkerCase<>, "own vmm: cuMemCreate waits for the worker's page instead of creating one") {
  uint64_t h0 = 0, h1 = 0;
  REQUIRE(p.grow(kBase, &h0) == kOk);
  driver.close_gate();
  Worker worker(cache);
  driver.wait_at_gate();
  const CacheStats before = cache.stats();
  std::atomic<bool> waited{false};
  std::thread opener([&] {
    // The gate opens once the program's create waits for the worker's page.
    waited.store(wait_for_ahead_waits(cache, before.ahead_waits + 1));
    driver.open_gate();
  });
  const int creates = driver.program_calls["create"];
  const uint64_t t0 = monotonic_now_ns();
  REQUIRE(p.create(kSeg, kProp, &h1) == kOk);
  const uint64_t create_ns = monotonic_now_ns() - t0;
  opener.join();
  CHECK(waited.load());
  CHECK(driver.program_calls["create"] == creates);  // the worker's page, not the driver's
  CHECK(cache.stats().create_hits == 1);
  // The wait is counted, and within the program's create.
  const uint64_t waited_ns = cache.stats().ahead_wait_ns - before.ahead_wait_ns;
  CHECK(waited_ns > 0);
  CHECK(waited_ns <= create_ns);
  REQUIRE(cache.map(kBase + kSeg, kSeg, 0, h1, 0) == kOk);
  CHECK(cache.stats().revived_maps == 1);
}

TEST_CASE_METHOD(WorkerCase<200>,
                 "own vmm: the next batch queues behind the job still running, never more than prefetch_pages ahead") {
  uint64_t h = 0;
  REQUIRE(p.grow(kBase, &h) == kOk);  // the program's own page 0; pages 1-2 queued
  CHECK(cache.pending_pages() == 2);
  REQUIRE(cache.work_one());  // page 1 made, page 2 not yet
  REQUIRE(p.grow(kBase + kSeg, &h) == kOk);
  // The program took page 1 while page 2 is still to be made: the next
  // batch (pages 3-6) is queued behind it rather than after it, so the
  // worker goes on without waiting for the program's next call.
  CHECK(cache.pending_pages() == 1 + 4);
  // A worker exactly as fast as the program: one page made per page
  // taken. The program never makes or waits for a page, and the pages
  // ahead of it (made or queued) never pass 32.
  uint64_t most = 0;
  for (uint64_t i = 2; i < 150; ++i) {
    cache.work_one();
    const uint64_t ahead = cache.pending_pages() + cache.stats().cached_bytes / kSeg;
    most = std::max(most, ahead);
    CHECK(ahead <= 32);
    REQUIRE(p.grow(kBase + i * kSeg, &h) == kOk);
  }
  CHECK(most >= 16);  // it did run ahead
  // (Every call here is on this thread, the worker's too: the program's
  // own are told by the cache's figures.)
  CHECK(cache.stats().create_misses == 1);
  CHECK(cache.stats().create_hits == 149);
  CHECK(cache.stats().access_skipped == 149);
  CHECK(cache.stats().ahead_waits == 0);
  std::lock_guard<std::mutex> l(driver.mutex);
  for (auto& [a, m] : fake.maps) CHECK(a + m.bytes <= kBase + 200 * kSeg);
}

TEST_CASE("own vmm: a worker's refused call stops its job and leaves nothing behind") {
  for (const char* op : {"create", "map", "set_access"}) {
    FakeDriver fake;
    WorkerDriver driver(fake);
    Cache cache(driver, 2, 1, 32, true);
    cache.note_reserved(kBase, 100 * kSeg);
    WorkerProgram p{driver, cache};
    uint64_t h = 0;
    REQUIRE(p.grow(kBase, &h) == kOk);
    fake.fail_op = op;  // the worker's first call of it
    CHECK(cache.work_one());
    CHECK(cache.pending_pages() == 0);
    CHECK(!cache.work_one());
    CHECK(cache.stats().prefetched == 0);
    CHECK(fake.maps.size() == 1);
    CHECK(fake.handles.size() == 1);
    // The program grows on: the driver serves it.
    REQUIRE(p.grow(kBase + kSeg, &h) == kOk);
    CHECK(fake.maps.at(kBase + kSeg).handle == h);
  }
}

TEST_CASE_METHOD(WorkerCase<>, "own vmm: with no worker to run, growth ahead stays on the caller") {
  driver.worker = false;
  uint64_t h = 0;
  REQUIRE(p.grow(kBase, &h) == kOk);
  CHECK(cache.pending_pages() == 0);
  CHECK(cache.stats().prefetched == 2);
}
