// tests/policy/own_vmm/test_cache.cpp: the own-VMM cache's released handles,
// deferred mappings and access (policy/own_vmm/cache.h) over the fake
// driver (fakes.h).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/policy/own_vmm/fakes.h"

using namespace own_vmm_test;

TEST_CASE("own vmm: an expandable-segments loop makes no driver call after its first round") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  segment_round(p, 8);
  CHECK(fake.calls["create"] == 8);
  CHECK(fake.calls["map"] == 8);
  CHECK(fake.calls["set_access"] == 1);
  CHECK(fake.calls.count("unmap") == 0);
  CHECK(fake.calls.count("release") == 0);
  const int after_first = fake.total_calls();
  for (int round = 0; round < 5; ++round) segment_round(p, 8);
  CHECK(fake.total_calls() == after_first);
  CHECK(cache.stats().create_hits == 40);
  CHECK(cache.stats().revived_maps == 40);
  CHECK(cache.stats().access_skipped == 5);
  // Still mapped, accessible, one handle per page: nothing leaked.
  CHECK(fake.maps.size() == 8);
  CHECK(fake.handles.size() == 8);
  CHECK(cache.cached_bytes(0) == 8 * kSeg);
  // A trim gives all back: every deferred mapping unmapped, every handle released.
  CHECK(cache.trim(0, UINT64_MAX) == 8 * kSeg);
  CHECK(fake.maps.empty());
  CHECK(fake.handles.empty());
}

TEST_CASE("own vmm: growing further than before maps and opens only the new pages for real") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  segment_round(p, 2);
  fake.calls.clear();
  segment_round(p, 4);
  CHECK(fake.calls["create"] == 2);
  CHECK(fake.calls["map"] == 2);
  // The access range holds two fresh mappings: the driver is asked.
  CHECK(fake.calls["set_access"] == 1);
  for (auto& [a, m] : fake.maps) CHECK(m.access["r"] == "w");
}

TEST_CASE("own vmm: one access call per device (PyTorch with peers) is recognised per location") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0;
  for (int round = 0; round < 3; ++round) {
    REQUIRE(p.create(kSeg, kProp, &h) == kOk);
    REQUIRE(p.map(kBase, kSeg, 0, h) == kOk);
    REQUIRE(p.access(kBase, kSeg, "rw") == kOk);  // the device
    REQUIRE(p.access(kBase, kSeg, "pw") == kOk);  // a peer
    REQUIRE(p.unmap(kBase, kSeg) == kOk);
    REQUIRE(p.release(h) == kOk);
  }
  CHECK(fake.calls["set_access"] == 2);
  CHECK(cache.stats().access_skipped == 4);
  // A peer dropped (PROT_NONE for it) is a change: the driver is asked.
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kOk);
  REQUIRE(p.access(kBase, kSeg, "rwpn") == kOk);
  CHECK(fake.calls["set_access"] == 3);
  CHECK(fake.maps[kBase].access["p"] == "n");
}

TEST_CASE("own vmm: abandon gives the driver the program's view back; forget_device drops records") {
  FakeDriver fake;
  Cache cache(fake, 2, 1, 32);
  cache.note_reserved(kBase, 100 * kSeg);
  Program p{fake, &cache};
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 5, &hs) == 5);
  REQUIRE(p.unmap(kBase + 4 * kSeg, kSeg) == kOk);
  REQUIRE(p.release(hs[4]) == kOk);
  cache.abandon();
  // Pages 0..3 are the program's, still mapped; nothing else is.
  CHECK(fake.maps.size() == 4);
  CHECK(fake.handles.size() == 4);
  CHECK(cache.cached_bytes(0) == 0);
  // From now on the program's calls reach the driver as they are.
  for (int i = 0; i < 4; ++i) {
    REQUIRE(fake.unmap(kBase + uint64_t(i) * kSeg, kSeg) == kOk);
    REQUIRE(fake.release(hs[size_t(i)]) == kOk);
  }
  CHECK(fake.handles.empty());

  FakeDriver fake2;
  Cache cache2(fake2, 2, 1);
  Program p2{fake2, &cache2};
  uint64_t h = 0;
  REQUIRE(p2.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p2.map(kBase, kSeg, 0, h) == kOk);
  REQUIRE(p2.unmap(kBase, kSeg) == kOk);
  REQUIRE(p2.release(h) == kOk);
  cache2.forget_device(0);
  CHECK(cache2.cached_bytes(0) == 0);
  CHECK(fake2.calls.count("unmap") == 0);
  uint64_t g = 0;
  REQUIRE(p2.create(kSeg, kProp, &g) == kOk);
  CHECK(g != h);                // not from the forgotten device's records
  CHECK(p2.release(h) == kOk);  // the driver answers for the old handle
  CHECK(fake2.calls["release"] == 1);
}

TEST_CASE("own vmm: a released handle is refused as the driver refuses it") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  uint64_t h = 0;
  Program p{fake, &cache};
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.release(h) == kOk);
  CHECK(cache.cached_bytes(0) == kSeg);
  CHECK(p.release(h) == kInvalidValue);
  CHECK(p.map(kBase, kSeg, 0, h) == kInvalidValue);
  int result = -1;
  CHECK(cache.check_handle(h, false, &result));
  CHECK(result == kInvalidValue);
  CHECK(cache.check_handle(h, true, &result));
  CHECK(fake.maps.empty());
}

TEST_CASE("own vmm: a different offset, size or handle at a deferred address is mapped for real") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t a = 0, b = 0;
  REQUIRE(p.create(2 * kSeg, kProp, &a) == kOk);
  REQUIRE(p.create(2 * kSeg, kProp, &b) == kOk);
  REQUIRE(p.map(kBase, kSeg, 0, a) == kOk);
  REQUIRE(p.access(kBase, kSeg, kRW) == kOk);
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  CHECK(fake.maps.count(kBase) == 1);  // deferred
  fake.calls.clear();
  REQUIRE(p.map(kBase, kSeg, kSeg, a) == kOk);  // other offset
  CHECK(fake.calls["unmap"] == 1);
  CHECK(fake.calls["map"] == 1);
  CHECK(fake.maps[kBase].offset == kSeg);
  CHECK(fake.maps[kBase].access.empty());  // a fresh mapping: no access until asked
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  REQUIRE(p.map(kBase, kSeg, kSeg, b) == kOk);  // other handle
  CHECK(fake.maps[kBase].handle == b);
  // Access with other descriptors on a revived mapping goes to the driver.
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  REQUIRE(p.map(kBase, kSeg, kSeg, b) == kOk);
  fake.calls.clear();
  REQUIRE(p.access(kBase, kSeg, "ro") == kOk);
  REQUIRE(p.access(kBase, kSeg, "ro") == kOk);
  CHECK(fake.calls["set_access"] == 1);
  CHECK(fake.maps[kBase].access["r"] == "o");
}

TEST_CASE("own vmm: a release with mappings left is cached once the last one is unmapped") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0, again = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kOk);
  REQUIRE(p.release(h) == kOk);
  CHECK(cache.cached_bytes(0) == 0);
  // Retain through the mapping gives the handle back to the program.
  REQUIRE(p.retain(kBase + 4096, &again) == kOk);
  CHECK(again == h);
  REQUIRE(p.release(h) == kOk);
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  CHECK(cache.cached_bytes(0) == kSeg);
  CHECK(fake.calls.count("release") == 0);
  // Retain at the (for the program) unmapped address: the driver answers.
  CHECK(p.retain(kBase, &again) == kInvalidValue);
  CHECK(fake.maps.empty());
}

TEST_CASE("own vmm: cuMemAddressFree and pointer queries unmap deferred mappings first") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kOk);
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  cache.before_query(kBase + kSeg);  // outside: nothing happens
  CHECK(fake.maps.size() == 1);
  cache.before_query(kBase + 100);
  CHECK(fake.maps.empty());
  REQUIRE(p.map(kBase, kSeg, 0, h) == kOk);
  CHECK(p.address_free(kBase, 4 * kSeg) == kInvalidValue);  // live mapping: the driver refuses
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  CHECK(p.address_free(kBase, 4 * kSeg) == kOk);
  CHECK(fake.maps.empty());
}

TEST_CASE("own vmm: exported handles and a full cache go back to the driver") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0;
  int result = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kOk);
  CHECK_FALSE(cache.check_handle(h, true, &result));  // forwarded, and now shared
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  CHECK(fake.calls["unmap"] == 1);
  REQUIRE(p.release(h) == kOk);
  CHECK(fake.calls["release"] == 1);
  CHECK(fake.handles.empty());
  FakeRoom half(kSeg / 2);
  cache.join(0, &half);
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.release(h) == kOk);
  CHECK(fake.handles.empty());
  CHECK(cache.cached_bytes(0) == 0);
}

TEST_CASE("own vmm: other properties or sizes never get a cached handle") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0, g = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  REQUIRE(p.release(h) == kOk);
  REQUIRE(p.create(2 * kSeg, kProp, &g) == kOk);
  CHECK(g != h);
  REQUIRE(p.create(kSeg, "pinned-device-0-posix-fd", &g) == kOk);
  CHECK(g != h);
  REQUIRE(p.create(kSeg, kProp, &g) == kOk);
  CHECK(g == h);
}

TEST_CASE("own vmm: a refused real unmap leaves the mapping deferred and the driver's answer stands") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t a = 0, b = 0;
  REQUIRE(p.create(kSeg, kProp, &a) == kOk);
  REQUIRE(p.create(kSeg, kProp, &b) == kOk);
  REQUIRE(p.map(kBase, kSeg, 0, a) == kOk);
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  fake.fail_op = "unmap";
  CHECK(p.map(kBase, kSeg, 0, b) == kInvalidValue);  // still mapped: the driver refuses
  CHECK(p.map(kBase, kSeg, 0, b) == kOk);            // the next flush works
  CHECK(fake.maps[kBase].handle == b);
  REQUIRE(p.unmap(kBase, kSeg) == kOk);
  fake.fail_op = "release";
  CHECK(cache.trim(0, UINT64_MAX) == 0);  // a refused release frees nothing
  REQUIRE(p.release(a) == kOk);
  REQUIRE(p.release(b) == kOk);
}
