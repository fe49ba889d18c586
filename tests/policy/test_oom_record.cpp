// tests/policy/test_oom_record.cpp: OomRecorder alone (policy/
// oom_record.h): counts, the record and its request, withdrawal.
#include <catch2/catch.hpp>

#include "policy/oom_record.h"

using namespace pagefast;
using namespace pagefast::policy;

TEST_CASE("oom record: an answer is counted and recorded, its request follows") {
  OomRecorder oom;
  OomRecord r;
  REQUIRE(oom.try_read(&r));
  CHECK(r.count == 0);
  oom.note_request(1000);  // no answer noted: left alone
  REQUIRE(oom.try_read(&r));
  CHECK(r.request_bytes == 0);
  oom.note(Granules(3), true, Shortfall{4 * kMiB, 2 * kMiB, 0, 64 * kMiB}, false);
  CHECK(oom.ooms() == 1);
  REQUIRE(oom.try_read(&r));
  CHECK(r.count == 1);
  CHECK(r.needed_bytes == 3 * kGranuleBytes);
  CHECK(r.for_slab);
  CHECK(r.request_pending);
  CHECK(r.limit_bytes == 64 * kMiB);
  CHECK(r.released_bytes == 4 * kMiB);
  CHECK(r.free_bytes == 2 * kMiB);
  CHECK(r.room_under_limit_bytes == 0);
  CHECK_FALSE(r.forwarded);
  oom.note_request(5000);
  REQUIRE(oom.try_read(&r));
  CHECK(r.request_bytes == 5000);
  CHECK_FALSE(r.request_pending);
}

TEST_CASE("oom record: a withdrawn answer puts the one before back") {
  OomRecorder oom;
  oom.note(Granules(1), false, Shortfall{0, 0, kUnlimited}, true);
  oom.note_request(100);
  oom.count_passthrough();
  oom.note(Granules(2), true, Shortfall{}, true);
  oom.count_passthrough();
  CHECK(oom.ooms() == 2);
  CHECK(oom.passthroughs() == 2);
  oom.withdraw(true);
  CHECK(oom.ooms() == 1);
  CHECK(oom.passthroughs() == 1);
  OomRecord r;
  REQUIRE(oom.try_read(&r));
  CHECK(r.count == 1);
  CHECK(r.request_bytes == 100);
  CHECK(r.room_under_limit_bytes == kUnlimited);
  CHECK(r.forwarded);
}
