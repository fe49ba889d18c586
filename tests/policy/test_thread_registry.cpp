// tests/policy/test_thread_registry.cpp: ThreadRegistry alone (policy/
// thread_registry.h): caches attached, recycled and walked, the folded
// counters, the peak, and the figures the stats and the report read.
#include <catch2/catch.hpp>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

TEST_CASE("thread registry: a detached cache's record serves the next attach") {
  RegistryUnderTest t;
  ThreadRegistry& registry = t.registry;
  ThreadCache* a = registry.attach(true);
  ThreadCache* b = registry.attach(true);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a != b);
  CHECK(a->quarantine != nullptr);
  int attached = 0;
  registry.for_each([&](ThreadCache&) { ++attached; });
  CHECK(attached == 2);
  registry.detach(a);
  attached = 0;
  registry.for_each([&](ThreadCache&) { ++attached; });
  CHECK(attached == 1);
  CHECK(registry.attach(true) == a);
  registry.detach(a);
  registry.detach(b);
}

TEST_CASE("thread registry: in use, hits and freed bytes survive folds and detaches") {
  RegistryUnderTest t;
  ThreadRegistry& registry = t.registry;
  ThreadCache* cache = registry.attach(true);
  REQUIRE(cache);
  owner_add(cache->in_use_delta, 3 * kMiB);
  owner_add(cache->hits, 5);
  owner_add(cache->freed_bytes, kMiB);
  owner_add(cache->cached_bytes, 2 * kMiB);
  CHECK(registry.in_use_bytes() == 3 * kMiB);
  registry.fold(*cache);
  CHECK(cache->in_use_delta.load() == 0);
  CHECK(registry.in_use_bytes() == 3 * kMiB);
  // A free on another thread makes one cache's delta "negative".
  owner_add(cache->in_use_delta, uint64_t(0) - kMiB);
  CHECK(registry.in_use_bytes() == 2 * kMiB);
  CHECK(registry.peak_in_use_bytes() == 3 * kMiB);
  uint64_t freed = 0, reclaimable = 0;
  registry.waiting(&freed, &reclaimable);
  CHECK(freed == kMiB);
  CHECK(reclaimable == 2 * kMiB);
  PoolStats stats;
  registry.read_figures(&stats);
  CHECK(stats.in_use_bytes == 2 * kMiB);
  CHECK(stats.hits == 5);
  CHECK(stats.cached_bytes == 2 * kMiB);
  owner_add(cache->cached_bytes, uint64_t(0) - 2 * kMiB);
  registry.fold(*cache);
  registry.detach(cache);
  registry.waiting(&freed, &reclaimable);
  CHECK(freed == kMiB);  // the detached cache's total, folded
  CHECK(reclaimable == 0);
  CHECK(registry.in_use_bytes() == 2 * kMiB);
}

TEST_CASE("thread registry: the report's bin counts skip a busy cache") {
  RegistryUnderTest t;
  ThreadRegistry& registry = t.registry;
  ThreadCache* a = registry.attach(true);
  ThreadCache* b = registry.attach(true);
  a->bins[3].count = 2;
  b->bins[3].count = 5;
  uint64_t in_bins[kClassCount] = {};
  CHECK(registry.count_bins(in_bins));
  CHECK(in_bins[3] == 7);
  b->lock.lock();
  uint64_t partial[kClassCount] = {};
  CHECK_FALSE(registry.count_bins(partial));
  CHECK(partial[3] == 2);
  b->lock.unlock();
  a->bins[3].count = 0;
  b->bins[3].count = 0;
  registry.detach(a);
  registry.detach(b);
}

TEST_CASE("thread registry: buffer ids come in ranges, never reused") {
  ThreadCache a, b;
  const uint64_t first = next_buffer_id(a);
  const uint64_t other = next_buffer_id(b);
  CHECK(first >= kBufferIdBase);
  CHECK(other >= first + kBufferIdBatch);
  CHECK(next_buffer_id(a) == first + 1);
}
