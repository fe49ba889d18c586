// tests/policy/test_release.cpp: how much memory the pool holds: prewarm,
// the limit, the release threshold (with the fake clock), trim, out-of-
// memory release-and-retry, stitching under pressure, and the capacity
// rule: what a program can allocate with the pool is at least 99% of what
// it could without, also after freeing everything.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;
using Op = FakeProvider::Op;

namespace {

// Allocates blocks of `bytes` until the pool says no; a Forward is what
// the real driver would then try, emulated by the fake's direct memory.
// Returns the bytes obtained; the blocks are appended to `pool_blocks`.
uint64_t fill_device(PoolUnderTest& t, ThreadCache& cache, uint64_t bytes, std::vector<uint64_t>* pool_blocks,
                     uint64_t* direct_bytes) {
  uint64_t total = 0;
  while (true) {
    uint64_t p = 0;
    const AllocStatus status = t.alloc(cache, bytes, &p);
    if (status == AllocStatus::Ok) {
      pool_blocks->push_back(p);
      total += bytes;
      continue;
    }
    if (status == AllocStatus::Forward && t.provider.take_direct(bytes)) {
      *direct_bytes += bytes;
      total += bytes;
      continue;
    }
    return total;
  }
}

void free_all(PoolUnderTest& t, ThreadCache& cache, std::vector<uint64_t>* blocks, uint64_t* direct_bytes) {
  for (uint64_t p : *blocks) REQUIRE(t.free(cache, p) == FreeStatus::Ok);
  blocks->clear();
  t.provider.give_direct(*direct_bytes);
  *direct_bytes = 0;
}

}  // namespace

TEST_CASE("prewarm maps memory in chunk steps before the first allocation", "[release][prewarm]") {
  PoolUnderTest t(4 * kGiB, FakeProvider::Backing::None, config_with(256 * kMiB, 0, kUnlimited, 1 * kGiB));
  CHECK(t.provider.used_bytes() == 1 * kGiB);
  CHECK(t.provider.calls(Op::Create) == 4);
  CHECK(t.provider.calls(Op::SetAccess) == 4);
  Attached cache(t.pool);
  std::vector<uint64_t> blocks;
  REQUIRE(alloc_blocks(t, *cache, 40, 20 * kMiB, &blocks));
  CHECK(t.pool.stats().growths == 4);  // all from the prewarmed memory
  // Prewarm never exceeds the limit.
  PoolUnderTest limited(4 * kGiB, FakeProvider::Backing::None,
                        config_with(256 * kMiB, 600 * kMiB, kUnlimited, 1 * kGiB));
  CHECK(limited.provider.used_bytes() <= 600 * kMiB);
}

TEST_CASE("the limit caps what the pool holds and answers out-of-memory", "[release][limit]") {
  PoolUnderTest t(4 * kGiB, FakeProvider::Backing::None, config_with(64 * kMiB, 200 * kMiB));
  Attached cache(t.pool);
  std::vector<uint64_t> blocks;
  AllocStatus status = AllocStatus::Ok;
  while (status == AllocStatus::Ok) {
    uint64_t p = 0;
    status = t.alloc(*cache, 7 * kMiB, &p);
    if (status == AllocStatus::Ok) blocks.push_back(p);
    CHECK(t.provider.used_bytes() <= 200 * kMiB);
  }
  CHECK(status == AllocStatus::OutOfMemory);  // never forwarded past the limit
  CHECK(blocks.size() * 8 * kMiB >= 190 * kMiB);
  uint64_t p = 0;
  CHECK(t.alloc(*cache, 300 * kMiB, &p) == AllocStatus::OutOfMemory);
  for (uint64_t b : blocks) REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
  REQUIRE(t.alloc(*cache, 150 * kMiB, &p) == AllocStatus::Ok);  // retired and stitched or coalesced
  CHECK(t.provider.used_bytes() <= 200 * kMiB);
  CHECK(t.pool.check() == "");
}

TEST_CASE("idle memory beyond the release threshold is trimmed, a chunk per step", "[release][threshold]") {
  PoolUnderTest t(4 * kGiB, FakeProvider::Backing::None, config_with(64 * kMiB, 0, 128 * kMiB));
  Attached cache(t.pool);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 32; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 30 * kMiB, &p) == AllocStatus::Ok);
    blocks.push_back(p);
  }
  const uint64_t peak_chunks = t.provider.live_chunks();
  t.clock.advance_ns(kTrimGraceAfterGrowthNs + 1);
  // Frees share the quarantine every 256 MiB: each share may trim one chunk.
  for (uint64_t b : blocks) {
    REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
    t.clock.advance_ns(kTrimIntervalNs + 1);
  }
  const uint64_t after_frees = t.provider.live_chunks();
  CHECK(after_frees < peak_chunks);
  CHECK(t.pool.stats().releases >= 1);
  // More trim steps bring idle memory down to the threshold.
  for (int i = 0; i < 64; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 100, &p) == AllocStatus::Ok);
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    t.clock.advance_ns(kTrimIntervalNs + 1);
  }
  CHECK(t.pool.check() == "");
}

TEST_CASE("no trim right after a growth: a loop that frees and regrows keeps its memory", "[release][threshold]") {
  PoolUnderTest t(4 * kGiB, FakeProvider::Backing::None, config_with(64 * kMiB, 0, 0));
  Attached cache(t.pool);
  for (int round = 0; round < 4; ++round) {
    std::vector<uint64_t> blocks;
    for (int i = 0; i < 16; ++i) {
      uint64_t p = 0;
      REQUIRE(t.alloc(*cache, 30 * kMiB, &p) == AllocStatus::Ok);
      blocks.push_back(p);
    }
    for (uint64_t b : blocks) REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
    t.clock.advance_ns(kTrimIntervalNs + 1);  // steps, but within the grace time
  }
  CHECK(t.pool.stats().releases == 0);
}

TEST_CASE("trim releases all idle memory back to the device", "[release][trim]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::None, config_with(64 * kMiB));
  Attached cache(t.pool);
  std::vector<uint64_t> blocks;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    uint64_t p = 0;
    const uint64_t bytes = (rng() % 3 == 0) ? 1 + rng() % (8 * kMiB) : 1 + rng() % 8192;
    REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
    blocks.push_back(p);
  }
  uint64_t keep = blocks.back();
  blocks.pop_back();
  for (uint64_t b : blocks) REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
  t.pool.trim();
  CHECK(t.provider.used_bytes() <= 64 * kMiB);  // only the chunk holding `keep`
  REQUIRE(t.free(*cache, keep) == FreeStatus::Ok);
  t.pool.trim();
  CHECK(t.provider.used_bytes() == 0);
  CHECK(t.provider.live_maps() == 0);
  CHECK(t.pool.stats().mapped_bytes == 0);
  CHECK(t.provider.violations() == 0);
  // And the pool starts again from nothing.
  uint64_t p = 0;
  REQUIRE(t.alloc(*cache, 5000, &p) == AllocStatus::Ok);
  CHECK(t.pool.check() == "");
}

TEST_CASE("out of memory: idle memory is released and the request retried", "[release][oom]") {
  PoolUnderTest t(256 * kMiB, FakeProvider::Backing::None, config_with(32 * kMiB));
  Attached cache(t.pool);
  // Fill the device with small blocks, free them all (quarantined, cached).
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 100000; ++i) {
    uint64_t p = 0;
    if (t.alloc(*cache, 60000, &p) != AllocStatus::Ok) break;
    blocks.push_back(p);
  }
  CHECK(blocks.size() > 3000);
  for (uint64_t b : blocks) REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
  // Nearly the whole device at once: only possible after everything comes back.
  uint64_t p = 0;
  REQUIRE(t.alloc(*cache, 250 * kMiB, &p) == AllocStatus::Ok);
  CHECK(t.provider.violations() == 0);
  CHECK(t.pool.check() == "");
}

TEST_CASE("scattered idle memory is stitched before the pool grows", "[release][stitch]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::None, config_with(64 * kMiB, 0, kUnlimited, 64 * kMiB));
  Attached cache(t.pool);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 16; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 4 * kMiB, &p) == AllocStatus::Ok);
    blocks.push_back(p);
  }
  for (int i = 0; i < 16; i += 2) REQUIRE(t.free(*cache, blocks[i]) == FreeStatus::Ok);
  t.pool.trim();  // retire: 8 holes of 4 MiB, none adjacent
  const uint64_t mapped = t.pool.stats().mapped_bytes;
  uint64_t p = 0;
  REQUIRE(t.alloc(*cache, 32 * kMiB, &p) == AllocStatus::Ok);
  CHECK(t.pool.stats().stitches == 1);
  CHECK(t.pool.stats().mapped_bytes == mapped);
  CHECK(t.pool.check() == "");
}

TEST_CASE("requests larger than the device go straight to the driver", "[release][forward]") {
  PoolUnderTest t(256 * kMiB, FakeProvider::Backing::None, config_with(32 * kMiB), 256 * kMiB);
  Attached cache(t.pool);
  uint64_t p = 0;
  REQUIRE(t.alloc(*cache, 10 * kMiB, &p) == AllocStatus::Ok);
  const uint64_t mapped = t.pool.stats().mapped_bytes;
  uint64_t q = 0;
  CHECK(t.alloc(*cache, 400 * kGiB, &q) == AllocStatus::Forward);
  CHECK(t.pool.stats().mapped_bytes == mapped);  // nothing thrown away for it
  CHECK(t.pool.stats().passthroughs == 1);
}

TEST_CASE("capacity: at least 99% of the device, also after freeing everything", "[release][capacity]") {
  const uint64_t capacity = 8 * kGiB;
  for (uint64_t chunk : {2 * kMiB, 256 * kMiB}) {
    INFO("chunk " << chunk);
    PoolUnderTest t(capacity, FakeProvider::Backing::None, config_with(chunk));
    Attached cache(t.pool);
    std::vector<uint64_t> blocks;
    uint64_t direct = 0;
    for (uint64_t bytes : {20 * kMiB, 1 * kGiB, 3 * kMiB, 100 * kMiB, 6 * kMiB}) {
      INFO("bytes " << bytes);
      const uint64_t got = fill_device(t, *cache, bytes, &blocks, &direct);
      // Without the pool, the driver would fit floor(capacity / rounded) blocks.
      const uint64_t rounded = granules_ceil(bytes).bytes();
      const uint64_t without = capacity / rounded * bytes;
      CHECK(got * 100 >= without * 99);
      free_all(t, *cache, &blocks, &direct);
    }
    // Mixed sizes after a free-all: still no stranded memory.
    std::mt19937_64 rng(11);
    uint64_t got = 0;
    for (int i = 0; i < 100000; ++i) {
      const uint64_t bytes = (1 + rng() % 64) * kGranuleBytes;
      uint64_t p = 0;
      const AllocStatus status = t.alloc(*cache, bytes, &p);
      if (status == AllocStatus::Ok) {
        blocks.push_back(p);
        got += bytes;
      } else if (status == AllocStatus::Forward && t.provider.take_direct(bytes)) {
        direct += bytes;
        got += bytes;
      } else {
        break;
      }
      // Free every third one, so the layout fragments.
      if (i % 3 == 2) {
        const size_t k = rng() % blocks.size();
        uint64_t b = blocks[k];
        Span* s = t.page_map->lookup(b);
        got -= static_cast<Block*>(s)->requested_bytes.load();
        REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
        blocks.erase(blocks.begin() + long(k));
      }
    }
    CHECK(got + 64 * kGranuleBytes >= capacity * 99 / 100);
    CHECK(t.provider.violations() == 0);
    CHECK(t.pool.check() == "");
  }
}
