// tests/policy/test_device_pool.cpp: the cuMemAlloc/cuMemFree semantics
// of one device's pool: alignment, interior and double frees, address
// ranges and buffer ids, hits and the cost of a steady loop in syncs.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;
using Op = FakeProvider::Op;

TEST_CASE("alignment follows the driver: 512 bytes, 2 MiB from 1 MiB on", "[pool][semantics]") {
  PoolUnderTest t(512 * kMiB, FakeProvider::Backing::None, config_with(64 * kMiB));
  Attached cache(t.pool);
  uint64_t a = 0, b = 0;
  REQUIRE(t.alloc(*cache, 100, &a) == AllocStatus::Ok);
  REQUIRE(t.alloc(*cache, 100, &b) == AllocStatus::Ok);
  CHECK(a % 512 == 0);
  CHECK(b % 512 == 0);
  CHECK(a != b);
  for (uint64_t bytes : {uint64_t(1), uint64_t(511), uint64_t(513), uint64_t(4097), uint64_t(65536),
                         uint64_t(700 * kKiB), kSmallLimitBytes - 1}) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
    CHECK(p % kMinAlignBytes == 0);
  }
  for (uint64_t bytes : {kSmallLimitBytes, 2 * kMiB, 2 * kMiB + 1, 33 * kMiB}) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
    CHECK(p % (2 * kMiB) == 0);
  }
  CHECK(t.pool.check() == "");
}

TEST_CASE("interior pointers and double frees are rejected without damage", "[pool][semantics]") {
  PoolUnderTest t(512 * kMiB, FakeProvider::Backing::None, config_with(64 * kMiB));
  Attached cache(t.pool);
  for (uint64_t bytes : {uint64_t(100), uint64_t(64 * kKiB), 3 * kMiB}) {
    uint64_t p = 0, q = 0;
    REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
    REQUIRE(t.alloc(*cache, bytes, &q) == AllocStatus::Ok);
    CHECK(t.free(*cache, p + 512) == FreeStatus::Invalid);
    CHECK(t.free(*cache, p + 1) == FreeStatus::Invalid);
    CHECK(t.free(*cache, p) == FreeStatus::Ok);
    CHECK(t.free(*cache, p) == FreeStatus::Invalid);  // double free
    CHECK(t.free(*cache, q) == FreeStatus::Ok);
    CHECK(t.free(*cache, q) == FreeStatus::Invalid);
    // The pool still hands out and takes back memory normally.
    uint64_t r = 0;
    REQUIRE(t.alloc(*cache, bytes, &r) == AllocStatus::Ok);
    CHECK(t.free(*cache, r) == FreeStatus::Ok);
  }
  // Addresses the pool never mapped are not pool memory at all.
  CHECK(t.page_map->lookup(0x1000) == nullptr);
  CHECK(t.pool.check() == "");
}

TEST_CASE("address ranges and buffer ids answer per allocation", "[pool][semantics]") {
  PoolUnderTest t(512 * kMiB, FakeProvider::Backing::None, config_with(64 * kMiB));
  Attached cache(t.pool);
  std::set<uint64_t> ids;
  for (uint64_t bytes : {uint64_t(100), uint64_t(5000), uint64_t(200 * kKiB), 1 * kMiB + 3, 9 * kMiB}) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
    RangeInfo info{};
    REQUIRE(t.range(p + bytes / 2, &info));
    CHECK(info.base_addr == p);
    CHECK(info.bytes == bytes);
    CHECK(info.buffer_id >= kBufferIdBase);
    CHECK(ids.insert(info.buffer_id).second);
    RangeInfo again{};
    REQUIRE(t.range(p, &again));
    CHECK(again.buffer_id == info.buffer_id);
    CHECK_FALSE(t.range(p + bytes, &again));  // past the allocation
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    CHECK_FALSE(t.range(p, &again));  // freed
  }
  // Reused memory gets a new id every time.
  for (int i = 0; i < 3000; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 777, &p) == AllocStatus::Ok);
    RangeInfo info{};
    REQUIRE(t.range(p, &info));
    CHECK(ids.insert(info.buffer_id).second);
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  }
}

TEST_CASE("a steady loop of one size hits and syncs once per batch", "[pool][hot]") {
  for (uint64_t bytes : {uint64_t(100), uint64_t(64 * kKiB), 2 * kMiB, 8 * kMiB, 64 * kMiB}) {
    INFO("bytes " << bytes);
    PoolUnderTest t(4 * kGiB, FakeProvider::Backing::None, PoolConfig());
    Attached cache(t.pool);
    constexpr int kPairs = 2000;
    for (int i = 0; i < kPairs; ++i) {
      uint64_t p = 0;
      REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
      REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
    }
    const PoolStats s = t.pool.stats();
    CHECK(s.growths <= 2);
    CHECK(s.hits >= kPairs - 4);
    // One sync per batch: at least 4 pairs per sync even at 64 MiB.
    CHECK(s.synchronizations * 4 <= kPairs);
    if (bytes < kSmallLimitBytes) CHECK(s.synchronizations * 32 <= kPairs);
    CHECK(s.mapped_bytes <= 512 * kMiB);
    CHECK(t.provider.violations() == 0);
  }
}

TEST_CASE("stats add up and have every key", "[pool][stats]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::None, config_with(64 * kMiB));
  Attached cache(t.pool);
  std::vector<uint64_t> live;
  for (int i = 0; i < 50; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, (i % 2) ? 3000 : 3 * kMiB, &p) == AllocStatus::Ok);
    live.push_back(p);
  }
  PoolStats s = t.pool.stats();
  CHECK(s.in_use_bytes == 25 * 3072 + 25 * 4 * kMiB);
  CHECK(s.mapped_bytes >= s.in_use_bytes);
  CHECK(s.idle_bytes == s.mapped_bytes - s.in_use_bytes);
  CHECK(s.peak_in_use_bytes >= s.in_use_bytes);
  CHECK(s.reserved_bytes >= s.mapped_bytes);
  for (uint64_t p : live) REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  s = t.pool.stats();
  CHECK(s.in_use_bytes == 0);
  CHECK(s.quarantined_bytes + s.cached_bytes <= s.idle_bytes);
  const std::string json = stats_json_object(s);
  for (const char* key : {"reserved_bytes", "mapped_bytes", "in_use_bytes", "idle_bytes", "peak_in_use_bytes", "hits",
                          "growths", "stitches", "releases", "synchronizations", "passthroughs"})
    CHECK(json.find(std::string("\"") + key + "\": ") != std::string::npos);
}

std::vector<std::pair<LogLevel, std::string>> g_growth_lines;
void record_growth_line(LogLevel level, const char* message) { g_growth_lines.emplace_back(level, message); }

TEST_CASE("a growth logs at debug where the held memory was; peak_mapped_bytes keeps the most held", "[pool][stats]") {
  g_growth_lines.clear();
  FakeProvider provider(2 * kGiB, FakeProvider::Backing::None);
  FakeClock clock;
  std::unique_ptr<PageMap> page_map(new PageMap());
  DeviceBudget budget(kDefaultHeadroomBytes);  // config_with's limit and headroom
  DevicePool pool(provider, clock, *page_map, PoolUnderTest::settings(config_with(64 * kMiB), 2 * kGiB), budget,
                  record_growth_line);
  {
    Attached cache(pool);
    uint64_t a = 0, b = 0;
    REQUIRE(pool.alloc(*cache, 40 * kMiB, &a) == AllocStatus::Ok);
    // 24 MiB stay free in the first chunk: too short for another 40.
    REQUIRE(pool.alloc(*cache, 40 * kMiB, &b) == AllocStatus::Ok);
    REQUIRE(g_growth_lines.size() == 2);
    for (const auto& l : g_growth_lines) CHECK(l.first == LogLevel::Debug);
    CHECK(g_growth_lines[0].second ==
          "device 0: grew to 64 MiB for a 40 MiB block: it held 0 MiB, of which 0 MiB free in 0 runs (the longest 0 "
          "MiB) and 0 MiB waiting for a sync or cached by threads; 0 syncs so far");
    CHECK(g_growth_lines[1].second ==
          "device 0: grew to 128 MiB for a 40 MiB block: it held 64 MiB, of which 24 MiB free in 1 runs (the longest "
          "24 MiB) and 0 MiB waiting for a sync or cached by threads; 0 syncs so far");
    CHECK(pool.stats().peak_mapped_bytes == 128 * kMiB);
    Span* sa = page_map->lookup(a);
    Span* sb = page_map->lookup(b);
    REQUIRE(pool.free(*cache, sa, a) == FreeStatus::Ok);
    REQUIRE(pool.free(*cache, sb, b) == FreeStatus::Ok);
  }
  pool.trim();
  const PoolStats s = pool.stats();
  CHECK(s.mapped_bytes == 0);
  CHECK(s.peak_mapped_bytes == 128 * kMiB);
  CHECK(stats_json_object(s).find("\"peak_mapped_bytes\": 134217728") != std::string::npos);
  page_map->destroy_leaves_for_tests();
}

TEST_CASE("sizes near 2^64 are left to the driver, never served from idle memory", "[pool][semantics]") {
  for (uint64_t prewarm : {uint64_t(0), 64 * kMiB}) {
    PoolUnderTest t(512 * kMiB, FakeProvider::Backing::None, config_with(64 * kMiB, 0, kUnlimited, prewarm));
    Attached cache(t.pool);
    uint64_t warm = 0;
    REQUIRE(t.alloc(*cache, 3 * kMiB, &warm) == AllocStatus::Ok);
    REQUIRE(t.free(*cache, warm) == FreeStatus::Ok);
    for (uint64_t d : {uint64_t(0), uint64_t(1), kGranuleBytes - 2, kGranuleBytes - 1, kGranuleBytes, 4 * kMiB}) {
      uint64_t p = 0;
      CHECK(t.alloc(*cache, ~uint64_t(0) - d, &p) == AllocStatus::Forward);
      CHECK(p == 0);
    }
    uint64_t q = 0;
    REQUIRE(t.alloc(*cache, 2 * kMiB, &q) == AllocStatus::Ok);
    CHECK(t.pool.check() == "");
  }
}

namespace {

// Every granule covering the allocation at addr is the physical memory the
// export names for it, in order.
void check_export(PoolUnderTest& t, uint64_t addr, uint64_t bytes) {
  Span* span = t.page_map->lookup(addr);
  REQUIRE(span);
  DevicePool::Export e;
  REQUIRE(t.pool.export_of(span, addr + bytes / 2, &e));
  CHECK(e.range.base_addr == addr);
  CHECK(e.range.bytes == bytes);
  CHECK(e.first_granule_addr == (addr & ~(kGranuleBytes - 1)));
  uint64_t at = e.first_granule_addr;
  for (const PhysicalPiece& piece : e.pieces) {
    for (uint64_t g = 0; g < piece.granules.count(); ++g, at += kGranuleBytes) {
      ChunkHandle chunk;
      Granules offset;
      REQUIRE(t.provider.physical_at(at, &chunk, &offset));
      CHECK(chunk.value == piece.chunk.value);
      CHECK(offset.count() == piece.offset.count() + g);
      CHECK(piece.offset + piece.granules <= piece.chunk_granules);
    }
  }
  CHECK(at >= addr + bytes);
  CHECK(at - (addr + bytes) < kGranuleBytes);
}

}  // namespace

TEST_CASE("an export names the physical memory of home, slab and stitched blocks", "[pool][ipc]") {
  PoolUnderTest t(256 * kMiB, FakeProvider::Backing::None, config_with(8 * kMiB));
  Attached cache(t.pool);
  std::vector<uint64_t> sizes = {100, 5000, 700 * kKiB, 2 * kMiB, 3 * kMiB + 7, 20 * kMiB, 33 * kMiB};
  for (uint64_t bytes : sizes) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, bytes, &p) == AllocStatus::Ok);
    check_export(t, p, bytes);
  }
  // Fragment the arena so that a large request is stitched together.
  std::vector<uint64_t> ones;
  REQUIRE(alloc_blocks(t, *cache, 24, 2 * kMiB, &ones));
  for (size_t i = 0; i < ones.size(); i += 2) REQUIRE(t.free(*cache, ones[i]) == FreeStatus::Ok);
  t.pool.trim();
  uint64_t before = t.pool.stats().stitches;
  uint64_t big = 0;
  REQUIRE(t.alloc(*cache, 16 * kMiB, &big) == AllocStatus::Ok);
  check_export(t, big, 16 * kMiB);
  INFO("stitches before " << before << " after " << t.pool.stats().stitches);
  // Freed memory is in no live allocation: nothing to export.
  REQUIRE(t.free(*cache, big) == FreeStatus::Ok);
  DevicePool::Export e;
  Span* span = t.page_map->lookup(big);
  CHECK_FALSE((span && t.pool.export_of(span, big, &e)));
}

TEST_CASE("blocks_of_context names the live blocks of one context, small and large", "[pool][semantics]") {
  PoolUnderTest t(512 * kMiB, FakeProvider::Backing::None, config_with(64 * kMiB));
  Attached cache(t.pool);
  std::set<uint64_t> mine, theirs;
  for (uint64_t bytes : {uint64_t(100), uint64_t(64 * kKiB), 3 * kMiB, 70 * kMiB}) {
    for (int i = 0; i < 3; ++i) {
      uint64_t p = 0, q = 0;
      REQUIRE(t.pool.alloc(*cache, bytes, &p, 7) == AllocStatus::Ok);
      REQUIRE(t.pool.alloc(*cache, bytes, &q, 8) == AllocStatus::Ok);
      mine.insert(p);
      theirs.insert(q);
    }
  }
  // A freed block is no longer the context's.
  const uint64_t freed = *mine.begin();
  REQUIRE(t.free(*cache, freed) == FreeStatus::Ok);
  mine.erase(freed);
  std::vector<uint64_t> found;
  REQUIRE(t.pool.blocks_of_context(7, &found));
  CHECK(std::set<uint64_t>(found.begin(), found.end()) == mine);
  CHECK(found.size() == mine.size());
  // Untagged blocks are nobody's; an unknown tag has none.
  found.clear();
  REQUIRE(t.pool.blocks_of_context(kNoContextTag, &found));
  CHECK(found.empty());
  REQUIRE(t.pool.blocks_of_context(9, &found));
  CHECK(found.empty());
  for (uint64_t p : mine) CHECK(t.free(*cache, p) == FreeStatus::Ok);
  REQUIRE(t.pool.blocks_of_context(7, &found));
  CHECK(found.empty());
  CHECK(t.pool.check() == "");
}

TEST_CASE("a block marked exported is left to the caller by the free's hit, the others are not", "[pool][semantics]") {
  // DevicePool::mark_exported (CUDA IPC's export records, interpose/ipc):
  // free_step with exported_aside answers Exported for a marked block and
  // changes nothing; the pool's own free (the slow path, after IPC
  // decided) frees it as any other; an unmarked block is a hit either way.
  PoolUnderTest t(512 * kMiB, FakeProvider::Backing::None, config_with(64 * kMiB));
  Attached cache(t.pool);
  // free_step with its second step where it asks for one (DevicePool::free).
  auto hit = [&](uint64_t addr) {
    Span* span = t.page_map->lookup(addr);
    const DevicePool::FreeStep step = t.pool.free_step(*cache, span, addr, true);
    if (step == DevicePool::FreeStep::Seal || step == DevicePool::FreeStep::Push)
      t.pool.free_finish(step, *cache, span, addr);
    return step;
  };
  for (uint64_t bytes : {uint64_t(1000), uint64_t(64 * kKiB), 3 * kMiB}) {
    uint64_t marked = 0, other = 0;
    REQUIRE(t.alloc(*cache, bytes, &marked) == AllocStatus::Ok);
    REQUIRE(t.alloc(*cache, bytes, &other) == AllocStatus::Ok);
    Span* span = t.page_map->lookup(marked);
    REQUIRE(span != nullptr);
    DevicePool::mark_exported(span, marked + 512, true);  // no block starts there: ignored
    const DevicePool::FreeStep first_step = hit(marked);
    CHECK((first_step != DevicePool::FreeStep::Exported && first_step != DevicePool::FreeStep::Invalid));
    REQUIRE(t.alloc(*cache, bytes, &marked) == AllocStatus::Ok);
    span = t.page_map->lookup(marked);
    DevicePool::mark_exported(span, marked, true);
    CHECK(hit(marked) == DevicePool::FreeStep::Exported);
    RangeInfo range{};
    CHECK(DevicePool::range_of(span, marked, &range));  // still live
    CHECK(range.base_addr == marked);
    const DevicePool::FreeStep other_step = hit(other);
    CHECK((other_step != DevicePool::FreeStep::Exported && other_step != DevicePool::FreeStep::Invalid));
    // The slow path's free: the pool frees the marked block as any other.
    CHECK(t.free(*cache, marked) == FreeStatus::Ok);
    CHECK(t.free(*cache, marked) == FreeStatus::Invalid);
    // Its mark taken off (as IPC does when it drops the export), a block
    // at that address is a hit again.
    DevicePool::mark_exported(span, marked, false);
    uint64_t again = 0;
    REQUIRE(t.alloc(*cache, bytes, &again) == AllocStatus::Ok);
    const DevicePool::FreeStep again_step = hit(again);
    CHECK((again_step != DevicePool::FreeStep::Exported && again_step != DevicePool::FreeStep::Invalid));
  }
  CHECK(t.pool.check() == "");
}
