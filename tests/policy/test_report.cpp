// tests/policy/test_report.cpp: the memory report's figures on a fake
// provider: the out-of-memory record (request, limit, what was left), the
// size-class and arena occupancy, fragmentation and the largest block
// allocatable without growing, and the text's units.
#include <catch2/catch.hpp>

#include <vector>

#include "harness.h"
#include "policy/format.h"
#include "policy/pool_report.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

TEST_CASE("report: units in MiB below 1 GiB, GiB above, one decimal", "[report]") {
  CHECK(format_bytes(0, ByteStyle::Report) == "0.0 MiB");
  CHECK(format_bytes(3 * kMiB / 2, ByteStyle::Report) == "1.5 MiB");
  CHECK(format_bytes(kGiB + kGiB / 2, ByteStyle::Report) == "1.5 GiB");
}

TEST_CASE("the one byte formatter: exact units for settings, three digits for tables", "[report]") {
  CHECK(format_bytes(256 * kMiB, ByteStyle::Exact) == "256M");
  CHECK(format_bytes(40 * kGiB, ByteStyle::Exact) == "40G");
  CHECK(format_bytes(1536 * kMiB, ByteStyle::Exact) == "1536M");
  CHECK(format_bytes(3 * kKiB, ByteStyle::Exact) == "3K");
  CHECK(format_bytes(1000, ByteStyle::Exact) == "1000B");
  CHECK(format_bytes(0, ByteStyle::Exact) == "0B");
  CHECK(format_bytes(kUnlimited, ByteStyle::Exact) == "max");
  CHECK(format_bytes(kUnlimited, ByteStyle::Table) == "max");
  CHECK(format_bytes(512, ByteStyle::Table) == "512B");
  CHECK(format_bytes(3 * kGiB / 2, ByteStyle::Table) == "1.50G");
  CHECK(format_bytes(32 * kGiB, ByteStyle::Table) == "32.0G");
  CHECK(format_bytes(190 * kMiB, ByteStyle::Table) == "190M");
}

TEST_CASE("report: no OOM yet, then the last OOM with its request and limit", "[report]") {
  PoolUnderTest t(512 * kMiB, FakeProvider::Backing::None, config_with(16 * kMiB, 16 * kMiB));
  Attached cache(t.pool);
  uint64_t small = 0;
  REQUIRE(t.alloc(*cache, 1000, &small) == AllocStatus::Ok);
  PoolReport r = t.pool.report();
  CHECK(r.last_oom.count == 0);
  CHECK(r.class_count >= 1);
  CHECK(report_text(0, r).find("last out-of-memory         none") != std::string::npos);

  std::vector<uint64_t> blocks;
  uint64_t p = 0;
  while (t.alloc(*cache, 3 * kMiB, &p) == AllocStatus::Ok) blocks.push_back(p);
  REQUIRE(blocks.size() >= 2);
  // Free every other block: free memory scattered in runs of 4 MiB.
  for (size_t i = 0; i < blocks.size(); i += 2) REQUIRE(t.free(*cache, blocks[i]) == FreeStatus::Ok);
  t.pool.trim();  // retires the quarantine: the freed runs are free home memory
  r = t.pool.report();
  CHECK_FALSE(r.arena_busy);
  CHECK(r.last_oom.count == 1);
  CHECK(r.last_oom.request_bytes == 3 * kMiB);
  CHECK(r.last_oom.limit_bytes == 16 * kMiB);
  CHECK_FALSE(r.last_oom.forwarded);
  CHECK(r.chunks >= 1);
  CHECK(r.free_home.count() > 0);
  CHECK(r.largest_free_run <= r.free_home);
  const double f = fragmentation(r);
  CHECK(f >= 0.0);
  CHECK(f < 1.0);
  if (r.free_blocks > 1) CHECK(f > 0.0);
  const std::string text = report_text(0, r);
  CHECK(text.find("device 0\n") == 0);
  CHECK(text.find("request                  3.0 MiB (3145728 bytes)") != std::string::npos);
  CHECK(text.find("limit                    16.0 MiB") != std::string::npos);
  CHECK(text.find("fragmentation") != std::string::npos);
  CHECK(text.find(r.free_home > r.largest_free_run ? "by stitching" : "(the largest free run)") != std::string::npos);
  for (size_t i = 1; i < blocks.size(); i += 2) REQUIRE(t.free(*cache, blocks[i]) == FreeStatus::Ok);
  REQUIRE(t.free(*cache, small) == FreeStatus::Ok);
  CHECK(t.pool.check() == "");
}
