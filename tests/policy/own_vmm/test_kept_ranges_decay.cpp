// tests/policy/own_vmm/test_kept_ranges_decay.cpp: kept ranges (cuMemAddressFree of a
// range of deferred mappings, the next reservation of its size) and the
// decay of cached handles (policy/own_vmm/cache.h).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/policy/own_vmm/fakes.h"

using namespace own_vmm_test;

TEST_CASE("own vmm: a freed range of deferred mappings is kept, and the next reservation of its size gets it back") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  const uint64_t range = 64 * kSeg;
  cache.note_reserved(kBase, range);
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 8, &hs) == 8);
  // empty_cache: unmap and release every page, free the range.
  shrink_page_by_page(p, hs);
  const int before = fake.total_calls();
  REQUIRE(p.address_free(kBase, range) == kOk);
  CHECK(fake.total_calls() == before);  // kept: no unmap, no free at the driver
  CHECK(cache.stats().ranges_kept == 1);
  // Not for another size, a hint, flags or an alignment it misses.
  uint64_t base = 0;
  CHECK(!cache.take_range(range / 2, 0, 0, 0, &base));
  CHECK(!cache.take_range(range, 0, 0, 1, &base));
  CHECK(!cache.take_range(range, uint64_t(1) << 41, 0, 0, &base));
  REQUIRE(cache.take_range(range, 0, 0, 0, &base));
  CHECK(base == kBase);
  cache.note_reserved(base, range);  // the glue notes what it hands out too
  // Growing again: every page comes back where it was, open; no driver call.
  REQUIRE(grow_page_by_page(p, 8, &hs) == 8);
  for (int i = 0; i < 8; ++i) CHECK(fake.maps.at(kBase + uint64_t(i) * kSeg).handle == hs[size_t(i)]);
  CHECK(fake.total_calls() == before);
  CHECK(cache.stats().ranges_reused == 1);
}

TEST_CASE("own vmm: an address hint gets its kept range back, or frees one in the way for the driver") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  const uint64_t range = 8 * kSeg;
  auto keep = [&] {
    cache.note_reserved(kBase, range);
    uint64_t h = 0;
    REQUIRE(p.create(kSeg, kProp, &h) == kOk);
    REQUIRE(p.map(kBase, kSeg, 0, h) == kOk);
    REQUIRE(p.unmap(kBase, kSeg) == kOk);
    REQUIRE(p.release(h) == kOk);
    REQUIRE(p.address_free(kBase, range) == kOk);
  };
  keep();
  uint64_t base = 0;
  REQUIRE(cache.take_range(range, 0, kBase, 0, &base));  // its own address: it
  CHECK(base == kBase);
  REQUIRE(p.address_free(kBase, range) == kOk);  // kept again
  // A hint inside it, for another size: the kept range goes back to the
  // driver (its page unmapped), and the driver answers the reservation.
  CHECK(!cache.take_range(2 * kSeg, 0, kBase + kSeg, 0, &base));
  CHECK(fake.maps.empty());
  CHECK(fake.calls["address_free"] == 1);
  CHECK(!cache.take_range(range, 0, 0, 0, &base));  // nothing kept any more
}

TEST_CASE("own vmm: a range is not kept while a live or an untracked mapping is in it") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  cache.note_reserved(kBase, 8 * kSeg);
  uint64_t h = 0, other = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kOk);
  CHECK(p.address_free(kBase, 8 * kSeg) == kInvalidValue);  // live: the driver refuses
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  // A handle the cache does not track, mapped and unmapped there.
  REQUIRE(fake.create(kSeg, kProp, &other) == kOk);
  REQUIRE(p.map(kBase + kSeg, kSeg, 0, other) == kOk);
  REQUIRE(p.unmap(kBase + kSeg, kSeg) == kOk);
  REQUIRE(p.address_free(kBase, 8 * kSeg) == kOk);
  CHECK(cache.stats().ranges_kept == 0);
  CHECK(fake.maps.empty());  // freed for real: the deferred mapping unmapped
}

TEST_CASE("own vmm: cached handles unused for release_delay decay to the driver, and their kept range with them") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  const uint64_t range = 16 * kSeg, delay = 5000;
  cache.note_reserved(kBase, range);
  std::vector<uint64_t> hs(12);
  for (int i = 0; i < 12; ++i) {
    REQUIRE(p.create(kSeg, kProp, &hs[size_t(i)]) == kOk);
    REQUIRE(p.map(kBase + uint64_t(i) * kSeg, kSeg, 0, hs[size_t(i)]) == kOk);
  }
  REQUIRE(p.access(kBase, 12 * kSeg, kRW) == kOk);
  shrink_page_by_page(p, hs);
  REQUIRE(p.address_free(kBase, range) == kOk);  // kept
  CHECK(cache.cached_bytes(0) == 12 * kSeg);
  // The first step sees them cached; nothing is old yet.
  CHECK(cache.decay_step(1000, delay, 0, 8) == 0);
  CHECK(cache.decay_step(5999, delay, 0, 8) == 0);
  // A whole delay later: 8 a step, then the rest; the range goes with the last.
  CHECK(cache.decay_step(6000, delay, 0, 8) == 8 * kSeg);
  CHECK(fake.handles.size() == 4);
  CHECK(fake.calls["address_free"] == 0);
  CHECK(cache.decay_step(6010, delay, 0, 8) == 4 * kSeg);
  CHECK(fake.handles.empty());
  CHECK(fake.maps.empty());
  CHECK(fake.calls["address_free"] == 1);
  CHECK(cache.stats().decayed_bytes == 12 * kSeg);
  CHECK(cache.cached_bytes(0) == 0);
}

TEST_CASE("own vmm: decay keeps the floor, and a handle taken back is young again") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  std::vector<uint64_t> hs(4);
  for (auto& h : hs) REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  for (auto h : hs) REQUIRE(p.release(h) == kOk);
  CHECK(cache.decay_step(100, 1000, 0, 8) == 0);  // stamped at 100
  uint64_t again = 0;
  REQUIRE(p.create(kSeg, kProp, &again) == kOk);  // a hit: leaves the cache
  REQUIRE(p.release(again) == kOk);               // cached again, not yet seen
  // Three are old; releasing them leaves one page cached, the floor.
  CHECK(cache.decay_step(1100, 1000, 2 * kSeg, 8) == 2 * kSeg);
  CHECK(cache.cached_bytes(0) == 2 * kSeg);
  CHECK(cache.decay_step(1100, 1000, 0, 8) == kSeg);  // the last old one; `again` was first seen at 1100
  CHECK(cache.decay_step(2099, 1000, 0, 8) == 0);
  CHECK(cache.decay_step(2100, 1000, 0, 8) == kSeg);
  CHECK(cache.cached_bytes(0) == 0);
}
