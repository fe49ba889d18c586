// tests/policy/harness.h: a DevicePool on a FakeProvider with a FakeClock
// and a private page map, plus the helpers every policy test uses. One
// constructor for every configuration the conformance suite runs.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "policy/arena.h"
#include "policy/clock.h"
#include "policy/device_pool.h"
#include "policy/fake_provider.h"

namespace pagefast::policy::test {

// An Arena alone on a FakeProvider, with a private page map, 64-granule
// ranges and the given chunk in granules. A limit (granules; 0: none) is
// the ceiling grow() passes, as LargeBlocks passes the budget's.
struct ArenaUnderTest {
  explicit ArenaUnderTest(uint64_t chunk_granules, uint64_t limit_granules = 0, uint64_t capacity = 256 * kMiB,
                          FakeProvider::Backing backing = FakeProvider::Backing::None, bool big_chunks = false)
      : provider(capacity, backing),
        page_map(new PageMap()),
        arena(provider, *page_map, nullptr, settings(chunk_granules, big_chunks)),
        ceiling(limit_granules ? Granules(limit_granules) : kNoLimitGranules) {}
  ~ArenaUnderTest() { page_map->destroy_leaves_for_tests(); }
  static ArenaSettings settings(uint64_t chunk, bool big_chunks = false) {
    ArenaSettings s;
    s.chunk_granules = Granules(chunk);
    s.big_chunks = big_chunks;
    s.range_bytes = 64 * kGranuleBytes;
    return s;
  }
  ProviderStatus grow(Granules min_granules) {
    return arena.grow(min_granules, Granules(UINT64_MAX >> kGranuleShift), ceiling);
  }
  FakeProvider provider;
  std::unique_ptr<PageMap> page_map;
  Arena arena;
  const Granules ceiling;
};

// Two chunks of two granules; one granule of each lent to a stitch, the
// other given back free. Returns the stitch (in use): both chunks are
// pinned by it until it is given back and dissolved.
inline Block* stitch_across_two_chunks(ArenaUnderTest& t) {
  for (int i = 0; i < 2; ++i)
    if (t.arena.grow(Granules(1)) != ProviderStatus::Ok) return nullptr;
  Block* a = t.arena.take(Granules(1));
  Block* b = t.arena.take(Granules(1));
  Block* c = t.arena.take(Granules(1));
  Block* d = t.arena.take(Granules(1));
  if (!a || !b || !c || !d) return nullptr;
  t.arena.put_back(a);
  t.arena.put_back(c);
  Block* s = t.arena.stitch(Granules(2));
  t.arena.put_back(b);
  t.arena.put_back(d);
  return s;
}

// DevicePool's parts wired as DevicePool wires them, without the pool
// (owner NULL), for tests of one part alone: the others stand in as its
// injected side effects, on the fake provider and clock.
struct PartsUnderTest {
  explicit PartsUnderTest(const PoolConfig& config, uint64_t capacity_bytes = 256 * kMiB)
      : provider(capacity_bytes, FakeProvider::Backing::None),
        page_map(new PageMap()),
        settings(make_settings(config, capacity_bytes)),
        budget(config.headroom_bytes, config.limit_bytes),
        large(provider, clock, *page_map, nullptr, settings, budget, nullptr),
        small(large, *page_map, nullptr),
        quarantine(provider, clock),
        registry(quarantine, nullptr),
        gate(quarantine, clock, registry, small, large, settings) {}
  ~PartsUnderTest() { page_map->destroy_leaves_for_tests(); }
  static PoolSettings make_settings(const PoolConfig& config, uint64_t device_total_bytes) {
    PoolSettings s;
    s.config = config;
    s.device_total_bytes = device_total_bytes;
    return s;
  }
  // A free as DevicePool::free makes it, for a block that is Used: its
  // entry goes into the cache's batch. false if it was not Used.
  bool quarantine_block(ThreadCache& cache, Block* block) {
    if (!block->quarantine_if_used()) return false;
    QuarantineBatch* q = cache.quarantine;
    q->entries[q->count++] = QuarantineEntry{block, 0, quarantine.stamp()};
    q->bytes += block->granules().bytes();
    owner_add(cache.quarantined_bytes, block->granules().bytes());
    owner_add(cache.freed_bytes, block->granules().bytes());
    return true;
  }

  FakeProvider provider;
  FakeClock clock;
  std::unique_ptr<PageMap> page_map;
  const PoolSettings settings;
  DeviceBudget budget;  // the limit and the headroom, as the device's budget keeps them
  LargeBlocks large;
  SmallBlocks small;
  Quarantine quarantine;
  ThreadRegistry registry;
  SyncGate gate;
};

// A thread registry alone over its quarantine, on a provider without
// backing (test_thread_registry.cpp, test_owner_lock.cpp).
struct RegistryUnderTest {
  FakeProvider provider{64 * kMiB, FakeProvider::Backing::None};
  FakeClock clock;
  Quarantine quarantine{provider, clock};
  ThreadRegistry registry{quarantine, nullptr};
};

struct PoolUnderTest {
  // reports_free: the provider tells its free memory from the start (the
  // headroom applies to prewarm too).
  PoolUnderTest(uint64_t capacity_bytes, FakeProvider::Backing backing, const PoolConfig& config,
                uint64_t device_total_bytes = 0, bool reports_free = false)
      : provider(capacity_bytes, backing),
        page_map(new PageMap()),
        budget(config.headroom_bytes, config.limit_bytes),
        pool(provider, clock, *page_map, settings(config, device_total_bytes ? device_total_bytes : capacity_bytes),
             budget, nullptr) {
    provider.set_reports_free(reports_free);
    pool.prewarm();
  }
  ~PoolUnderTest() { page_map->destroy_leaves_for_tests(); }

  static PoolSettings settings(const PoolConfig& config, uint64_t device_total_bytes) {
    PoolSettings s;
    s.config = config;
    s.device_total_bytes = device_total_bytes;
    s.device = 0;
    return s;
  }

  // Allocation as try_alloc does it: Ok with an address, or the status.
  AllocStatus alloc(ThreadCache& cache, uint64_t bytes, uint64_t* addr) { return pool.alloc(cache, bytes, addr); }
  FreeStatus free(ThreadCache& cache, uint64_t addr) {
    Span* span = page_map->lookup(addr);
    if (!span) return FreeStatus::Invalid;  // not pool memory: the driver would say INVALID_VALUE
    return pool.free(cache, span, addr);
  }
  bool range(uint64_t addr, RangeInfo* info) {
    Span* span = page_map->lookup(addr);
    return span && DevicePool::range_of(span, addr, info);
  }

  FakeProvider provider;
  FakeClock clock;
  std::unique_ptr<PageMap> page_map;
  DeviceBudget budget;  // the limit and the headroom (not joined: no other holder to ask)
  DevicePool pool;
};

// A thread cache released when the scope ends.
struct Attached {
  explicit Attached(DevicePool& p) : pool(p), cache(p.attach_own_thread()) {}
  ~Attached() {
    if (cache) pool.detach_thread(cache);
  }
  ThreadCache& operator*() { return *cache; }
  DevicePool& pool;
  ThreadCache* cache;
};

// Appends n blocks of `bytes` from the cache to *out, in allocation
// order; false (and no more) at the first allocation that fails.
inline bool alloc_blocks(PoolUnderTest& t, ThreadCache& cache, int n, uint64_t bytes, std::vector<uint64_t>* out) {
  for (int i = 0; i < n; ++i) {
    uint64_t p = 0;
    if (t.alloc(cache, bytes, &p) != AllocStatus::Ok) return false;
    out->push_back(p);
  }
  return true;
}

inline PoolConfig config_with(uint64_t chunk_bytes, uint64_t limit_bytes = 0, uint64_t release_threshold = kUnlimited,
                              uint64_t prewarm_bytes = 0) {
  PoolConfig c;
  c.chunk_bytes = chunk_bytes;
  c.limit_bytes = limit_bytes;
  c.release_threshold_bytes = release_threshold;
  c.prewarm_bytes = prewarm_bytes;
  return c;
}

// Fill and check patterns that depend on address and a seed, so a block
// that aliases another, or is handed out twice, is caught. Large blocks
// are sampled: both ends and one page in every granule.
constexpr uint64_t kSampleBytes = 4096;
constexpr uint64_t kFullFillLimit = 64 * kKiB;

inline uint64_t pattern_word(uint64_t addr, uint64_t seed) { return (addr * 0x9E3779B97F4A7C15ull) ^ seed; }
// The byte at any address is that byte of the word pattern of its aligned
// word (little-endian), so overlapping samples always agree.
inline uint8_t pattern_byte(uint64_t addr, uint64_t seed) {
  return uint8_t(pattern_word(addr & ~uint64_t(7), seed) >> (8 * (addr & 7)));
}

template <typename Visit>
void for_each_sample(uint64_t addr, uint64_t bytes, Visit visit) {
  if (bytes <= kFullFillLimit) {
    visit(addr, bytes);
    return;
  }
  visit(addr, kSampleBytes);
  for (uint64_t g = (addr / kGranuleBytes + 1) * kGranuleBytes; g + kSampleBytes < addr + bytes; g += kGranuleBytes)
    visit(g, kSampleBytes);
  visit(addr + bytes - kSampleBytes, kSampleBytes);
}

// Calls word(a) for each aligned word and byte(a) for the bytes around.
template <typename Word, typename Byte>
void for_each_unit(uint64_t at, uint64_t n, Word word, Byte byte) {
  uint64_t a = at;
  const uint64_t end = at + n;
  for (; a < end && (a & 7); ++a) byte(a);
  for (; a + 8 <= end; a += 8) word(a);
  for (; a < end; ++a) byte(a);
}

inline void fill(uint64_t addr, uint64_t bytes, uint64_t seed) {
  for_each_sample(addr, bytes, [&](uint64_t at, uint64_t n) {
    for_each_unit(
        at, n, [&](uint64_t a) { *reinterpret_cast<uint64_t*>(a) = pattern_word(a, seed); },
        [&](uint64_t a) { *reinterpret_cast<uint8_t*>(a) = pattern_byte(a, seed); });
  });
}

inline bool check(uint64_t addr, uint64_t bytes, uint64_t seed);

// A live block a test filled with fill(addr, bytes, seed).
struct Live {
  uint64_t addr;
  uint64_t bytes;
  uint64_t seed;
};

// Every block still holds its pattern.
inline bool all_intact(const std::vector<Live>& live) {
  for (const Live& l : live)
    if (!check(l.addr, l.bytes, l.seed)) return false;
  return true;
}

inline bool check(uint64_t addr, uint64_t bytes, uint64_t seed) {
  bool ok = true;
  for_each_sample(addr, bytes, [&](uint64_t at, uint64_t n) {
    for_each_unit(
        at, n, [&](uint64_t a) { ok &= *reinterpret_cast<const uint64_t*>(a) == pattern_word(a, seed); },
        [&](uint64_t a) { ok &= *reinterpret_cast<const uint8_t*>(a) == pattern_byte(a, seed); });
  });
  return ok;
}

}  // namespace pagefast::policy::test
