// tests/numa/test_cpu_set.cpp: CpuSet and the kernel's cpulist format,
// including the malformed lists a broken or fake sysfs may hold.
#include <catch2/catch.hpp>

#include "numa/cpu_set.h"

using pagefast::numa::CpuSet;
using pagefast::numa::kMaxCpuId;
using pagefast::numa::parse_cpulist;

namespace {
std::string roundtrip(const std::string& text) {
  CpuSet cpus;
  REQUIRE(parse_cpulist(text, &cpus));
  return cpus.to_list();
}
}  // namespace

TEST_CASE("cpulist: the forms the kernel writes", "[numa][cpulist]") {
  CHECK(roundtrip("0-31\n") == "0-31");
  CHECK(roundtrip("0-55,112-167\n") == "0-55,112-167");
  CHECK(roundtrip("3") == "3");
  CHECK(roundtrip("0,2,4-5,6") == "0,2,4-6");  // adjacent ranges fold
  CHECK(roundtrip("  1-2  \n") == "1-2");
  CHECK(roundtrip("8191") == "8191");
}

TEST_CASE("cpulist: empty is the empty set (memory-only node)", "[numa][cpulist]") {
  CpuSet cpus{5};
  REQUIRE(parse_cpulist("\n", &cpus));
  CHECK(cpus.empty());
  REQUIRE(parse_cpulist("", &cpus));
  CHECK(cpus.empty());
}

TEST_CASE("cpulist: malformed lists are refused and leave the output alone", "[numa][cpulist]") {
  const char* bad[] = {"0-x", "a",       "3-1", "1,,2",  "1,",          ",1",    "-1",     "0-",
                       "1 2", "0-7:2/4", "0x3", "1-2-3", "99999999999", "65536", "0-65536"};
  for (const char* text : bad) {
    CpuSet cpus{7};
    INFO("text: " << text);
    CHECK_FALSE(parse_cpulist(text, &cpus));
    CHECK(cpus.to_list() == "7");
  }
  CpuSet top;
  CHECK(parse_cpulist(std::to_string(kMaxCpuId), &top));
}

TEST_CASE("CpuSet: set operations", "[numa][cpulist]") {
  CpuSet a, b;
  a.add_range(0, 63);
  b.add_range(32, 127);
  CHECK(a.intersect(b).to_list() == "32-63");
  CHECK(a.unite(b).to_list() == "0-127");
  CHECK(a.intersect(b).subset_of(a));
  CHECK_FALSE(a.subset_of(b));
  CHECK(CpuSet{}.subset_of(a));
  CHECK(a.count() == 64);
  CHECK(b.last() == 127);
  CHECK(CpuSet{}.last() == -1);
  // Equality ignores how far the bitmap happened to grow.
  CpuSet wide{1, 200};
  CpuSet narrow = wide.intersect(CpuSet{1});
  CHECK(narrow == CpuSet{1});
  CHECK(narrow != wide);
  CHECK(CpuSet{0, 1}.members() == std::vector<int>{0, 1});
}
