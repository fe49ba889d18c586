// tests/policy/test_big_blocks.cpp: a loop of one big block (256 MiB to
// 2 GiB) on an 80 GB card, steady: no driver call but the batch's shared
// sync, every other pair a pool hit from the thread's cache, and the
// cached blocks still come back to another thread that runs short
// (docs/POOL.md "Big blocks and the sync per pair").
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

constexpr uint64_t kUs = 1000;
using Op = FakeProvider::Op;

struct Calls {
  uint64_t n[int(Op::kCount)] = {};
  explicit Calls(const FakeProvider& p) {
    for (int i = 0; i < int(Op::kCount); ++i) n[i] = p.calls(Op(i));
  }
  uint64_t since(const Calls& before, Op op) const { return n[int(op)] - before.n[int(op)]; }
};

}  // namespace

TEST_CASE("big blocks: a steady loop makes no driver call but a shared sync", "[big][pool]") {
  const uint64_t bytes = GENERATE(256 * kMiB, 1 * kGiB, 2 * kGiB);
  PoolConfig config;  // the defaults: 256 MiB chunks, slack 10 ms, idle_share 15, big chunks
  PoolUnderTest t(80 * kGiB, FakeProvider::Backing::None, config);
  Attached cache(t.pool);
  const Granules granules = granules_ceil(bytes);
  uint64_t from_cache = 0;  // pairs whose block was one the thread's cache held before the call
  auto pair = [&] {
    uint64_t cached = 0;
    for (int i = 0; i < cache.cache->large_count; ++i)
      if (cache.cache->large[i].granules == granules) cached = cache.cache->large[i].block->addr();
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
    if (cached && p == cached) ++from_cache;
    t.provider.assert_idle(p, bytes);
    t.provider.launch(p, bytes);
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    t.clock.advance_ns(1 * kUs);
  };
  // Until the allowance's rate has settled (smoothed over 50 ms of the
  // fake clock): the pool grows its rotation here, once.
  for (int i = 0; i < 100000; ++i) pair();
  const Calls before(t.provider);
  const PoolStats stats_before = t.pool.stats();
  from_cache = 0;
  constexpr int kPairs = 5000;
  for (int i = 0; i < kPairs; ++i) pair();
  const Calls after(t.provider);
  const PoolStats stats = t.pool.stats();
  const uint64_t syncs = after.since(before, Op::Sync);
  INFO(bytes / kMiB << " MiB: " << syncs << " syncs, " << from_cache << " pairs from the thread's cache in " << kPairs
                    << " pairs, held " << stats.mapped_bytes / kMiB << " MiB");
  for (Op op : {Op::Reserve, Op::Create, Op::Map, Op::SetAccess, Op::Unmap, Op::Release}) {
    INFO("op " << int(op));
    CHECK(after.since(before, op) == 0);
  }
  CHECK(stats.growths == stats_before.growths);
  CHECK(stats.releases == stats_before.releases);
  // At most one sync every other pair (a 2 GiB rotation: 2.5 GiB waits),
  // every fourth at 256 MiB; batched, never skipped.
  CHECK(syncs * 2 <= kPairs);
  if (bytes == 256 * kMiB) CHECK(syncs * 4 <= kPairs);
  CHECK(syncs > 0);
  // Every pair that made no sync was a hit of the thread's own cache (no
  // device lock, no arena, no page-map writes).
  CHECK(from_cache + syncs >= kPairs);
  // The rotation: the allowance's ceiling (1/32 of the card) and a block.
  CHECK(stats.mapped_bytes <= 80 * kGiB / 32 + 2 * bytes);
  CHECK(t.provider.violations() == 0);
  CHECK(t.pool.check() == "");
}

TEST_CASE("big blocks: a thread's cached big blocks come back to another thread that runs short",
          "[big][pool][threads]") {
  // A 16 GiB card; one thread loops 1 GiB blocks (its cache holds some),
  // another fills the card with 512 MiB blocks and frees them, in rounds.
  PoolUnderTest t(16 * kGiB, FakeProvider::Backing::None, PoolConfig{});
  std::atomic<bool> stop{false};
  std::atomic<int> loop_failures{0};
  std::thread looper([&] {
    Attached cache(t.pool);
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t p = 0;
      if (t.alloc(*cache, 1 * kGiB, &p) != AllocStatus::Ok) {
        loop_failures.fetch_add(1);
        continue;
      }
      t.provider.launch(p, 1 * kGiB);
      if (t.free(*cache, p) != FreeStatus::Ok) loop_failures.fetch_add(1);
    }
  });
  Attached cache(t.pool);
  for (int round = 0; round < 20; ++round) {
    std::vector<uint64_t> blocks;
    uint64_t p = 0;
    // While the loop holds at most one 1 GiB block in use, 14 GiB must
    // always be had: the looper's cached and quarantined blocks come back.
    for (int i = 0; i < 28; ++i) {
      INFO("round " << round << " block " << i);
      REQUIRE(t.alloc(*cache, 512 * kMiB, &p) == AllocStatus::Ok);
      t.provider.assert_idle(p, 512 * kMiB);
      blocks.push_back(p);
    }
    for (uint64_t b : blocks) REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
  }
  stop.store(true);
  looper.join();
  CHECK(t.provider.violations() == 0);
  CHECK(t.pool.check() == "");
}
