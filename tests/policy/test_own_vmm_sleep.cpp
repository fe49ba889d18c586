// tests/policy/test_own_vmm_sleep.cpp: the policy side of sleep by slot of
// the program's own VMM memory (docs/OWN-VMM.md "Sleep and wake"): the
// ledger's records asleep and its translation of the program's values, its
// slots (policy/own_vmm/ledger.h) and the cache letting go of a
// handle sleep takes (Cache::disown).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "policy/own_vmm/ledger.h"
#include "tests/policy/own_vmm/fakes.h"

using namespace pagefast::policy::own_vmm;

namespace {

constexpr uint64_t kMiB = 1 << 20;

SlotHandle asleep(uint64_t program, int slot, int refs, std::vector<SlotMapping> maps, void* host = nullptr) {
  SlotHandle h;
  h.program = program;
  h.slot = slot;
  h.refs = refs;
  h.bytes = 4 * kMiB;
  h.prop = "props";
  h.maps = std::move(maps);
  h.host = host;
  return h;
}

}  // namespace

TEST_CASE("own vmm sleep: values pass unchanged until a handle slept, then translate both ways") {
  Ledger ledger;
  uint64_t d = 0;
  CHECK_FALSE(ledger.ever());
  CHECK(ledger.to_driver(0x10, &d));
  CHECK(d == 0x10);
  CHECK(ledger.adopt(0x11) == 0x11);
  ledger.slept(asleep(0x10, 3, 1, {{0x1000000, 4 * kMiB, 0, "rw"}}));
  CHECK(ledger.ever());
  CHECK(ledger.asleep(0x10));
  CHECK_FALSE(ledger.to_driver(0x10, &d));  // asleep: no driver value
  ledger.woke(0x10, 0x20);
  REQUIRE(ledger.to_driver(0x10, &d));
  CHECK(d == 0x20);
  CHECK(ledger.to_program(0x20) == 0x10);
  CHECK(ledger.to_program(0x11) == 0x11);  // never slept: the driver's own
  // The program lets it go: the alias goes, the value is the driver's again.
  CHECK_FALSE(ledger.aliases_empty());
  ledger.drop_alias(0x10);
  CHECK(ledger.aliases_empty());
  REQUIRE(ledger.to_driver(0x10, &d));
  CHECK(d == 0x10);
  CHECK(ledger.to_program(0x20) == 0x20);
}

TEST_CASE("own vmm sleep: values need translating while a handle sleeps or has an alias, and no longer after") {
  Ledger ledger;
  CHECK_FALSE(ledger.translates());
  ledger.slept(asleep(0x10, 3, 1, {{0x1000000, 4 * kMiB, 0, "rw"}}));
  CHECK(ledger.translates());
  ledger.woke(0x10, 0x20);
  CHECK(ledger.translates());  // the alias 0x10 -> 0x20
  ledger.drop_alias(0x10);
  CHECK_FALSE(ledger.translates());
  // Woken under its own value: nothing to translate.
  ledger.slept(asleep(0x30, 3, 1, {{0x2000000, 4 * kMiB, 0, "rw"}}));
  ledger.woke(0x30, 0x30);
  CHECK_FALSE(ledger.translates());
  // A value of pagefast's own is an alias too.
  ledger.slept(asleep(0x40, 3, 1, {{0x3000000, 4 * kMiB, 0, "rw"}}));
  const uint64_t own = ledger.adopt(0x40);
  ledger.woke(0x40, 0x50);
  ledger.drop_alias(0x40);
  CHECK(ledger.translates());
  ledger.drop_alias(own);
  CHECK_FALSE(ledger.translates());
}

TEST_CASE("own vmm sleep: a new driver handle equal to a value the program holds gets a value of its own") {
  Ledger ledger;
  ledger.slept(asleep(0x10, 1, 1, {{0x1000000, 4 * kMiB, 0, "rw"}}));
  // The driver reuses the released value 0x10 for a new handle.
  const uint64_t own = ledger.adopt(0x10);
  CHECK(own != 0x10);
  uint64_t d = 0;
  REQUIRE(ledger.to_driver(own, &d));
  CHECK(d == 0x10);
  CHECK(ledger.to_program(0x10) == own);
  // Wake gives the slept handle another driver value; both stay distinct.
  ledger.woke(0x10, 0x30);
  REQUIRE(ledger.to_driver(0x10, &d));
  CHECK(d == 0x30);
  REQUIRE(ledger.to_driver(own, &d));
  CHECK(d == 0x10);
  // The same driver handle again (an import of it): the same value.
  CHECK(ledger.adopt(0x10) == own);
  // Let go, then handed out again by the driver: 0x10 is still the
  // program's name of 0x30, so the new handle gets a value of its ledger.
  ledger.drop_alias(own);
  const uint64_t again = ledger.adopt(0x10);
  CHECK(again != 0x10);
  REQUIRE(ledger.to_driver(again, &d));
  CHECK(d == 0x10);
  REQUIRE(ledger.to_driver(0x10, &d));
  CHECK(d == 0x30);
}

TEST_CASE("own vmm sleep: release and unmap while asleep are recorded; the last one drops the record") {
  Ledger ledger;
  int copy = 0;
  ledger.slept(asleep(0x10, 2, 2, {{0x1000000, 2 * kMiB, 0, "rw"}, {0x1200000, 2 * kMiB, 2 * kMiB, "rw"}}, &copy));
  bool gone = false;
  void* host = nullptr;
  CHECK(ledger.release_asleep(0x10, &gone, &host) == kOk);
  CHECK_FALSE(gone);
  CHECK(ledger.release_asleep(0x10, &gone, &host) == kOk);
  CHECK_FALSE(gone);  // still mapped: wake makes it again
  CHECK(ledger.release_asleep(0x10, &gone, &host) == kInvalidValue);
  CHECK(ledger.release_asleep(0x99, &gone, &host) == kInvalidValue);
  std::vector<void*> freed;
  CHECK(ledger.unmap_asleep(0x5000000, 2 * kMiB, &freed) == -1);             // not asleep there: the driver's
  CHECK(ledger.unmap_asleep(0x1000000, 1 * kMiB, &freed) == kInvalidValue);  // part of a mapping
  CHECK(ledger.overlaps_asleep(0x1100000, 1));
  CHECK(ledger.unmap_asleep(0x1000000, 2 * kMiB, &freed) == kOk);
  CHECK(freed.empty());
  CHECK_FALSE(ledger.overlaps_asleep(0x1000000, 2 * kMiB));
  CHECK(ledger.overlaps_asleep(0x1000000, 2 * kMiB + 1));
  CHECK(ledger.unmap_asleep(0x1200000, 2 * kMiB, &freed) == kOk);
  REQUIRE(freed.size() == 1);
  CHECK(freed[0] == &copy);
  CHECK_FALSE(ledger.asleep(0x10));
  CHECK(ledger.asleep_handles(2).empty());
}

TEST_CASE("own vmm sleep: set access over whole mappings asleep gives their records; wake reads them") {
  Ledger ledger;
  ledger.slept(asleep(0x10, 1, 1, {{0x1000000, 2 * kMiB, 0, ""}, {0x1200000, 2 * kMiB, 2 * kMiB, "r"}}));
  int records = 0;
  const auto set = [&](std::string* access) {
    ++records;
    *access = "rw";
  };
  CHECK(ledger.access_asleep(0x5000000, 2 * kMiB, set) == -1);             // not asleep there
  CHECK(ledger.access_asleep(0x1000000, 1 * kMiB, set) == kInvalidValue);  // part of a mapping
  CHECK(records == 0);
  REQUIRE(ledger.access_asleep(0x1000000, 4 * kMiB, set) == kOk);
  REQUIRE(records == 2);
  for (const SlotHandle& h : ledger.asleep_handles(1))
    for (const SlotMapping& m : h.maps) CHECK(m.access == "rw");
}

TEST_CASE("own vmm sleep: bytes per slot, kept or not; the slot's handles in order") {
  Ledger ledger;
  int copy = 0;
  ledger.slept(asleep(0x30, 1, 1, {{0x1000000, 4 * kMiB, 0, ""}}, &copy));
  ledger.slept(asleep(0x20, 1, 1, {{0x2000000, 4 * kMiB, 0, ""}}));
  ledger.slept(asleep(0x40, 2, 1, {{0x3000000, 4 * kMiB, 0, ""}}));
  uint64_t sleeping = 0, kept = 0;
  ledger.slot_asleep(1, &sleeping, &kept);
  CHECK(sleeping == 8 * kMiB);
  CHECK(kept == 4 * kMiB);
  ledger.slot_asleep(2, &sleeping, &kept);
  CHECK(sleeping == 4 * kMiB);
  CHECK(kept == 0);
  const auto handles = ledger.asleep_handles(1);
  REQUIRE(handles.size() == 2);
  CHECK(handles[0].program == 0x20);
  CHECK(handles[1].program == 0x30);
  // An unmap over two handles' mappings side by side.
  std::vector<void*> freed;
  ledger.slept(asleep(0x50, 3, 0, {{0x4000000, 4 * kMiB, 0, ""}}));
  ledger.slept(asleep(0x51, 3, 0, {{0x4400000, 4 * kMiB, 0, ""}}));
  CHECK(ledger.unmap_asleep(0x4000000, 8 * kMiB, &freed) == kOk);
  CHECK(freed.size() == 2);
  CHECK(ledger.asleep_handles(3).empty());
}

TEST_CASE("own vmm sleep: the ledger marks multicast-bound handles, by handle or by an address inside a mapping") {
  Ledger own;
  own.created(1, 4 * kMiB, 0, 1);
  own.created(2, 4 * kMiB, 0, 1);
  own.created(3, 4 * kMiB, 0, 1);
  own.mapped(0x1000000, 4 * kMiB, 2);
  own.mapped(0x1400000, 4 * kMiB, 3);
  own.bound(1);
  own.bound(99);  // unknown: nothing
  // An address inside 2's mapping, over the start of 3's.
  const std::vector<uint64_t> at = own.bound_at(0x1200000, 3 * kMiB);
  CHECK(at == std::vector<uint64_t>{2, 3});
  CHECK(own.bound_at(0x3000000, kMiB).empty());
  const std::vector<SlotHandle> slot1 = own.program_handles(1);
  REQUIRE(slot1.size() == 3);
  for (const SlotHandle& h : slot1) CHECK(h.multicast);
}

TEST_CASE("own vmm sleep: the ledger tags handles by slot and lists the program's with their mappings") {
  Ledger own;
  own.created(7, 4 * kMiB, 0, 2);
  own.created(8, 4 * kMiB, 1, 0);
  own.created(9, 4 * kMiB, 0);
  own.tag(9, 2);
  own.mapped(0x1000000, 2 * kMiB, 7, 2 * kMiB);
  own.mapped(0x2000000, 2 * kMiB, 7, 0);
  own.retained(7);
  const std::vector<SlotHandle> slot2 = own.program_handles(2);
  REQUIRE(slot2.size() == 2);
  const SlotHandle& h7 = slot2[0].handle == 7 ? slot2[0] : slot2[1];
  CHECK(h7.refs == 2);
  REQUIRE(h7.maps.size() == 2);
  CHECK(h7.maps[0].addr == 0x1000000);
  CHECK(h7.maps[0].offset == 2 * kMiB);
  CHECK(h7.maps[1].offset == 0);
  CHECK(own.slot_resident(2) == 8 * kMiB);
  CHECK(own.slot_resident(0) == 4 * kMiB);
  // Exported: shared (sleep leaves it resident).
  own.shared(8);
  CHECK(own.program_handles(0)[0].shared);
  // Sleep forgets 7; wake restores it as 17 with its references and mappings.
  own.forget(7);
  CHECK_FALSE(own.facts(7).known);
  CHECK(own.slot_resident(2) == 4 * kMiB);
  CHECK(own.resident(0).bytes == 4 * kMiB);
  own.restore(17, 4 * kMiB, 0, 2, 2);
  own.mapped(0x1000000, 2 * kMiB, 17, 2 * kMiB);
  CHECK(own.facts(17).refs == 2);
  CHECK(own.facts(17).maps == 1);
  CHECK(own.facts(17).slot == 2);
  CHECK(own.slot_resident(2) == 8 * kMiB);
  // What an unmap over a range ends: the mappings that start inside it.
  own.mapped(0x1200000, 2 * kMiB, 9);
  CHECK(own.mapped_in(0x1000000, 4 * kMiB) == std::vector<uint64_t>{17, 9});
  CHECK(own.mapped_in(0x1100000, 2 * kMiB) == std::vector<uint64_t>{9});
  CHECK(own.mapped_in(0x3000000, 2 * kMiB).empty());
}

TEST_CASE("own vmm sleep: the cache lets go of a handle sleep takes, deferred mappings unmapped for real") {
  using namespace own_vmm_test;
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  uint64_t a = 0, b = 0;
  REQUIRE(p.create(kSeg, kProp, &a) == kOk);
  REQUIRE(p.create(kSeg, kProp, &b) == kOk);
  REQUIRE(p.map(kBase, kSeg, 0, a) == kOk);
  REQUIRE(p.map(kBase + kSeg, kSeg, 0, a) == kOk);
  REQUIRE(p.access(kBase, 2 * kSeg, kRW) == kOk);
  REQUIRE(p.unmap(kBase + kSeg, kSeg) == kOk);  // deferred: still mapped at the driver
  CHECK(fake.maps.size() == 2);
  CHECK_FALSE(cache.disown(0x999));
  CHECK(cache.disown(a));
  CHECK(fake.maps.size() == 1);  // the deferred mapping went; the live one is the caller's
  CHECK(cache.deferred_counts_consistent());
  CHECK(fake.unmap(kBase, kSeg) == kOk);
  CHECK(fake.release(a) == kOk);
  // The cache no longer knows it: a release of the value goes to the driver.
  CHECK(cache.release(a) != kOk);
  CHECK(cache.release(b) == kOk);
}
