// tests/policy/test_full_device.cpp: a full device's use of the size
// classes' idle memory (policy/device_pool_borrow.cpp, docs/POOL.md "Out of
// memory"): a small request takes a larger class's free block, a larger
// request takes the free tails of slabs.
#include <catch2/catch.hpp>

#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

// One chunk holds the whole device, so every free granule can serve any
// request (no big chunk kept apart for requests over a chunk).
constexpr uint64_t kDeviceBytes = 16 * kMiB;

// Large blocks of one granule until the pool answers anything but Ok.
std::vector<uint64_t> fill_with_granules(PoolUnderTest& t, ThreadCache& cache) {
  std::vector<uint64_t> blocks;
  uint64_t p = 0;
  while (t.alloc(cache, kGranuleBytes, &p) == AllocStatus::Ok) blocks.push_back(p);
  return blocks;
}

// The first class whose geometry spans at least two granules and holds
// few blocks a granule, so a test fills its first slab quickly.
int class_with_two_granule_slabs() {
  for (int c = 0; c < kClassCount; ++c)
    if (kSizeClasses[c].slab_granules >= 2 && kSizeClasses[c].block_bytes >= 64 * kKiB) return c;
  return -1;
}

}  // namespace

TEST_CASE("a full device serves a small request from a larger class's free block", "[pool][oom]") {
  PoolUnderTest t(kDeviceBytes, FakeProvider::Backing::None, config_with(kDeviceBytes));
  Attached cache(t.pool);
  // One block of a class near 1 MiB: its one-granule slab has free blocks
  // that only its class could use before.
  const uint64_t lender_bytes = 600 * kKiB;
  const int lender = class_of(lender_bytes);
  REQUIRE(kGranuleBytes / kSizeClasses[lender].block_bytes >= 2);
  uint64_t first = 0;
  REQUIRE(t.alloc(*cache, lender_bytes, &first) == AllocStatus::Ok);
  std::vector<uint64_t> large = fill_with_granules(t, *cache);
  REQUIRE(large.size() == kDeviceBytes / kGranuleBytes - 1);
  const PoolStats before = t.pool.stats();
  const OomRecord oom_before = t.pool.report().last_oom;  // the granule the fill was refused
  REQUIRE(oom_before.request_bytes == kGranuleBytes);

  // No granule for a slab of 1000-byte blocks: a free 600 KiB block serves.
  uint64_t small = 0;
  REQUIRE(t.alloc(*cache, 1000, &small) == AllocStatus::Ok);
  Span* span = t.page_map->lookup(small);
  REQUIRE(span == t.page_map->lookup(first));  // the lender's slab
  RangeInfo range{};
  REQUIRE(t.range(small, &range));
  CHECK(range.base_addr == small);
  CHECK(range.bytes == 1000);  // what was asked for, as the driver answers
  CHECK(t.range(small + 1000 - 1, &range));
  // Not counted as refused nor handed to the driver.
  CHECK(t.pool.stats().ooms == before.ooms);
  CHECK(t.pool.stats().passthroughs == before.passthroughs);
  // The memory report's last out-of-memory answer is still the fill's.
  CHECK(t.pool.report().last_oom.count == oom_before.count);
  CHECK(t.pool.report().last_oom.request_bytes == kGranuleBytes);

  // Freed, it goes back to its slab's class: the lender's requests use it.
  CHECK(t.free(*cache, small) == FreeStatus::Ok);
  CHECK(t.free(*cache, small) == FreeStatus::Invalid);
  t.pool.trim();
  std::vector<uint64_t> lent_back;
  uint64_t p = 0;
  while (t.alloc(*cache, lender_bytes, &p) == AllocStatus::Ok) lent_back.push_back(p);
  CHECK(lent_back.size() == kGranuleBytes / kSizeClasses[lender].block_bytes - 1);
  for (uint64_t b : lent_back) CHECK(t.free(*cache, b) == FreeStatus::Ok);
  for (uint64_t b : large) CHECK(t.free(*cache, b) == FreeStatus::Ok);
  CHECK(t.free(*cache, first) == FreeStatus::Ok);
  CHECK(t.pool.check() == "");
}

TEST_CASE("a full device with no larger free block still answers out of memory", "[pool][oom]") {
  PoolUnderTest t(kDeviceBytes, FakeProvider::Backing::None, config_with(kDeviceBytes, kDeviceBytes));
  Attached cache(t.pool);
  // A slab of 1000-byte blocks only: a 600 KiB request has no larger class
  // with a free block, and the limit keeps the driver out of it.
  uint64_t small = 0;
  REQUIRE(t.alloc(*cache, 1000, &small) == AllocStatus::Ok);
  std::vector<uint64_t> large = fill_with_granules(t, *cache);
  uint64_t p = 0;
  CHECK(t.alloc(*cache, 600 * kKiB, &p) == AllocStatus::OutOfMemory);
  CHECK(t.alloc(*cache, 1000, &p) == AllocStatus::Ok);  // its own class still serves
  CHECK(t.free(*cache, p) == FreeStatus::Ok);
  for (uint64_t b : large) CHECK(t.free(*cache, b) == FreeStatus::Ok);
  CHECK(t.free(*cache, small) == FreeStatus::Ok);
  CHECK(t.pool.check() == "");
}

TEST_CASE("a full device gives the free tails of slabs to a larger request", "[pool][oom]") {
  const int c = class_with_two_granule_slabs();
  REQUIRE(c >= 0);
  const uint64_t block_bytes = kSizeClasses[c].block_bytes;
  const uint64_t first_slab_blocks = kGranuleBytes / block_bytes;
  PoolUnderTest t(kDeviceBytes, FakeProvider::Backing::None, config_with(kDeviceBytes));
  Attached cache(t.pool);
  // The first slab (one granule) full, one block in the second (two
  // granules): its second granule holds no block.
  std::vector<uint64_t> small;
  uint64_t p = 0;
  for (uint64_t i = 0; i < first_slab_blocks + 1; ++i) {
    REQUIRE(t.alloc(*cache, block_bytes, &p) == AllocStatus::Ok);
    small.push_back(p);
  }
  std::vector<uint64_t> large = fill_with_granules(t, *cache);
  // The pool refused a granule only after the tail came back: the device
  // less the first slab and the second slab's first granule.
  CHECK(large.size() == kDeviceBytes / kGranuleBytes - 2);
  // The slab's blocks still free and serve as before.
  CHECK(t.free(*cache, small.back()) == FreeStatus::Ok);
  small.pop_back();
  REQUIRE(t.alloc(*cache, block_bytes, &p) == AllocStatus::Ok);
  small.push_back(p);
  for (uint64_t b : small) CHECK(t.free(*cache, b) == FreeStatus::Ok);
  for (uint64_t b : large) CHECK(t.free(*cache, b) == FreeStatus::Ok);
  t.pool.trim();
  CHECK(t.pool.check() == "");
  // Everything idle again: the whole device serves one request.
  REQUIRE(t.alloc(*cache, kDeviceBytes, &p) == AllocStatus::Ok);
  CHECK(t.free(*cache, p) == FreeStatus::Ok);
}
