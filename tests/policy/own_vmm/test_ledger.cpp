// tests/policy/own_vmm/test_ledger.cpp: the ledger of the program's own VMM
// memory (policy/own_vmm/ledger.h), which sleep's answer reads.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "policy/own_vmm/ledger.h"
#include "policy/units.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::own_vmm;

TEST_CASE("a handle is the program's while it holds a reference or maps it", "[own]") {
  Ledger own;
  own.created(7, 4 * kMiB, 0);
  own.created(8, 2 * kMiB, 1);
  CHECK(own.resident(0).bytes == 4 * kMiB);
  CHECK(own.resident(1).bytes == 2 * kMiB);
  own.mapped(0x100000000, 4 * kMiB, 7);
  // Released while mapped: the driver frees it at the last unmap.
  own.released(7);
  CHECK(own.resident(0).bytes == 4 * kMiB);
  CHECK(own.resident(0).handles == 1);
  own.unmapped(0x100000000, 4 * kMiB);
  CHECK(own.resident(0).bytes == 0);
  CHECK(own.resident(0).handles == 0);
  // A second release, or one of a handle never seen, changes nothing.
  own.released(7);
  own.released(99);
  CHECK(own.resident(1).bytes == 2 * kMiB);
}

TEST_CASE("retains count as references; an unmap ends every mapping that starts inside it", "[own]") {
  Ledger own;
  own.created(1, 2 * kMiB, 0);
  own.created(2, 2 * kMiB, 0);
  own.retained(1);
  own.released(1);
  CHECK(own.resident(0).bytes == 4 * kMiB);  // the retain's reference holds it
  own.released(1);
  CHECK(own.resident(0).bytes == 2 * kMiB);
  // Handle 2 mapped twice, side by side; the program releases it, then one
  // unmap covers both mappings.
  own.mapped(0x200000000, 2 * kMiB, 2);
  own.mapped(0x200200000, 2 * kMiB, 2);
  own.released(2);
  own.unmapped(0x200000000, 2 * kMiB);
  CHECK(own.resident(0).bytes == 2 * kMiB);  // still mapped once
  own.unmapped(0x200000000, 4 * kMiB);
  CHECK(own.resident(0).bytes == 0);
  // A mapping of a handle the ledger does not know is ignored.
  own.mapped(0x300000000, 2 * kMiB, 42);
  own.unmapped(0x300000000, 2 * kMiB);
  CHECK(own.resident(0).handles == 0);
}

TEST_CASE("a context reset forgets that device's handles only", "[own]") {
  Ledger own;
  own.created(1, 2 * kMiB, 0);
  own.created(2, 6 * kMiB, 1);
  own.mapped(0x100000000, 2 * kMiB, 1);
  own.mapped(0x110000000, 6 * kMiB, 2);
  own.forget_device(0);
  CHECK(own.resident(0).bytes == 0);
  CHECK(own.resident(1).bytes == 6 * kMiB);
  own.released(2);
  own.unmapped(0x100000000, 0x20000000);  // covers both addresses
  CHECK(own.resident(1).bytes == 0);
}

TEST_CASE("an import of the program's own export holds the memory after the creator's release", "[own]") {
  const ShareKey fd_file{5, 1234};
  SECTION("the driver hands the same handle back with one more reference") {
    Ledger own;
    own.created(1, 4 * kMiB, 0);
    own.exported(1, fd_file);
    own.imported(1, &fd_file, 0);
    own.released(1);
    own.mapped(0x100000000, 4 * kMiB, 1);
    CHECK(own.resident(0).bytes == 4 * kMiB);
    own.unmapped(0x100000000, 4 * kMiB);
    CHECK(own.resident(0).bytes == 4 * kMiB);  // the import's reference
    own.released(1);
    CHECK(own.resident(0).bytes == 0);
  }
  SECTION("the driver hands out a new handle to the same allocation") {
    Ledger own;
    own.created(1, 4 * kMiB, 0);
    own.exported(1, fd_file);
    own.imported(2, &fd_file, 0);
    CHECK(own.resident(0).bytes == 4 * kMiB);  // one allocation, counted once
    CHECK(own.resident(0).handles == 2);
    own.released(1);
    own.mapped(0x100000000, 4 * kMiB, 2);
    CHECK(own.resident(0).bytes == 4 * kMiB);
    own.unmapped(0x100000000, 4 * kMiB);
    own.released(2);
    CHECK(own.resident(0).bytes == 0);
    // The allocation is gone: its file names nothing of the process now.
    own.imported(3, &fd_file, 0);
    CHECK(own.resident(0).bytes == 0);  // an import placed nowhere, not mapped yet
    CHECK(own.resident(0).handles == 1);
  }
}

TEST_CASE("an import the ledger cannot place counts what the program maps of it", "[own]") {
  Ledger own;
  own.imported(9, nullptr, 1);
  CHECK(own.resident(1).handles == 1);
  own.mapped(0x200000000, 6 * kMiB, 9);
  CHECK(own.resident(1).bytes == 6 * kMiB);
  own.released(9);
  CHECK(own.resident(1).bytes == 6 * kMiB);  // mapped still
  own.unmapped(0x200000000, 6 * kMiB);
  CHECK(own.resident(1).bytes == 0);
  CHECK(own.resident(1).handles == 0);
}

TEST_CASE("a handle's facts: bytes, device, the program's references and mappings", "[ledger]") {
  Ledger own;
  CHECK_FALSE(own.facts(7).known);
  own.created(7, 4 * kMiB, 1);
  HandleFacts f = own.facts(7);
  CHECK(f.known);
  CHECK(f.bytes == 4 * kMiB);
  CHECK(f.device == 1);
  CHECK(f.refs == 1);
  CHECK(f.maps == 0);
  own.retained(7);
  own.mapped(0x100000000, 2 * kMiB, 7);
  own.mapped(0x100200000, 2 * kMiB, 7);
  f = own.facts(7);
  CHECK(f.refs == 2);
  CHECK(f.maps == 2);
  own.unmapped(0x100000000, 2 * kMiB);
  CHECK(own.facts(7).maps == 1);
  own.released(7);
  own.released(7);
  CHECK(own.facts(7).known);  // mapped still
  own.unmapped(0x100200000, 2 * kMiB);
  CHECK_FALSE(own.facts(7).known);
}

TEST_CASE("a kept handle stays recorded once the program let it go, and is not resident", "[ledger]") {
  Ledger own;
  own.created(1, 2 * kMiB, 0);
  own.keep(1);
  own.mapped(0x100000000, 2 * kMiB, 1);
  own.released(1);
  own.unmapped(0x100000000, 2 * kMiB);
  CHECK(own.facts(1).known);
  CHECK(own.facts(1).refs == 0);
  CHECK(own.resident(0).bytes == 0);
  CHECK(own.resident(0).handles == 0);
  // The program's cuMemCreate gets it back: its one reference.
  own.taken(1);
  CHECK(own.facts(1).refs == 1);
  CHECK(own.resident(0).bytes == 2 * kMiB);
  own.released(1);
  CHECK(own.resident(0).bytes == 0);
  // Let go (released for real): the record goes.
  own.let_go(1);
  CHECK_FALSE(own.facts(1).known);
  // Let go while the program holds it: the record stays the program's.
  own.created(2, 2 * kMiB, 0);
  own.keep(2);
  own.let_go(2);
  CHECK(own.resident(0).bytes == 2 * kMiB);
  own.released(2);
  CHECK_FALSE(own.facts(2).known);
}

TEST_CASE("a handle pagefast made is kept and none of the program's until taken", "[ledger]") {
  Ledger own;
  own.made(5, 2 * kMiB, 1);
  CHECK(own.facts(5).known);
  CHECK(own.facts(5).bytes == 2 * kMiB);
  CHECK(own.facts(5).device == 1);
  CHECK(own.resident(1).bytes == 0);
  own.taken(5);
  own.mapped(0x200000000, 2 * kMiB, 5);
  CHECK(own.resident(1).bytes == 2 * kMiB);
  own.forget_device(1);  // kept or not, a reset device's handles go
  CHECK_FALSE(own.facts(5).known);
  CHECK(own.resident(1).bytes == 0);
}

TEST_CASE("an import of the same handle is counted apart, and released first", "[ledger]") {
  const ShareKey fd_file{5, 1234};
  Ledger own;
  own.created(1, 4 * kMiB, 0);
  own.keep(1);
  own.exported(1, fd_file);
  own.imported(1, &fd_file, 0);
  CHECK(own.facts(1).refs == 2);
  CHECK(own.facts(1).imports == 1);
  own.released(1);
  CHECK(own.facts(1).refs == 1);
  CHECK(own.facts(1).imports == 0);
  CHECK(own.resident(0).bytes == 4 * kMiB);
  // A new handle to the same allocation is no import of this handle.
  own.imported(2, &fd_file, 0);
  CHECK(own.facts(2).imports == 0);
  CHECK(own.resident(0).bytes == 4 * kMiB);
}

TEST_CASE("threads noting their own handles at once leave the ledger exact", "[ledger]") {
  Ledger own;
  constexpr int kThreads = 4, kHandles = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&own, t] {
      for (int i = 0; i < kHandles; ++i) {
        const uint64_t handle = uint64_t(t) * kHandles + uint64_t(i) + 1;
        const uint64_t addr = handle << 24;
        own.created(handle, kMiB, t % 2);
        own.mapped(addr, kMiB, handle);
        if (i % 2) own.released(handle);
        if (i % 3 == 0) own.unmapped(addr, kMiB);
      }
    });
  for (auto& th : threads) th.join();
  // Left: the handles still referenced (even i) or still mapped (i not a
  // multiple of 3), one MiB each.
  uint64_t expected = 0;
  for (int i = 0; i < kHandles; ++i) expected += (i % 2 == 0 || i % 3 != 0) ? 1 : 0;
  CHECK(own.resident(0).handles == 2 * expected);
  CHECK(own.resident(1).handles == 2 * expected);
  CHECK(own.resident(0).bytes == 2 * expected * kMiB);
}
