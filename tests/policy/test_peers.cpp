// tests/policy/test_peers.cpp: peer access (docs/POOL.md "Peer access") on
// the fake provider: a change of the peer set re-applies access to every
// opened range (home chunks and stitches), later growth and stitches open
// to the current set, removal revokes, refusals are counted and skipped,
// and released or dissolved ranges are no longer touched.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "harness.h"
#include "policy/arena.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;
using Op = FakeProvider::Op;

namespace {

constexpr uint64_t kPeer1 = uint64_t(1) << 1;
constexpr uint64_t kPeer3 = uint64_t(1) << 3;

}  // namespace

TEST_CASE("a peer set change re-applies access to every opened range, stitches included", "[peers][arena]") {
  ArenaUnderTest t(2);
  for (int i = 0; i < 3; ++i) REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  std::vector<Block*> ones;
  for (int i = 0; i < 6; ++i) ones.push_back(t.arena.take(Granules(1)));
  for (int i = 0; i < 6; i += 2) t.arena.put_back(ones[i]);
  Block* s = t.arena.stitch(Granules(3));
  REQUIRE(s);
  CHECK(t.arena.opened_range_count() == 4);  // three chunks, one stitch
  CHECK(t.provider.peers_at(ones[1]->addr()) == 0);
  CHECK(t.provider.peers_at(s->addr()) == 0);

  const uint64_t before = t.provider.calls(Op::SetAccess);
  CHECK(t.arena.set_peers(kPeer1) == 0);
  CHECK(t.provider.calls(Op::SetAccess) == before + 4);  // one call per opened range
  for (int i = 0; i < 6; ++i) CHECK(t.provider.peers_at(ones[i]->addr()) == kPeer1);
  CHECK(t.provider.peers_at(s->addr()) == kPeer1);
  CHECK(t.provider.peers_at(s->addr() + 2 * kGranuleBytes) == kPeer1);

  // Future growth and stitches open to the current set.
  REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  Block* fresh = t.arena.take(Granules(2));
  REQUIRE(fresh);
  CHECK(t.provider.peers_at(fresh->addr()) == kPeer1);
  t.arena.put_back(fresh);
  t.arena.put_back(s);
  CHECK(t.arena.dissolve_free_stitches() == 1);
  for (int i = 1; i < 6; i += 2) t.arena.put_back(ones[i]);
  Block* a = t.arena.take(Granules(1));
  Block* b = t.arena.take(Granules(1));
  Block* c = t.arena.take(Granules(1));
  t.arena.put_back(b);
  Block* d = t.arena.take(Granules(4));  // leaves b's hole and a tail
  REQUIRE(d);
  Block* s2 = t.arena.stitch(t.arena.free_home());
  REQUIRE(s2);
  CHECK(t.provider.peers_at(s2->addr()) == kPeer1);

  // Adding another peer keeps the first; removing one revokes only it.
  CHECK(t.arena.set_peers(kPeer1 | kPeer3) == 0);
  CHECK(t.provider.peers_at(a->addr()) == (kPeer1 | kPeer3));
  CHECK(t.provider.peers_at(s2->addr()) == (kPeer1 | kPeer3));
  CHECK(t.arena.set_peers(kPeer3) == 0);
  CHECK(t.provider.peers_at(a->addr()) == kPeer3);
  CHECK(t.provider.peers_at(c->addr()) == kPeer3);
  CHECK(t.provider.peers_at(d->addr()) == kPeer3);
  CHECK(t.provider.peers_at(s2->addr()) == kPeer3);
  CHECK(t.arena.set_peers(0) == 0);
  CHECK(t.provider.peers_at(a->addr()) == 0);
  CHECK(t.provider.peers_at(s2->addr()) == 0);
  CHECK(t.arena.check() == "");
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("released and dissolved ranges are no longer re-applied", "[peers][arena][release]") {
  ArenaUnderTest t(2);
  Block* s = stitch_across_two_chunks(t);
  REQUIRE(s);
  t.arena.put_back(s);
  CHECK(t.arena.opened_range_count() == 3);
  CHECK(t.arena.dissolve_free_stitches() == 1);
  CHECK(t.arena.opened_range_count() == 2);
  CHECK(t.arena.release_free_chunks(1) == 1);
  CHECK(t.arena.opened_range_count() == 1);
  const uint64_t before = t.provider.calls(Op::SetAccess);
  CHECK(t.arena.set_peers(kPeer1) == 0);
  CHECK(t.provider.calls(Op::SetAccess) == before + 1);
  CHECK(t.arena.release_free_chunks(1) == 1);
  CHECK(t.arena.opened_range_count() == 0);
  CHECK(t.arena.set_peers(0) == 0);
  CHECK(t.provider.calls(Op::SetAccess) == before + 1);
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("a range that refuses is counted and skipped; the set changes anyway", "[peers][arena][faults]") {
  ArenaUnderTest t(2);
  for (int i = 0; i < 3; ++i) REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  Block* all = t.arena.take(Granules(6));
  REQUIRE(all);
  t.provider.fail(Op::SetAccess, 1, ProviderStatus::Failed);  // the second range
  CHECK(t.arena.set_peers(kPeer1) == 1);
  CHECK(t.arena.peers() == kPeer1);
  int granted = 0;
  for (int g = 0; g < 6; g += 2) granted += t.provider.peers_at(all->addr() + g * kGranuleBytes) == kPeer1;
  CHECK(granted == 2);
  // Growth after the refusal still opens to the whole set.
  REQUIRE(t.arena.grow(Granules(1)) == ProviderStatus::Ok);
  Block* fresh = t.arena.take(Granules(2));
  REQUIRE(fresh);
  CHECK(t.provider.peers_at(fresh->addr()) == kPeer1);
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("the pool grants a peer on memory allocated before and after, and revokes it", "[peers][pool]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
  Attached cache(t.pool);
  uint64_t small = 0, large = 0;
  REQUIRE(t.alloc(*cache, 1000, &small) == AllocStatus::Ok);
  REQUIRE(t.alloc(*cache, 6 * kMiB, &large) == AllocStatus::Ok);
  CHECK(t.provider.peers_at(small) == 0);

  // The pool's own device and out-of-range ordinals are not peers.
  const uint64_t calls = t.provider.calls(Op::SetAccess);
  CHECK(t.pool.add_peer(0) == 0);
  CHECK(t.pool.add_peer(-1) == 0);
  CHECK(t.pool.add_peer(kMaxPeerDevices) == 0);
  CHECK(t.pool.remove_peer(2) == 0);  // never granted: nothing to do
  CHECK(t.provider.calls(Op::SetAccess) == calls);
  CHECK(t.pool.peers() == 0);

  CHECK(t.pool.add_peer(1) == 0);
  CHECK(t.pool.peers() == kPeer1);
  CHECK(t.provider.peers_at(small) == kPeer1);
  CHECK(t.provider.peers_at(large) == kPeer1);
  const uint64_t granted = t.provider.calls(Op::SetAccess);
  CHECK(t.pool.add_peer(1) == 0);  // already granted: no driver call
  CHECK(t.provider.calls(Op::SetAccess) == granted);

  // Growth after the grant: opened to the peer too.
  const uint64_t mapped = t.pool.stats().mapped_bytes;
  uint64_t later = 0;
  REQUIRE(t.alloc(*cache, 64 * kMiB, &later) == AllocStatus::Ok);
  CHECK(t.pool.stats().mapped_bytes > mapped);
  CHECK(t.provider.peers_at(later) == kPeer1);
  fill(later, 64 * kMiB, 7);

  CHECK(t.pool.remove_peer(1) == 0);
  CHECK(t.pool.peers() == 0);
  CHECK(t.provider.peers_at(small) == 0);
  CHECK(t.provider.peers_at(large) == 0);
  CHECK(t.provider.peers_at(later) == 0);
  // The device's own access is untouched.
  CHECK(check(later, 64 * kMiB, 7));
  CHECK(t.free(*cache, small) == FreeStatus::Ok);
  CHECK(t.free(*cache, large) == FreeStatus::Ok);
  CHECK(t.free(*cache, later) == FreeStatus::Ok);
  CHECK(t.pool.check() == "");
  CHECK(t.provider.violations() == 0);
}
