// tests/policy/test_client_vmm.cpp: the client VMM cache (policy/client_vmm.h)
// over a fake driver that refuses what the real one refuses (unknown or
// released handles, overlapping maps, unmaps and access calls that are not
// whole mappings, freeing an address range with mappings in it).
//
// The differential case runs the same random program against the fake
// directly and through the cache, and requires the same answer to every
// call and, after every call, the program's view (what it mapped where,
// with which access) present in the fake.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "policy/client_vmm.h"
#include "policy/clock.h"

namespace {

using pagefast::policy::ClientDriver;
using pagefast::policy::ClientVmmCache;
using pagefast::policy::ClientVmmStats;
using pagefast::policy::kClientInvalidValue;
using pagefast::policy::kClientOk;
using pagefast::policy::monotonic_now_ns;

constexpr int kFailed = 2;  // what an injected failure answers

struct FakeHandle {
  uint64_t bytes = 0;
  int refs = 0;
};
struct FakeMap {
  uint64_t bytes = 0, offset = 0, handle = 0;
  std::map<std::string, std::string> access;  // location -> flags
};

class FakeDriver final : public ClientDriver {
 public:
  std::map<uint64_t, FakeHandle> handles;
  std::map<uint64_t, FakeMap> maps;
  uint64_t next_handle = 0x100;
  uint64_t room = UINT64_MAX;
  std::map<std::string, int> calls;
  std::string fail_op;  // the next call of this op fails (once)

  int fail_skip = 0;  // ... after this many more calls of it succeeded

  bool fails(const char* op) {
    ++calls[op];
    if (fail_op != op) return false;
    if (fail_skip > 0) {
      --fail_skip;
      return false;
    }
    fail_op.clear();
    return true;
  }
  bool live(uint64_t h) const {
    auto it = handles.find(h);
    return it != handles.end() && it->second.refs > 0;
  }
  bool overlaps(uint64_t addr, uint64_t bytes) const {
    for (auto& [a, m] : maps)
      if (a < addr + bytes && addr < a + m.bytes) return true;
    return false;
  }
  // The mappings that make up [addr, addr + bytes) exactly, or none.
  std::vector<uint64_t> cover(uint64_t addr, uint64_t bytes) const {
    std::vector<uint64_t> out;
    uint64_t at = addr;
    while (at < addr + bytes) {
      auto it = maps.find(at);
      if (it == maps.end()) return {};
      out.push_back(at);
      at += it->second.bytes;
    }
    return at == addr + bytes ? out : std::vector<uint64_t>{};
  }
  void gc(uint64_t h) {
    auto it = handles.find(h);
    if (it == handles.end() || it->second.refs > 0) return;
    for (auto& [a, m] : maps)
      if (m.handle == h) return;
    handles.erase(it);  // freed: no reference, no mapping
  }

  int create(uint64_t bytes, const std::string&, uint64_t* h) override {
    if (fails("create")) return kFailed;
    *h = next_handle++;
    handles[*h] = FakeHandle{bytes, 1};
    return kClientOk;
  }
  int retain(uint64_t addr, uint64_t* h) {
    if (fails("retain")) return kFailed;
    for (auto& [a, m] : maps)
      if (addr >= a && addr < a + m.bytes) {
        ++handles[m.handle].refs;
        *h = m.handle;
        return kClientOk;
      }
    return kClientInvalidValue;
  }
  int release(uint64_t h) override {
    if (fails("release")) return kFailed;
    if (!live(h)) return kClientInvalidValue;
    --handles[h].refs;
    gc(h);
    return kClientOk;
  }
  int map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t h, uint64_t flags) override {
    if (fails("map")) return kFailed;
    if (!live(h) || flags || !bytes || offset + bytes > handles[h].bytes || overlaps(addr, bytes))
      return kClientInvalidValue;
    maps[addr] = FakeMap{bytes, offset, h, {}};
    return kClientOk;
  }
  int unmap(uint64_t addr, uint64_t bytes) override {
    if (fails("unmap")) return kFailed;
    const std::vector<uint64_t> c = cover(addr, bytes);
    if (c.empty()) return kClientInvalidValue;
    for (uint64_t a : c) {
      const uint64_t h = maps[a].handle;
      maps.erase(a);
      gc(h);
    }
    return kClientOk;
  }
  int set_access(uint64_t addr, uint64_t bytes, const std::string& descs) override {
    if (fails("set_access")) return kFailed;
    const std::vector<uint64_t> c = cover(addr, bytes);
    if (c.empty() || descs.empty() || descs.size() % 2) return kClientInvalidValue;
    for (uint64_t a : c)
      for (size_t at = 0; at + 2 <= descs.size(); at += 2)
        maps[a].access[descs.substr(at, 1)] = descs.substr(at + 1, 1);
    return kClientOk;
  }
  int address_free(uint64_t addr, uint64_t bytes) override {
    if (fails("address_free")) return kFailed;
    return overlaps(addr, bytes) ? kClientInvalidValue : kClientOk;
  }
  uint64_t cache_room(int) override { return room; }
  int total_calls() const {
    int n = 0;
    for (auto& [op, c] : calls) n += c;
    return n;
  }
};

// The program's calls, through the cache (cache != NULL) or straight to the
// fake: what the glue (interpose/pool/vmm_clients.cpp) does.
struct Program {
  FakeDriver& fake;
  ClientVmmCache* cache;
  int create(uint64_t bytes, const std::string& prop, uint64_t* h) {
    if (cache && cache->take(bytes, prop, h)) return kClientOk;
    const int r = fake.create(bytes, prop, h);
    if (r == kClientOk && cache) cache->note_created(*h, bytes, prop, 0);
    return r;
  }
  int release(uint64_t h) { return cache ? cache->release(h) : fake.release(h); }
  int map(uint64_t a, uint64_t b, uint64_t o, uint64_t h) {
    return cache ? cache->map(a, b, o, h, 0) : fake.map(a, b, o, h, 0);
  }
  int unmap(uint64_t a, uint64_t b) { return cache ? cache->unmap(a, b) : fake.unmap(a, b); }
  int access(uint64_t a, uint64_t b, const std::string& d) {
    return cache ? cache->set_access(a, b, d) : fake.set_access(a, b, d);
  }
  int address_free(uint64_t a, uint64_t b) { return cache ? cache->address_free(a, b) : fake.address_free(a, b); }
  int retain(uint64_t a, uint64_t* h) {
    if (cache && cache->retain(a, h)) return kClientOk;
    return fake.retain(a, h);
  }
};

constexpr uint64_t kSeg = 20 << 20;
constexpr uint64_t kBase = uint64_t(1) << 40;
const std::string kProp = "pinned-device-0";
const std::string kRW = "rw";

// An expandable segment: grow by `pages`, shrink all, repeat.
void segment_round(Program& p, int pages) {
  std::vector<uint64_t> hs(pages);
  for (int i = 0; i < pages; ++i) REQUIRE(p.create(kSeg, kProp, &hs[i]) == kClientOk);
  for (int i = 0; i < pages; ++i) REQUIRE(p.map(kBase + i * kSeg, kSeg, 0, hs[i]) == kClientOk);
  REQUIRE(p.access(kBase, pages * kSeg, kRW) == kClientOk);
  for (int i = 0; i < pages; ++i) {
    REQUIRE(p.unmap(kBase + i * kSeg, kSeg) == kClientOk);
    REQUIRE(p.release(hs[i]) == kClientOk);
  }
}

}  // namespace

TEST_CASE("client vmm: an expandable-segments loop makes no driver call after its first round") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
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

TEST_CASE("client vmm: growing further than before maps and opens only the new pages for real") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
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

TEST_CASE("client vmm: one access call per device (PyTorch with peers) is recognised per location") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0;
  for (int round = 0; round < 3; ++round) {
    REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
    REQUIRE(p.map(kBase, kSeg, 0, h) == kClientOk);
    REQUIRE(p.access(kBase, kSeg, "rw") == kClientOk);  // the device
    REQUIRE(p.access(kBase, kSeg, "pw") == kClientOk);  // a peer
    REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
    REQUIRE(p.release(h) == kClientOk);
  }
  CHECK(fake.calls["set_access"] == 2);
  CHECK(cache.stats().access_skipped == 4);
  // A peer dropped (PROT_NONE for it) is a change: the driver is asked.
  REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kClientOk);
  REQUIRE(p.access(kBase, kSeg, "rwpn") == kClientOk);
  CHECK(fake.calls["set_access"] == 3);
  CHECK(fake.maps[kBase].access["p"] == "n");
}

// PyTorch's seed loop: a segment grows by one page per access call.
int grow_page_by_page(Program& p, int pages, std::vector<uint64_t>* hs) {
  hs->assign(size_t(pages), 0);
  for (int i = 0; i < pages; ++i) {
    if (p.create(kSeg, kProp, &(*hs)[size_t(i)]) != kClientOk) return i;
    if (p.map(kBase + uint64_t(i) * kSeg, kSeg, 0, (*hs)[size_t(i)]) != kClientOk) return i;
    if (p.access(kBase + uint64_t(i) * kSeg, kSeg, kRW) != kClientOk) return i;
  }
  return pages;
}

// Shrinks what grow_page_by_page grew: each page unmapped, its handle released.
void shrink_page_by_page(Program& p, const std::vector<uint64_t>& hs) {
  for (size_t i = 0; i < hs.size(); ++i) {
    REQUIRE(p.unmap(kBase + uint64_t(i) * kSeg, kSeg) == kClientOk);
    REQUIRE(p.release(hs[i]) == kClientOk);
  }
}

TEST_CASE("client vmm: two segments of the same properties growing in turns stop growth ahead after two misses") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1, 32);
  const uint64_t base[2] = {kBase, kBase + 1000 * kSeg};
  for (uint64_t b : base) cache.note_reserved(b, 100 * kSeg);
  Program p{fake, &cache};
  // cuMemCreate cannot tell which segment a page is for: the lowest page
  // made ahead (segment 0's) goes to segment 1's growth too.
  // Both segments grow a page each in turns (create, map at its end, open
  // it); the handles each got, in order.
  auto grow_in_turns = [&](std::vector<uint64_t>(&got)[2]) {
    for (int i = 0; i < 40; ++i)
      for (int s = 0; s < 2; ++s) {
        uint64_t h = 0;
        const uint64_t at = base[s] + uint64_t(i) * kSeg;
        REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
        REQUIRE(p.map(at, kSeg, 0, h) == kClientOk);
        REQUIRE(p.access(at, kSeg, kRW) == kClientOk);
        got[s].push_back(h);
      }
  };
  std::vector<uint64_t> hs[2];
  grow_in_turns(hs);
  // It stopped at the second miss: a batch or two made before it (taken,
  // and most of them misdirected too), none after.
  INFO("prefetched " << cache.stats().prefetched << ", misdirected " << cache.stats().ahead_misdirected);
  CHECK(cache.stats().ahead_misdirected >= 2);
  CHECK(cache.stats().prefetched <= 8);
  CHECK(cache.stats().ahead_misdirected <= cache.stats().prefetched);
  // Every page is the program's own handle where it asked, open.
  std::set<uint64_t> seen;
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 40; ++i) {
      const FakeMap& m = fake.maps[base[s] + uint64_t(i) * kSeg];
      CHECK(m.handle == hs[s][size_t(i)]);
      CHECK(m.access.at("r") == "w");
      seen.insert(hs[s][size_t(i)]);
    }
  CHECK(seen.size() == 80);
  // Both shrunk (one, then the other), then grown in turns again: each
  // released page goes back in the order the pages grew, so each segment
  // gets its own pages back and the driver sees no call.
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 40; ++i) {
      REQUIRE(p.unmap(base[s] + uint64_t(i) * kSeg, kSeg) == kClientOk);
      REQUIRE(p.release(hs[s][size_t(i)]) == kClientOk);
    }
  const int before = fake.total_calls();
  std::vector<uint64_t> again[2];
  grow_in_turns(again);
  CHECK(again[0] == hs[0]);
  CHECK(again[1] == hs[1]);
  CHECK(fake.total_calls() == before);
  // One segment alone: a new cache grows ahead as before.
  FakeDriver fake2;
  ClientVmmCache one(fake2, 2, 1, 32);
  one.note_reserved(kBase, 100 * kSeg);
  Program p2{fake2, &one};
  std::vector<uint64_t> hs2;
  REQUIRE(grow_page_by_page(p2, 40, &hs2) == 40);
  CHECK(one.stats().ahead_misdirected == 0);
  CHECK(one.stats().prefetched >= 30);
}

TEST_CASE("client vmm: growth ahead opens a growing segment with one access call per doubling") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1, 32);
  cache.note_reserved(kBase, 100 * kSeg);
  Program p{fake, &cache};
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 64, &hs) == 64);
  // Pages 0, 1 (then 2 ahead), 3 (4 ahead), 8 (8), 17 (16), 34 (32), 67: 6 real calls, 6 prefetches.
  CHECK(fake.calls["set_access"] <= 12);
  CHECK(fake.calls["set_access"] >= 6);
  CHECK(cache.stats().prefetched > 0);
  // Each page the program holds is its own handle, mapped where it asked, open.
  for (int i = 0; i < 64; ++i) {
    const FakeMap& m = fake.maps[kBase + uint64_t(i) * kSeg];
    CHECK(m.handle == hs[size_t(i)]);
    CHECK(m.access.at("r") == "w");
  }
  // Handles differ (no page handed out twice).
  std::sort(hs.begin(), hs.end());
  CHECK(std::unique(hs.begin(), hs.end()) == hs.end());
  // Shrink all, grow again: no driver call.
  for (int i = 0; i < 64; ++i) {
    REQUIRE(p.unmap(kBase + uint64_t(i) * kSeg, kSeg) == kClientOk);
    REQUIRE(p.release(fake.maps[kBase + uint64_t(i) * kSeg].handle) == kClientOk);
  }
  const int before = fake.total_calls();
  REQUIRE(grow_page_by_page(p, 64, &hs) == 64);
  CHECK(fake.total_calls() == before);
  // Never past the reservation, and all of it given back by a trim.
  for (auto& [a, m] : fake.maps) CHECK(a + m.bytes <= kBase + 100 * kSeg);
  shrink_page_by_page(p, hs);
  cache.trim(0, UINT64_MAX);
  CHECK(fake.maps.empty());
  CHECK(fake.handles.empty());
}

TEST_CASE("client vmm: growth ahead stays within the cache's room and undoes a failed step") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1, 32);
  cache.note_reserved(kBase, 100 * kSeg);
  Program p{fake, &cache};
  std::vector<uint64_t> hs;
  fake.room = 3 * kSeg;
  REQUIRE(grow_page_by_page(p, 16, &hs) == 16);
  CHECK(cache.cached_bytes(0) <= 3 * kSeg);
  for (int i = 0; i < 16; ++i) CHECK(fake.maps[kBase + uint64_t(i) * kSeg].handle == hs[size_t(i)]);
  // A refused access call while growing ahead: the prefetch is undone.
  FakeDriver fake2;
  ClientVmmCache cache2(fake2, 2, 1, 32);
  cache2.note_reserved(kBase, 100 * kSeg);
  Program p2{fake2, &cache2};
  uint64_t h = 0;
  REQUIRE(p2.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p2.map(kBase, kSeg, 0, h) == kClientOk);
  // The program's access call is the first set_access, the prefetch's the second.
  fake2.fail_op = "set_access";
  fake2.fail_skip = 1;
  REQUIRE(p2.access(kBase, kSeg, kRW) == kClientOk);
  CHECK(cache2.stats().prefetched == 0);
  CHECK(fake2.maps.size() == 1);
  CHECK(fake2.handles.size() == 1);
  CHECK(fake2.maps[kBase].access.at("r") == "w");
  FakeDriver fake3;
  ClientVmmCache cache3(fake3, 2, 1, 32);
  cache3.note_reserved(kBase, 100 * kSeg);
  Program p3{fake3, &cache3};
  REQUIRE(p3.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p3.map(kBase, kSeg, 0, h) == kClientOk);
  fake3.fail_op = "map";  // the prefetch's second map
  fake3.fail_skip = 1;
  REQUIRE(p3.access(kBase, kSeg, kRW) == kClientOk);
  CHECK(cache3.stats().prefetched == 1);  // the first page made it; the second is undone
  CHECK(fake3.maps.size() == 2);
  CHECK(fake3.handles.size() == 2);
}

TEST_CASE("client vmm: abandon gives the driver the program's view back; forget_device drops records") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1, 32);
  cache.note_reserved(kBase, 100 * kSeg);
  Program p{fake, &cache};
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 5, &hs) == 5);
  REQUIRE(p.unmap(kBase + 4 * kSeg, kSeg) == kClientOk);
  REQUIRE(p.release(hs[4]) == kClientOk);
  cache.abandon();
  // Pages 0..3 are the program's, still mapped; nothing else is.
  CHECK(fake.maps.size() == 4);
  CHECK(fake.handles.size() == 4);
  CHECK(cache.cached_bytes(0) == 0);
  // From now on the program's calls reach the driver as they are.
  for (int i = 0; i < 4; ++i) {
    REQUIRE(fake.unmap(kBase + uint64_t(i) * kSeg, kSeg) == kClientOk);
    REQUIRE(fake.release(hs[size_t(i)]) == kClientOk);
  }
  CHECK(fake.handles.empty());

  FakeDriver fake2;
  ClientVmmCache cache2(fake2, 2, 1);
  Program p2{fake2, &cache2};
  uint64_t h = 0;
  REQUIRE(p2.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p2.map(kBase, kSeg, 0, h) == kClientOk);
  REQUIRE(p2.unmap(kBase, kSeg) == kClientOk);
  REQUIRE(p2.release(h) == kClientOk);
  cache2.forget_device(0);
  CHECK(cache2.cached_bytes(0) == 0);
  CHECK(fake2.calls.count("unmap") == 0);
  uint64_t g = 0;
  REQUIRE(p2.create(kSeg, kProp, &g) == kClientOk);
  CHECK(g != h);                      // not from the forgotten device's records
  CHECK(p2.release(h) == kClientOk);  // the driver answers for the old handle
  CHECK(fake2.calls["release"] == 1);
}

TEST_CASE("client vmm: a released handle is refused as the driver refuses it") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  uint64_t h = 0;
  Program p{fake, &cache};
  REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p.release(h) == kClientOk);
  CHECK(cache.cached_bytes(0) == kSeg);
  CHECK(p.release(h) == kClientInvalidValue);
  CHECK(p.map(kBase, kSeg, 0, h) == kClientInvalidValue);
  int result = -1;
  CHECK(cache.check_handle(h, false, &result));
  CHECK(result == kClientInvalidValue);
  CHECK(cache.check_handle(h, true, &result));
  CHECK(fake.maps.empty());
}

TEST_CASE("client vmm: a different offset, size or handle at a deferred address is mapped for real") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t a = 0, b = 0;
  REQUIRE(p.create(2 * kSeg, kProp, &a) == kClientOk);
  REQUIRE(p.create(2 * kSeg, kProp, &b) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, 0, a) == kClientOk);
  REQUIRE(p.access(kBase, kSeg, kRW) == kClientOk);
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  CHECK(fake.maps.count(kBase) == 1);  // deferred
  fake.calls.clear();
  REQUIRE(p.map(kBase, kSeg, kSeg, a) == kClientOk);  // other offset
  CHECK(fake.calls["unmap"] == 1);
  CHECK(fake.calls["map"] == 1);
  CHECK(fake.maps[kBase].offset == kSeg);
  CHECK(fake.maps[kBase].access.empty());  // a fresh mapping: no access until asked
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, kSeg, b) == kClientOk);  // other handle
  CHECK(fake.maps[kBase].handle == b);
  // Access with other descriptors on a revived mapping goes to the driver.
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, kSeg, b) == kClientOk);
  fake.calls.clear();
  REQUIRE(p.access(kBase, kSeg, "ro") == kClientOk);
  REQUIRE(p.access(kBase, kSeg, "ro") == kClientOk);
  CHECK(fake.calls["set_access"] == 1);
  CHECK(fake.maps[kBase].access["r"] == "o");
}

TEST_CASE("client vmm: a release with mappings left is cached once the last one is unmapped") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0, again = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kClientOk);
  REQUIRE(p.release(h) == kClientOk);
  CHECK(cache.cached_bytes(0) == 0);
  // Retain through the mapping gives the handle back to the program.
  REQUIRE(p.retain(kBase + 4096, &again) == kClientOk);
  CHECK(again == h);
  REQUIRE(p.release(h) == kClientOk);
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  CHECK(cache.cached_bytes(0) == kSeg);
  CHECK(fake.calls.count("release") == 0);
  // Retain at the (for the program) unmapped address: the driver answers.
  CHECK(p.retain(kBase, &again) == kClientInvalidValue);
  CHECK(fake.maps.empty());
}

TEST_CASE("client vmm: cuMemAddressFree and pointer queries unmap deferred mappings first") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kClientOk);
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  cache.before_query(kBase + kSeg);  // outside: nothing happens
  CHECK(fake.maps.size() == 1);
  cache.before_query(kBase + 100);
  CHECK(fake.maps.empty());
  REQUIRE(p.map(kBase, kSeg, 0, h) == kClientOk);
  CHECK(p.address_free(kBase, 4 * kSeg) == kClientInvalidValue);  // live mapping: the driver refuses
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  CHECK(p.address_free(kBase, 4 * kSeg) == kClientOk);
  CHECK(fake.maps.empty());
}

TEST_CASE("client vmm: exported handles and a full cache go back to the driver") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0;
  int result = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kClientOk);
  CHECK_FALSE(cache.check_handle(h, true, &result));  // forwarded, and now shared
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  CHECK(fake.calls["unmap"] == 1);
  REQUIRE(p.release(h) == kClientOk);
  CHECK(fake.calls["release"] == 1);
  CHECK(fake.handles.empty());
  fake.room = kSeg / 2;
  REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p.release(h) == kClientOk);
  CHECK(fake.handles.empty());
  CHECK(cache.cached_bytes(0) == 0);
}

TEST_CASE("client vmm: other properties or sizes never get a cached handle") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t h = 0, g = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p.release(h) == kClientOk);
  REQUIRE(p.create(2 * kSeg, kProp, &g) == kClientOk);
  CHECK(g != h);
  REQUIRE(p.create(kSeg, "pinned-device-0-posix-fd", &g) == kClientOk);
  CHECK(g != h);
  REQUIRE(p.create(kSeg, kProp, &g) == kClientOk);
  CHECK(g == h);
}

TEST_CASE("client vmm: a refused real unmap leaves the mapping deferred and the driver's answer stands") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t a = 0, b = 0;
  REQUIRE(p.create(kSeg, kProp, &a) == kClientOk);
  REQUIRE(p.create(kSeg, kProp, &b) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, 0, a) == kClientOk);
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  fake.fail_op = "unmap";
  CHECK(p.map(kBase, kSeg, 0, b) == kClientInvalidValue);  // still mapped: the driver refuses
  CHECK(p.map(kBase, kSeg, 0, b) == kClientOk);            // the next flush works
  CHECK(fake.maps[kBase].handle == b);
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  fake.fail_op = "release";
  CHECK(cache.trim(0, UINT64_MAX) == 0);  // a refused release frees nothing
  REQUIRE(p.release(a) == kClientOk);
  REQUIRE(p.release(b) == kClientOk);
}

// The same random program straight on the fake and through the cache: the
// same answers, and the program's mappings present with their access.
TEST_CASE("client vmm: differential against the driver, random programs") {
  constexpr int kSlots = 6, kPositions = 8;
  constexpr uint64_t kUnit = 2 << 20;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    FakeDriver direct_fake, cached_fake;
    ClientVmmCache cache(cached_fake, 2, 1, seed % 2 ? 4 : 0);
    cache.note_reserved(kBase, uint64_t(kPositions) * 2 * kUnit);
    if (seed % 5 == 0) cached_fake.room = 3 * kUnit;  // a small cache: releases go through too
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
            if (r[m] != kClientOk) h = 0;
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
            if (r[m] == kClientOk) h = got;
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

// The fake driver for growth ahead on a worker: every call under one lock
// (the worker and the program call at once), counted per thread, and a
// gate that can hold the worker inside its next create.
class WorkerDriver final : public ClientDriver {
 public:
  explicit WorkerDriver(FakeDriver& f) : fake(f) {}
  FakeDriver& fake;
  std::mutex mutex;
  std::thread::id program = std::this_thread::get_id();
  std::map<std::string, int> program_calls;
  bool worker = true;  // wake_worker's answer
  int woken = 0;
  // Gate: while closed, the worker's create waits (and says it arrived).
  std::mutex gate_mutex;
  std::condition_variable gate_cv;
  bool gate_closed = false, at_gate = false;

  void count(const char* op) {
    if (std::this_thread::get_id() == program) ++program_calls[op];
  }
  int create(uint64_t bytes, const std::string& prop, uint64_t* h) override {
    if (std::this_thread::get_id() != program) {
      std::unique_lock<std::mutex> g(gate_mutex);
      at_gate = true;
      gate_cv.notify_all();
      gate_cv.wait(g, [&] { return !gate_closed; });
    }
    std::lock_guard<std::mutex> l(mutex);
    count("create");
    return fake.create(bytes, prop, h);
  }
  int release(uint64_t h) override {
    std::lock_guard<std::mutex> l(mutex);
    count("release");
    return fake.release(h);
  }
  int map(uint64_t a, uint64_t b, uint64_t o, uint64_t h, uint64_t f) override {
    std::lock_guard<std::mutex> l(mutex);
    count("map");
    return fake.map(a, b, o, h, f);
  }
  int unmap(uint64_t a, uint64_t b) override {
    std::lock_guard<std::mutex> l(mutex);
    count("unmap");
    return fake.unmap(a, b);
  }
  int set_access(uint64_t a, uint64_t b, const std::string& d) override {
    std::lock_guard<std::mutex> l(mutex);
    count("set_access");
    return fake.set_access(a, b, d);
  }
  int address_free(uint64_t a, uint64_t b) override {
    std::lock_guard<std::mutex> l(mutex);
    count("address_free");
    return fake.address_free(a, b);
  }
  uint64_t cache_room(int) override { return fake.room; }
  bool wake_worker() override {
    ++woken;
    return worker;
  }
  uint64_t now_ns() override { return monotonic_now_ns(); }
  void close_gate() {
    std::lock_guard<std::mutex> g(gate_mutex);
    gate_closed = true;
    at_gate = false;
  }
  void wait_at_gate() {
    std::unique_lock<std::mutex> g(gate_mutex);
    gate_cv.wait(g, [&] { return at_gate; });
  }
  void open_gate() {
    std::lock_guard<std::mutex> g(gate_mutex);
    gate_closed = false;
    gate_cv.notify_all();
  }
};

// The program's calls through the cache, misses to the locked driver.
struct WorkerProgram {
  WorkerDriver& driver;
  ClientVmmCache& cache;
  int create(uint64_t bytes, const std::string& prop, uint64_t* h) {
    if (cache.take(bytes, prop, h)) return kClientOk;
    const int r = driver.create(bytes, prop, h);
    if (r == kClientOk) cache.note_created(*h, bytes, prop, 0);
    return r;
  }
  int grow(uint64_t at, uint64_t* h) {
    int r = create(kSeg, kProp, h);
    if (r == kClientOk) r = cache.map(at, kSeg, 0, *h, 0);
    if (r == kClientOk) r = cache.set_access(at, kSeg, kRW);
    return r;
  }
};

// The set-up of the growth-ahead cases: a program growing 20 MiB pages in
// a reservation of `Pages` of them, up to 32 pages ahead on a worker the
// case runs itself (or none: driver.worker = false).
template <uint64_t Pages = 100>
struct WorkerCase {
  WorkerCase() { cache.note_reserved(kBase, Pages * kSeg); }
  FakeDriver fake;
  WorkerDriver driver{fake};
  ClientVmmCache cache{driver, 2, 1, 32, true};
  WorkerProgram p{driver, cache};
};

// Waits until the cache has counted `count` waits for pages made ahead
// (a program's call is then waiting for the worker): a case opens its
// gate after that, not after a sleep. False if it never does (a minute:
// a hang guard, not a measure).
bool wait_for_ahead_waits(ClientVmmCache& cache, uint64_t count) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (cache.stats().ahead_waits < count) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

// The worker thread of the glue: work_one until stopped.
struct Worker {
  explicit Worker(ClientVmmCache& c)
      : cache(c), thread([this] {
          while (!stop.load())
            if (!cache.work_one()) cache.wait_for_work(1000 * 1000);
        }) {}
  ~Worker() {
    stop.store(true);
    thread.join();
  }
  ClientVmmCache& cache;
  std::atomic<bool> stop{false};
  std::thread thread;
};

}  // namespace

TEST_CASE_METHOD(WorkerCase<>,
                 "client vmm: growth ahead on a worker: the program's thread opens few pages, each page its own") {
  std::vector<uint64_t> hs(64);
  {
    Worker worker(cache);
    for (int i = 0; i < 64; ++i) REQUIRE(p.grow(kBase + uint64_t(i) * kSeg, &hs[size_t(i)]) == kClientOk);
    // Everything queued is made before the worker stops.
    while (cache.pending_pages() != 0) std::this_thread::yield();
  }
  INFO("program's calls: set_access " << driver.program_calls["set_access"] << ", create "
                                      << driver.program_calls["create"]);
  CHECK(driver.program_calls["set_access"] <= 4);
  CHECK(driver.program_calls["create"] <= 4);
  CHECK(cache.stats().prefetched >= 60);
  std::lock_guard<std::mutex> l(driver.mutex);
  for (int i = 0; i < 64; ++i) {
    const FakeMap& m = fake.maps[kBase + uint64_t(i) * kSeg];
    CHECK(m.handle == hs[size_t(i)]);
    CHECK(m.access.at("r") == "w");
  }
  std::sort(hs.begin(), hs.end());
  CHECK(std::unique(hs.begin(), hs.end()) == hs.end());
  for (auto& [a, m] : fake.maps) CHECK(a + m.bytes <= kBase + 100 * kSeg);
}

TEST_CASE_METHOD(WorkerCase<>,
                 "client vmm: a program's call over pages queued ahead cancels them; one in flight is waited for") {
  uint64_t h0 = 0;
  REQUIRE(p.grow(kBase, &h0) == kClientOk);
  CHECK(driver.woken == 1);
  CHECK(cache.pending_pages() == 2);
  // No worker ran: the program maps a handle of other properties over
  // the first queued page. The job stops; the driver gets the map.
  uint64_t other = 0;
  REQUIRE(driver.create(kSeg, "other", &other) == kClientOk);
  cache.note_created(other, kSeg, "other", 0);
  REQUIRE(cache.map(kBase + kSeg, kSeg, 0, other, 0) == kClientOk);
  CHECK(cache.pending_pages() == 0);
  CHECK(cache.stats().ahead_cancelled == 2);
  CHECK(!cache.work_one());
  CHECK(fake.maps.at(kBase + kSeg).handle == other);
  // Unmap the program's page 1, then grow page 1 again: a new job queued.
  REQUIRE(cache.unmap(kBase + kSeg, kSeg) == kClientOk);
  REQUIRE(cache.release(other) == kClientOk);
  uint64_t h1 = 0;
  driver.close_gate();
  {
    Worker worker(cache);
    REQUIRE(p.grow(kBase + kSeg, &h1) == kClientOk);
    // The worker is inside its create for page 2; the program frees the
    // whole reservation: it waits for that page, which is then unmapped.
    driver.wait_at_gate();
    std::atomic<bool> freed{false};
    int answers[3] = {-1, -1, -1};  // Catch's assertions stay on this thread
    uint64_t program_ns = 0;
    const ClientVmmStats before = cache.stats();
    std::thread program2([&] {
      const uint64_t t0 = monotonic_now_ns();
      answers[0] = cache.unmap(kBase, kSeg);
      answers[1] = cache.unmap(kBase + kSeg, kSeg);
      answers[2] = cache.address_free(kBase, 100 * kSeg);
      program_ns = monotonic_now_ns() - t0;
      freed.store(true);
    });
    // The gate opens once the program waits for the page in flight.
    REQUIRE(wait_for_ahead_waits(cache, before.ahead_waits + 1));
    CHECK(!freed.load());
    driver.open_gate();
    program2.join();
    CHECK(freed.load());
    for (int a : answers) CHECK(a == kClientOk);
    // The wait is counted, and within the program's calls.
    const uint64_t waited_ns = cache.stats().ahead_wait_ns - before.ahead_wait_ns;
    CHECK(waited_ns > 0);
    CHECK(waited_ns <= program_ns);
  }
  // The range held only deferred mappings: kept whole, with them (the
  // worker's page included); a trim gives the memory and the range back.
  CHECK(cache.stats().ranges_kept == 1);
  CHECK(cache.address_free(kBase, 100 * kSeg) == kClientInvalidValue);  // freed twice
  REQUIRE(cache.release(h0) == kClientOk);
  REQUIRE(cache.release(h1) == kClientOk);
  cache.trim(0, UINT64_MAX);
  std::lock_guard<std::mutex> l(driver.mutex);
  CHECK(fake.maps.empty());
  CHECK(driver.program_calls["address_free"] >= 1);
}

TEST_CASE_METHOD(WorkerCase<>, "client vmm: cuMemCreate waits for the worker's page instead of creating one") {
  uint64_t h0 = 0, h1 = 0;
  REQUIRE(p.grow(kBase, &h0) == kClientOk);
  driver.close_gate();
  Worker worker(cache);
  driver.wait_at_gate();
  const ClientVmmStats before = cache.stats();
  std::atomic<bool> waited{false};
  std::thread opener([&] {
    // The gate opens once the program's create waits for the worker's page.
    waited.store(wait_for_ahead_waits(cache, before.ahead_waits + 1));
    driver.open_gate();
  });
  const int creates = driver.program_calls["create"];
  const uint64_t t0 = monotonic_now_ns();
  REQUIRE(p.create(kSeg, kProp, &h1) == kClientOk);
  const uint64_t create_ns = monotonic_now_ns() - t0;
  opener.join();
  CHECK(waited.load());
  CHECK(driver.program_calls["create"] == creates);  // the worker's page, not the driver's
  CHECK(cache.stats().create_hits == 1);
  // The wait is counted, and within the program's create.
  const uint64_t waited_ns = cache.stats().ahead_wait_ns - before.ahead_wait_ns;
  CHECK(waited_ns > 0);
  CHECK(waited_ns <= create_ns);
  REQUIRE(cache.map(kBase + kSeg, kSeg, 0, h1, 0) == kClientOk);
  CHECK(cache.stats().revived_maps == 1);
}

TEST_CASE_METHOD(
    WorkerCase<200>,
    "client vmm: the next batch queues behind the job still running, never more than prefetch_pages ahead") {
  uint64_t h = 0;
  REQUIRE(p.grow(kBase, &h) == kClientOk);  // the program's own page 0; pages 1-2 queued
  CHECK(cache.pending_pages() == 2);
  REQUIRE(cache.work_one());  // page 1 made, page 2 not yet
  REQUIRE(p.grow(kBase + kSeg, &h) == kClientOk);
  // The program took page 1 while page 2 is still to be made: the next
  // batch (pages 3-6) is queued behind it rather than after it, so the
  // worker goes on without waiting for the program's next call.
  CHECK(cache.pending_pages() == 1 + 4);
  // A worker exactly as fast as the program: one page made per page
  // taken. The program never makes or waits for a page, and the pages
  // ahead of it (made or queued) never pass 32.
  uint64_t most = 0;
  for (uint64_t i = 2; i < 150; ++i) {
    cache.work_one();
    const uint64_t ahead = cache.pending_pages() + cache.stats().cached_bytes / kSeg;
    most = std::max(most, ahead);
    CHECK(ahead <= 32);
    REQUIRE(p.grow(kBase + i * kSeg, &h) == kClientOk);
  }
  CHECK(most >= 16);  // it did run ahead
  // (Every call here is on this thread, the worker's too: the program's
  // own are told by the cache's figures.)
  CHECK(cache.stats().create_misses == 1);
  CHECK(cache.stats().create_hits == 149);
  CHECK(cache.stats().access_skipped == 149);
  CHECK(cache.stats().ahead_waits == 0);
  std::lock_guard<std::mutex> l(driver.mutex);
  for (auto& [a, m] : fake.maps) CHECK(a + m.bytes <= kBase + 200 * kSeg);
}

TEST_CASE("client vmm: a worker's refused call stops its job and leaves nothing behind") {
  for (const char* op : {"create", "map", "set_access"}) {
    FakeDriver fake;
    WorkerDriver driver(fake);
    ClientVmmCache cache(driver, 2, 1, 32, true);
    cache.note_reserved(kBase, 100 * kSeg);
    WorkerProgram p{driver, cache};
    uint64_t h = 0;
    REQUIRE(p.grow(kBase, &h) == kClientOk);
    fake.fail_op = op;  // the worker's first call of it
    CHECK(cache.work_one());
    CHECK(cache.pending_pages() == 0);
    CHECK(!cache.work_one());
    CHECK(cache.stats().prefetched == 0);
    CHECK(fake.maps.size() == 1);
    CHECK(fake.handles.size() == 1);
    // The program grows on: the driver serves it.
    REQUIRE(p.grow(kBase + kSeg, &h) == kClientOk);
    CHECK(fake.maps.at(kBase + kSeg).handle == h);
  }
}

TEST_CASE_METHOD(WorkerCase<>, "client vmm: with no worker to run, growth ahead stays on the caller") {
  driver.worker = false;
  uint64_t h = 0;
  REQUIRE(p.grow(kBase, &h) == kClientOk);
  CHECK(cache.pending_pages() == 0);
  CHECK(cache.stats().prefetched == 2);
}

TEST_CASE("client vmm: a freed range of deferred mappings is kept, and the next reservation of its size gets it back") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  const uint64_t range = 64 * kSeg;
  cache.note_reserved(kBase, range);
  std::vector<uint64_t> hs;
  REQUIRE(grow_page_by_page(p, 8, &hs) == 8);
  // empty_cache: unmap and release every page, free the range.
  shrink_page_by_page(p, hs);
  const int before = fake.total_calls();
  REQUIRE(p.address_free(kBase, range) == kClientOk);
  CHECK(fake.total_calls() == before);  // kept: no unmap, no free at the driver
  CHECK(cache.stats().ranges_kept == 1);
  // Not for another size, a hint, flags or an alignment it misses.
  uint64_t base = 0;
  CHECK(!cache.take_range(range / 2, 0, 0, 0, &base));
  CHECK(!cache.take_range(range, 0, 0, 1, &base));
  CHECK(!cache.take_range(range, uint64_t(1) << 41, 0, 0, &base));
  REQUIRE(cache.take_range(range, 0, 0, 0, &base));
  CHECK(base == kBase);
  cache.note_reserved(base, range);  // the glue notes what it hands out too
  // Growing again: every page comes back where it was, open; no driver call.
  REQUIRE(grow_page_by_page(p, 8, &hs) == 8);
  for (int i = 0; i < 8; ++i) CHECK(fake.maps.at(kBase + uint64_t(i) * kSeg).handle == hs[size_t(i)]);
  CHECK(fake.total_calls() == before);
  CHECK(cache.stats().ranges_reused == 1);
}

TEST_CASE("client vmm: an address hint gets its kept range back, or frees one in the way for the driver") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  const uint64_t range = 8 * kSeg;
  auto keep = [&] {
    cache.note_reserved(kBase, range);
    uint64_t h = 0;
    REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
    REQUIRE(p.map(kBase, kSeg, 0, h) == kClientOk);
    REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
    REQUIRE(p.release(h) == kClientOk);
    REQUIRE(p.address_free(kBase, range) == kClientOk);
  };
  keep();
  uint64_t base = 0;
  REQUIRE(cache.take_range(range, 0, kBase, 0, &base));  // its own address: it
  CHECK(base == kBase);
  REQUIRE(p.address_free(kBase, range) == kClientOk);  // kept again
  // A hint inside it, for another size: the kept range goes back to the
  // driver (its page unmapped), and the driver answers the reservation.
  CHECK(!cache.take_range(2 * kSeg, 0, kBase + kSeg, 0, &base));
  CHECK(fake.maps.empty());
  CHECK(fake.calls["address_free"] == 1);
  CHECK(!cache.take_range(range, 0, 0, 0, &base));  // nothing kept any more
}

TEST_CASE("client vmm: a range is not kept while a live or an untracked mapping is in it") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  cache.note_reserved(kBase, 8 * kSeg);
  uint64_t h = 0, other = 0;
  REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  REQUIRE(p.map(kBase, kSeg, 0, h) == kClientOk);
  CHECK(p.address_free(kBase, 8 * kSeg) == kClientInvalidValue);  // live: the driver refuses
  REQUIRE(p.unmap(kBase, kSeg) == kClientOk);
  // A handle the cache does not track, mapped and unmapped there.
  REQUIRE(fake.create(kSeg, kProp, &other) == kClientOk);
  REQUIRE(p.map(kBase + kSeg, kSeg, 0, other) == kClientOk);
  REQUIRE(p.unmap(kBase + kSeg, kSeg) == kClientOk);
  REQUIRE(p.address_free(kBase, 8 * kSeg) == kClientOk);
  CHECK(cache.stats().ranges_kept == 0);
  CHECK(fake.maps.empty());  // freed for real: the deferred mapping unmapped
}

TEST_CASE("client vmm: cached handles unused for release_delay decay to the driver, and their kept range with them") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  const uint64_t range = 16 * kSeg, delay = 5000;
  cache.note_reserved(kBase, range);
  std::vector<uint64_t> hs(12);
  for (int i = 0; i < 12; ++i) {
    REQUIRE(p.create(kSeg, kProp, &hs[size_t(i)]) == kClientOk);
    REQUIRE(p.map(kBase + uint64_t(i) * kSeg, kSeg, 0, hs[size_t(i)]) == kClientOk);
  }
  REQUIRE(p.access(kBase, 12 * kSeg, kRW) == kClientOk);
  shrink_page_by_page(p, hs);
  REQUIRE(p.address_free(kBase, range) == kClientOk);  // kept
  CHECK(cache.cached_bytes(0) == 12 * kSeg);
  // The first step sees them cached; nothing is old yet.
  CHECK(cache.decay_step(1000, delay, 0, 8) == 0);
  CHECK(cache.decay_step(5999, delay, 0, 8) == 0);
  // A whole delay later: 8 a step, then the rest; the range goes with the last.
  CHECK(cache.decay_step(6000, delay, 0, 8) == 8 * kSeg);
  CHECK(fake.handles.size() == 4);
  CHECK(fake.calls["address_free"] == 0);
  CHECK(cache.decay_step(6010, delay, 0, 8) == 4 * kSeg);
  CHECK(fake.handles.empty());
  CHECK(fake.maps.empty());
  CHECK(fake.calls["address_free"] == 1);
  CHECK(cache.stats().decayed_bytes == 12 * kSeg);
  CHECK(cache.cached_bytes(0) == 0);
}

TEST_CASE("client vmm: decay keeps the floor, and a handle taken back is young again") {
  FakeDriver fake;
  ClientVmmCache cache(fake, 2, 1);
  Program p{fake, &cache};
  std::vector<uint64_t> hs(4);
  for (auto& h : hs) REQUIRE(p.create(kSeg, kProp, &h) == kClientOk);
  for (auto h : hs) REQUIRE(p.release(h) == kClientOk);
  CHECK(cache.decay_step(100, 1000, 0, 8) == 0);  // stamped at 100
  uint64_t again = 0;
  REQUIRE(p.create(kSeg, kProp, &again) == kClientOk);  // a hit: leaves the cache
  REQUIRE(p.release(again) == kClientOk);               // cached again, not yet seen
  // Three are old; releasing them leaves one page cached, the floor.
  CHECK(cache.decay_step(1100, 1000, 2 * kSeg, 8) == 2 * kSeg);
  CHECK(cache.cached_bytes(0) == 2 * kSeg);
  CHECK(cache.decay_step(1100, 1000, 0, 8) == kSeg);  // the last old one; `again` was first seen at 1100
  CHECK(cache.decay_step(2099, 1000, 0, 8) == 0);
  CHECK(cache.decay_step(2100, 1000, 0, 8) == kSeg);
  CHECK(cache.cached_bytes(0) == 0);
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
    ClientVmmCache cache(driver, 2, 1, 8, true);
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
          REQUIRE(p.create(g.page, kProp, &h) == kClientOk);
        }
        for (size_t i = b; i < e; ++i) {
          REQUIRE(cache.map(g.base + i * g.page, g.page, 0, made[i - b], 0) == kClientOk);
          g.handles[i] = made[i - b];
          if (pick(3) == 0) work();  // the worker between the program's maps
        }
        REQUIRE(cache.set_access(g.base + b * g.page, (e - b) * g.page, kRW) == kClientOk);
      } else if (op < 9) {
        // Unmap a run of mapped pages, page by page, each released.
        size_t b = pick(uint32_t(n));
        while (b < n && !g.handles[b]) ++b;
        for (size_t i = b; i < n && i < b + 1 + pick(4) && g.handles[i]; ++i) {
          REQUIRE(cache.unmap(g.base + i * g.page, g.page) == kClientOk);
          REQUIRE(cache.release(g.handles[i]) == kClientOk);
          g.handles[i] = 0;
        }
      } else {
        // empty_cache: everything unmapped and released, the range freed,
        // the same size reserved again.
        for (size_t i = 0; i < n; ++i)
          if (g.handles[i]) {
            REQUIRE(cache.unmap(g.base + i * g.page, g.page) == kClientOk);
            REQUIRE(cache.release(g.handles[i]) == kClientOk);
            g.handles[i] = 0;
          }
        REQUIRE(cache.address_free(g.base, g.reserved) == kClientOk);
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

TEST_CASE(
    "client vmm: PyTorch-shaped segments with growth ahead: every page is the program's own, every call succeeds") {
  torch_segments(300, false);
}

TEST_CASE("client vmm: PyTorch-shaped segments with the worker on its own thread") { torch_segments(60, true); }
