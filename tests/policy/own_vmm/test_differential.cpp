// tests/policy/own_vmm/test_differential.cpp: the own-VMM cache against the fake
// driver alone. The differential case runs the same random program
// against the fake directly and through the cache, and requires the same
// answer to every call and, after every call, the program's view (what it
// mapped where, with which access) present in the fake; the PyTorch-shaped
// cases run two expandable segments with growth ahead.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/policy/own_vmm/fakes.h"

using namespace own_vmm_test;

// The same random program straight on the fake and through the cache: the
// same answers, and the program's mappings present with their access.
TEST_CASE("own vmm: differential against the driver, random programs") {
  constexpr int kSlots = 6, kPositions = 8;
  constexpr uint64_t kUnit = 2 << 20;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    FakeDriver direct_fake, cached_fake;
    Cache cache(cached_fake, 2, 1, seed % 2 ? 4 : 0);
    cache.note_reserved(kBase, uint64_t(kPositions) * 2 * kUnit);
    FakeRoom small(3 * kUnit);
    if (seed % 5 == 0) cache.join(0, &small);  // a small cache: releases go through too
    Program direct{direct_fake, nullptr}, cached{cached_fake, &cache};
    uint64_t handle[2][kSlots] = {};
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
    for (int step = 0; step < 300; ++step) {
      const int op = pick(8);
      const int slot = pick(kSlots);
      const uint64_t addr = kBase + uint64_t(pick(kPositions)) * 2 * kUnit;
      const uint64_t bytes = (1 + pick(2)) * kUnit;
      const uint64_t offset = uint64_t(pick(2)) * kUnit;
      // One device, or the device and a peer, in one call ("r": the device, "p": a peer).
      const std::string descs = std::string(pick(3) ? "rw" : "ro") + (pick(4) ? "" : pick(2) ? "pw" : "po");
      int r[2] = {0, 0};
      for (int m = 0; m < 2; ++m) {
        Program& p = m ? cached : direct;
        uint64_t& h = handle[m][slot];
        switch (op) {
          case 0:
            if (h) break;
            r[m] = p.create(bytes, slot % 2 ? "a" : "b", &h);
            if (r[m] != kOk) h = 0;
            break;
          case 1:
            if (!h) break;
            r[m] = p.release(h);
            h = 0;
            break;
          case 2:
            if (!h) break;
            r[m] = p.map(addr, kUnit, offset, h);
            break;
          case 3: r[m] = p.unmap(addr, bytes); break;
          case 4: r[m] = p.access(addr, bytes, descs); break;
          case 5: r[m] = p.address_free(addr, bytes); break;
          case 6: {
            if (h) break;
            uint64_t got = 0;
            r[m] = p.retain(addr + 4096, &got);
            if (r[m] == kOk) h = got;
            break;
          }
          case 7:
            if (m) cache.before_query(addr);
            break;
        }
      }
      INFO("seed " << seed << " step " << step << " op " << op);
      REQUIRE(r[0] == r[1]);
      REQUIRE(cache.deferred_counts_consistent());
    }
    // Through the cache, each of the program's live mappings is the fake's.
    for (auto& [a, m] : direct_fake.maps) {
      REQUIRE(cached_fake.maps.count(a) == 1);
      CHECK(cached_fake.maps[a].bytes == m.bytes);
      CHECK(cached_fake.maps[a].offset == m.offset);
      // Revived mappings may be open where the driver's fresh ones are not
      // yet; every access the program set is there.
      for (auto& [location, flags] : m.access) CHECK(cached_fake.maps[a].access[location] == flags);
    }
    // Everything given back, nothing stays behind.
    for (int s = 0; s < kSlots; ++s)
      if (handle[1][s]) cached.release(handle[1][s]);
    for (auto& [a, m] : std::map<uint64_t, FakeMap>(cached_fake.maps)) cached.unmap(a, m.bytes);
    cache.trim(0, UINT64_MAX);
    CHECK(cached_fake.maps.empty());
    CHECK(cached_fake.handles.empty());
  }
}

namespace {

// PyTorch's expandable segment (CUDACachingAllocator.cpp, ExpandableSegment):
// map() creates the handles of a run of unmapped pages first, then maps
// each, then opens the whole run with ONE access call; unmap() unmaps and
// releases page by page; empty_cache unmaps everything and frees the
// range, and the next allocation reserves one of the same size again.
struct TorchSegment {
  uint64_t base = 0, page = 0, reserved = 0;
  std::vector<uint64_t> handles;  // per page, 0 when unmapped
};

}  // namespace

namespace {

// PyTorch's two segments through the cache with growth ahead, `seeds`
// random programs. The worker runs on the test's thread between the
// program's calls (deterministic), or on a thread of its own (`threaded`:
// its pages finish while the program's calls run, as in the glue).
void torch_segments(uint32_t seeds, bool threaded) {
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    FakeDriver fake;
    WorkerDriver driver(fake);
    Cache cache(driver, 2, 1, 8, true);
    WorkerProgram p{driver, cache};
    std::optional<Worker> worker;
    if (threaded) worker.emplace(cache);
    auto work = [&] {
      if (!threaded) cache.work_one();
    };
    std::mt19937 rng(seed);
    auto pick = [&](uint32_t n) { return rng() % n; };
    // A large-pool segment of 20 MiB pages and a small-pool one of 2 MiB
    // pages, both of the same properties, as PyTorch has.
    TorchSegment segs[2];
    segs[0].page = kSeg;
    segs[1].page = 2 << 20;
    for (int s = 0; s < 2; ++s) {
      segs[s].handles.assign(24, 0);
      segs[s].reserved = segs[s].page * 24;
      segs[s].base = kBase + uint64_t(s) * (uint64_t(1) << 36);
      cache.note_reserved(segs[s].base, segs[s].reserved);
    }
    for (int step = 0; step < 120; ++step) {
      TorchSegment& g = segs[pick(2)];
      const size_t n = g.handles.size();
      const uint32_t op = pick(10);
      INFO("seed " << seed << " step " << step << " op " << op << " page " << g.page);
      if (op < 6) {
        // Map a run of unmapped pages: the first unmapped page onwards
        // (growth at the end), or a hole an unmap left.
        size_t b = op < 4 ? 0 : pick(uint32_t(n));
        while (b < n && g.handles[b]) ++b;
        size_t e = b;
        const size_t want = 1 + pick(4);
        while (e < n && e - b < want && !g.handles[e]) ++e;
        if (b == e) continue;
        std::vector<uint64_t> made(e - b);
        for (auto& h : made) {
          // The worker (on this thread) has made every page queued: a
          // create waits for a page nobody is making (a second, here).
          while (!threaded && cache.work_one()) {
          }
          REQUIRE(p.create(g.page, kProp, &h) == kOk);
        }
        for (size_t i = b; i < e; ++i) {
          REQUIRE(cache.map(g.base + i * g.page, g.page, 0, made[i - b], 0) == kOk);
          g.handles[i] = made[i - b];
          if (pick(3) == 0) work();  // the worker between the program's maps
        }
        REQUIRE(cache.set_access(g.base + b * g.page, (e - b) * g.page, kRW) == kOk);
      } else if (op < 9) {
        // Unmap a run of mapped pages, page by page, each released.
        size_t b = pick(uint32_t(n));
        while (b < n && !g.handles[b]) ++b;
        for (size_t i = b; i < n && i < b + 1 + pick(4) && g.handles[i]; ++i) {
          REQUIRE(cache.unmap(g.base + i * g.page, g.page) == kOk);
          REQUIRE(cache.release(g.handles[i]) == kOk);
          g.handles[i] = 0;
        }
      } else {
        // empty_cache: everything unmapped and released, the range freed,
        // the same size reserved again.
        for (size_t i = 0; i < n; ++i)
          if (g.handles[i]) {
            REQUIRE(cache.unmap(g.base + i * g.page, g.page) == kOk);
            REQUIRE(cache.release(g.handles[i]) == kOk);
            g.handles[i] = 0;
          }
        REQUIRE(cache.address_free(g.base, g.reserved) == kOk);
        uint64_t base = 0;
        if (cache.take_range(g.reserved, 0, 0, 0, &base)) {
          g.base = base;
        } else {
          cache.note_reserved(g.base, g.reserved);
        }
      }
      // The worker (on this thread) makes a few of its pages between the
      // program's calls.
      for (uint32_t w = pick(4); w > 0; --w) work();
      REQUIRE(cache.deferred_counts_consistent());
      // Each page the program mapped is its own handle, open, at the driver.
      std::lock_guard<std::mutex> l(driver.mutex);
      // No handle is mapped twice: the program never does it, and the
      // H200 refused (CUDA_ERROR_UNKNOWN) a map of a cached handle whose
      // deferred mapping elsewhere was still there (docs/DRIVER-FACTS.md).
      std::map<uint64_t, int> mappings_of;
      for (auto& [a, m] : fake.maps) REQUIRE(++mappings_of[m.handle] == 1);
      for (const TorchSegment& s : segs)
        for (size_t i = 0; i < s.handles.size(); ++i)
          if (s.handles[i]) {
            auto m = fake.maps.find(s.base + i * s.page);
            REQUIRE(m != fake.maps.end());
            REQUIRE(m->second.handle == s.handles[i]);
            REQUIRE(m->second.bytes == s.page);
            REQUIRE(m->second.access.count("r") == 1);
          }
    }
  }
}

}  // namespace

TEST_CASE("own vmm: PyTorch-shaped segments with growth ahead: every page is the program's own, every call succeeds") {
  torch_segments(300, false);
}

TEST_CASE("own vmm: PyTorch-shaped segments with the worker on its own thread") { torch_segments(60, true); }
