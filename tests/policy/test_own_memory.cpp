// tests/policy/test_own_memory.cpp: the ledger of the program's own VMM
// memory (policy/own_memory.h), which sleep's answer reads.
#include <catch2/catch.hpp>

#include "policy/own_memory.h"
#include "policy/units.h"

using namespace pagefast;
using namespace pagefast::policy;

TEST_CASE("a handle is the program's while it holds a reference or maps it", "[own]") {
  OwnMemory own;
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
  OwnMemory own;
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
  OwnMemory own;
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
    OwnMemory own;
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
    OwnMemory own;
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
  OwnMemory own;
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
