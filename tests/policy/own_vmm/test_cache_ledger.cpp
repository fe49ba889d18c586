// tests/policy/own_vmm/test_cache_ledger.cpp: the own-VMM cache over the
// process's ledger (policy/own_vmm/cache.h, ledger.h): the cache notes
// every call it answers there, so that what the program holds (sleep's
// resident bytes) is right with the cache on, and the cache's decisions
// follow the ledger's references, imports included.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "policy/own_vmm/ledger.h"
#include "tests/policy/own_vmm/fakes.h"

using namespace own_vmm_test;
using pagefast::policy::own_vmm::Ledger;
using pagefast::policy::own_vmm::ShareKey;

TEST_CASE("own vmm: with the cache, what the program released is not resident, what it holds is") {
  FakeDriver fake;
  Ledger ledger;
  Cache cache(fake, ledger, 2, 1);
  Program p{fake, &cache};
  segment_round(p, 4);
  // Every page cached by pagefast: none of the program's.
  CHECK(cache.cached_bytes(0) == 4 * kSeg);
  CHECK(ledger.resident(0).bytes == 0);
  // Grown again from the cache: the program's.
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 3, &hs) == 3);
  CHECK(ledger.resident(0).bytes == 3 * kSeg);
  CHECK(ledger.resident(0).handles == 3);
  // Released while mapped: the program's until unmapped.
  REQUIRE(p.release(hs[0]) == kOk);
  CHECK(ledger.resident(0).bytes == 3 * kSeg);
  REQUIRE(p.unmap(kBase, kSeg) == kOk);  // deferred
  CHECK(ledger.resident(0).bytes == 2 * kSeg);
  CHECK(ledger.facts(hs[0]).known);  // cached: the cache keeps its record
  // A retain through a live mapping is a reference the cache answers.
  uint64_t again = 0;
  REQUIRE(p.retain(kBase + kSeg, &again) == kOk);
  CHECK(again == hs[1]);
  CHECK(ledger.facts(hs[1]).refs == 2);
}

TEST_CASE("own vmm: what the cache gives back for real leaves the ledger") {
  FakeDriver fake;
  Ledger ledger;
  Cache cache(fake, ledger, 2, 1);
  Program p{fake, &cache};
  segment_round(p, 4);
  REQUIRE(cache.trim(0, UINT64_MAX) == 4 * kSeg);
  CHECK(fake.handles.empty());
  for (uint64_t h = 0x100; h < 0x104; ++h) CHECK_FALSE(ledger.facts(h).known);
  // No room: the program's release goes to the driver, and the ledger forgets it.
  FakeRoom none(0);
  cache.join(0, &none);
  uint64_t h = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.release(h) == kOk);
  CHECK(fake.handles.empty());
  CHECK_FALSE(ledger.facts(h).known);
}

TEST_CASE("own vmm: an import of the program's own export holds its own reference at the driver") {
  const ShareKey fd_file{5, 99};
  FakeDriver fake;
  Ledger ledger;
  Cache cache(fake, ledger, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  int result = 0;
  CHECK_FALSE(cache.check_handle(h, true, &result));  // exported: shared
  ledger.exported(h, fd_file);
  // The driver hands the same handle back with one more reference.
  ++fake.handles[h].refs;
  ledger.imported(h, &fd_file, 0);
  REQUIRE(p.release(h) == kOk);  // the import's: the driver's to drop
  CHECK(fake.calls["release"] == 1);
  CHECK(fake.handles[h].refs == 1);
  CHECK(ledger.resident(0).bytes == kSeg);
  REQUIRE(p.release(h) == kOk);  // the last: shared, so released for real
  CHECK(fake.calls["release"] == 2);
  CHECK(fake.handles.empty());
  CHECK(ledger.resident(0).bytes == 0);
  CHECK(p.release(h) == kInvalidValue);  // as the driver answers
}

TEST_CASE("own vmm: a device reset forgets the cache's records, then the ledger's") {
  FakeDriver fake;
  Ledger ledger;
  Cache cache(fake, ledger, 2, 1);
  Program p{fake, &cache};
  segment_round(p, 2);
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 1, &hs) == 1);
  cache.forget_device(0);
  ledger.forget_device(0);
  CHECK(cache.cached_bytes(0) == 0);
  CHECK(ledger.resident(0).bytes == 0);
  CHECK(cache.deferred_counts_consistent());
  // Calls on the forgotten handle now reach the driver.
  const int before = fake.calls["release"];
  p.release(hs[0]);
  CHECK(fake.calls["release"] == before + 1);
}

TEST_CASE("own vmm: a cache that gives up leaves the program's handles in the ledger") {
  FakeDriver fake;
  Ledger ledger;
  Cache cache(fake, ledger, 2, 1);
  Program p{fake, &cache};
  segment_round(p, 2);
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 1, &hs) == 1);
  cache.abandon();
  CHECK(ledger.resident(0).bytes == kSeg);
  CHECK(ledger.resident(0).handles == 1);
  // The cached page went back for real, and out of the ledger.
  CHECK(fake.handles.size() == 1);
  ledger.unmapped(kBase, kSeg);
  ledger.released(hs[0]);
  CHECK_FALSE(ledger.facts(hs[0]).known);
}

// One lock over the program's handles (ledger.h): the hooks' notes of
// calls the cache does not answer, the cache's calls, growth ahead's
// worker and trims all take the ledger's mutex. Threads of each at once;
// every record ends consistent (ThreadSanitizer: "policy under tsan").
TEST_CASE("own vmm: hook notes and cache calls and growth ahead and trims share the ledger's one lock", "[threads]") {
  constexpr int kRounds = 20, kPages = 8, kNoters = 2, kNotes = 400;
  FakeDriver fake;
  WorkerDriver driver{fake};
  Ledger ledger;
  Cache cache{driver, ledger, 2, 1, 4, true};
  cache.note_reserved(kBase, 64 * kSeg);
  WorkerProgram p{driver, cache};
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};  // Catch's checks are not thread-safe
  std::vector<std::thread> threads;
  // The hooks' notes of handles the cache does not track (an uncached
  // create, its map and unmap, its release), each thread its own values.
  for (int t = 0; t < kNoters; ++t)
    threads.emplace_back([&ledger, &wrong, t] {
      const uint64_t handle0 = (uint64_t(t) + 1) << 48, addr0 = (uint64_t(t) + 1) << 44;
      for (int i = 0; i < kNotes; ++i) {
        const uint64_t h = handle0 + uint64_t(i), a = addr0 + uint64_t(i) * kSeg;
        ledger.created(h, kSeg, 0);
        ledger.mapped(a, kSeg, h);
        ledger.retained(h);
        ledger.released(h);
        ledger.unmapped(a, kSeg);
        ledger.released(h);
        if (ledger.facts(h).known) ++wrong;
      }
    });
  // Readers and the budget's trims.
  threads.emplace_back([&] {
    while (!done.load()) {
      (void)ledger.resident(0);
      (void)cache.trim(0, kSeg);
      (void)cache.stats();
    }
  });
  grow_and_shrink(cache, p, kRounds, kPages, done, threads,
                  [&] { CHECK(ledger.resident(0).handles >= uint64_t(kPages)); });
  CHECK(wrong.load() == 0);
  CHECK(cache.deferred_counts_consistent());
  // Nothing is the program's; what the cache keeps is its own.
  CHECK(ledger.resident(0).bytes == 0);
  CHECK(ledger.resident(0).handles == 0);
  cache.trim(0, UINT64_MAX);
  CHECK(cache.cached_bytes(0) == 0);
  CHECK(fake.handles.empty());
}
