// tests/policy/test_arena.cpp: the arena alone: growth and its rounding,
// coalescing across chunks, the limit, stitching (with real aliasing on
// host memory), dissolving, chunk release, and failures that leave
// nothing behind.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "harness.h"
#include "policy/arena.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;
using Op = FakeProvider::Op;

TEST_CASE("growth rounds to the chunk and opens each chunk with one access call", "[arena]") {
  ArenaUnderTest t(4);
  REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  CHECK(t.arena.mapped() == Granules(4));
  CHECK(t.provider.calls(Op::SetAccess) == 1);
  CHECK(t.provider.calls(Op::Map) == 1);
  REQUIRE(t.arena.grow(Granules(9)) == ProviderStatus::Ok);  // bigger than a chunk: exactly the request
  CHECK(t.arena.mapped() == Granules(13));
  CHECK(t.provider.calls(Op::SetAccess) == 2);
  CHECK(t.arena.check() == "");
}

TEST_CASE("blocks split, coalesce, and span chunk boundaries", "[arena]") {
  ArenaUnderTest t(4);
  REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  // Two adjacent chunks form one free run of 8.
  CHECK(t.arena.free_block_count() == 1);
  Block* whole = t.arena.take(Granules(8));
  REQUIRE(whole);
  CHECK(t.arena.free_home() == Granules(0));
  t.arena.put_back(whole);
  Block* a = t.arena.take(Granules(3));
  Block* b = t.arena.take(Granules(3));
  REQUIRE(a);
  REQUIRE(b);
  CHECK(b->addr() == a->end_addr());
  CHECK(t.page_map->lookup(a->addr() + kGranuleBytes) == a);
  CHECK(t.arena.check() == "");
  t.arena.put_back(a);
  CHECK(t.arena.free_block_count() == 2);
  t.arena.put_back(b);
  CHECK(t.arena.free_block_count() == 1);
  CHECK(t.arena.free_home() == Granules(8));
  CHECK(t.arena.check() == "");
}

TEST_CASE("the limit clips growth and then refuses it", "[arena][limit]") {
  ArenaUnderTest t(4, 6);
  REQUIRE(t.grow(Granules(1)) == ProviderStatus::Ok);
  CHECK(t.arena.mapped() == Granules(4));
  REQUIRE(t.grow(Granules(1)) == ProviderStatus::Ok);
  CHECK(t.arena.mapped() == Granules(6));
  CHECK(t.grow(Granules(1)) == ProviderStatus::OutOfMemory);
  CHECK(t.arena.mapped() == t.ceiling);  // no room left under the limit
}

TEST_CASE("a chunk the device cannot give is retried at the request's size", "[arena][oom]") {
  ArenaUnderTest t(64, 0, 10 * kGranuleBytes);
  REQUIRE(t.arena.grow(Granules(3)) == ProviderStatus::Ok);
  CHECK(t.arena.mapped() == Granules(3));
  CHECK(t.arena.grow(Granules(8)) == ProviderStatus::OutOfMemory);
  CHECK(t.provider.live_chunks() == 1);
}

TEST_CASE("stitching maps scattered free granules contiguously, aliasing their memory", "[arena][stitch]") {
  ArenaUnderTest t(2, 0, 64 * kMiB, FakeProvider::Backing::Host);
  for (int i = 0; i < 3; ++i) REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  std::vector<Block*> ones;
  for (int i = 0; i < 6; ++i) ones.push_back(t.arena.take(Granules(1)));
  for (int i = 0; i < 6; ++i) test::fill(ones[i]->addr(), kGranuleBytes, 100 + i);
  const uint64_t homes[3] = {ones[0]->addr(), ones[2]->addr(), ones[4]->addr()};
  for (int i = 0; i < 6; i += 2) t.arena.put_back(ones[i]);
  CHECK(t.arena.free_home() == Granules(3));
  CHECK(t.arena.take(Granules(2)) == nullptr);  // fragmented

  Block* s = t.arena.stitch(Granules(3));
  REQUIRE(s);
  CHECK(s->stitch);
  CHECK(t.arena.lent() == Granules(3));
  CHECK(t.arena.free_home() == Granules(0));
  CHECK(t.provider.calls(Op::SetAccess) == 3 + 1);  // one per chunk, one for the stitch
  // The stitch sees the pieces' memory, and writes through to them.
  uint64_t* stitched = reinterpret_cast<uint64_t*>(s->addr());
  bool found[3] = {false, false, false};
  for (int piece = 0; piece < 3; ++piece)
    for (int h = 0; h < 3; ++h)
      if (std::memcmp(reinterpret_cast<void*>(s->addr() + piece * kGranuleBytes), reinterpret_cast<void*>(homes[h]),
                      kGranuleBytes) == 0)
        found[h] = true;
  CHECK((found[0] && found[1] && found[2]));
  stitched[0] = 0x1234;
  bool aliased = false;
  for (uint64_t home : homes) aliased |= *reinterpret_cast<uint64_t*>(home) == 0x1234;
  CHECK(aliased);
  // The home addresses are not handed out while lent.
  CHECK(t.arena.take(Granules(1)) == nullptr);
  CHECK(t.arena.check() == "");

  t.arena.put_back(s);
  CHECK(t.arena.free_stitched() == Granules(3));
  Block* again = t.arena.take_stitch(Granules(3));
  CHECK(again == s);
  t.arena.put_back(again);
  CHECK(t.arena.dissolve_free_stitches() == 1);
  CHECK(t.arena.lent() == Granules(0));
  CHECK(t.arena.free_home() == Granules(3));
  CHECK(t.page_map->lookup(s->addr()) == nullptr);
  CHECK(t.provider.live_maps() == 3);  // the three home chunk maps
  CHECK(t.arena.check() == "");
  for (int i = 1; i < 6; i += 2) CHECK(test::check(ones[i]->addr(), kGranuleBytes, 100 + i));
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("stitching may be bounded in pieces", "[arena][stitch]") {
  ArenaUnderTest t(1);
  std::vector<Block*> ones;
  for (int i = 0; i < 8; ++i) REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  for (int i = 0; i < 8; ++i) ones.push_back(t.arena.take(Granules(1)));
  for (int i = 0; i < 8; i += 2) t.arena.put_back(ones[i]);
  CHECK(t.arena.stitch(Granules(4), 3) == nullptr);
  CHECK(t.arena.free_home() == Granules(4));
  CHECK(t.arena.stitch(Granules(4), 4) != nullptr);
}

TEST_CASE("a failing map or access call during a stitch changes nothing", "[arena][stitch][faults]") {
  for (Op op : {Op::Map, Op::SetAccess}) {
    ArenaUnderTest t(1);
    std::vector<Block*> ones;
    for (int i = 0; i < 6; ++i) REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
    for (int i = 0; i < 6; ++i) ones.push_back(t.arena.take(Granules(1)));
    for (int i = 0; i < 6; i += 2) t.arena.put_back(ones[i]);
    const uint64_t maps_before = t.provider.live_maps();
    t.provider.fail(op, op == Op::Map ? 1 : 0, ProviderStatus::Failed);
    CHECK(t.arena.stitch(Granules(3)) == nullptr);
    CHECK(t.provider.live_maps() == maps_before);
    CHECK(t.arena.free_home() == Granules(3));
    CHECK(t.arena.lent() == Granules(0));
    CHECK(t.arena.check() == "");
    t.provider.clear_faults();
    CHECK(t.arena.stitch(Granules(3)) != nullptr);
    CHECK(t.provider.violations() == 0);
  }
}

TEST_CASE("only wholly free chunks are released, and the run splits around them", "[arena][release]") {
  ArenaUnderTest t(2);
  for (int i = 0; i < 3; ++i) REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  Block* first = t.arena.take(Granules(1));  // pins chunk 0
  REQUIRE(first);
  CHECK(t.arena.release_free_chunks(1) == 1);
  CHECK(t.provider.live_chunks() == 2);
  CHECK(t.arena.mapped() == Granules(4));
  CHECK(t.arena.check() == "");
  CHECK(t.arena.release_free_chunks(10) == 1);  // chunk 0 is pinned
  CHECK(t.arena.check() == "");
  t.arena.put_back(first);
  CHECK(t.arena.release_free_chunks(10) == 1);
  CHECK(t.provider.live_chunks() == 0);
  CHECK(t.provider.live_maps() == 0);
  CHECK(t.arena.mapped() == Granules(0));
  CHECK(t.page_map->lookup(first->addr()) == nullptr);
  // Released address space is reused by the next growth.
  REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  CHECK(t.arena.check() == "");
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("lent pieces pin their chunk until the stitch is dissolved", "[arena][release][stitch]") {
  ArenaUnderTest t(2);
  Block* s = stitch_across_two_chunks(t);
  REQUIRE(s);
  CHECK(t.arena.release_free_chunks(10) == 0);
  t.arena.put_back(s);
  CHECK(t.arena.release_free_chunks(10) == 0);  // still lent to the free stitch
  CHECK(t.arena.dissolve_free_stitches() == 1);
  CHECK(t.arena.release_free_chunks(10) == 2);
  CHECK(t.provider.live_maps() == 0);
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("growth failing at any step leaves no handle, map or block", "[arena][faults]") {
  for (Op op : {Op::Create, Op::Map, Op::SetAccess, Op::Reserve}) {
    for (ProviderStatus status : {ProviderStatus::OutOfMemory, ProviderStatus::Failed}) {
      ArenaUnderTest t(4);
      t.provider.fail(op, 0, status, true);
      CHECK(t.arena.grow(Granules(1)) != ProviderStatus::Ok);
      CHECK(t.provider.live_chunks() == 0);
      CHECK(t.provider.live_maps() == 0);
      CHECK(t.arena.mapped() == Granules(0));
      CHECK(t.arena.free_home() == Granules(0));
      t.provider.clear_faults();
      CHECK(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
      CHECK(t.arena.check() == "");
      CHECK(t.provider.violations() == 0);
    }
  }
}
