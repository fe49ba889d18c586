// tests/policy/test_release_policy.cpp: ReleasePolicy alone (policy/
// release_policy.h) over hand-made times: when trimming may run, and the
// decay's answers and drains.
#include <catch2/catch.hpp>

#include "policy/config.h"
#include "policy/release_policy.h"
#include "policy/units.h"

using namespace pagefast;
using namespace pagefast::policy;

namespace {
constexpr uint64_t kT0 = uint64_t(1000) * 1000 * 1000 * 1000;
}

TEST_CASE("release policy: no trimming without a threshold") {
  ReleasePolicy release(kDefaultReleaseDelayNs, kUnlimited);
  CHECK_FALSE(release.claim_trim(kT0, 0));
}

TEST_CASE("release policy: one trim per interval, none within the grace after a growth") {
  ReleasePolicy release(kDefaultReleaseDelayNs, 8 * kMiB);
  CHECK(release.threshold_bytes() == 8 * kMiB);
  CHECK(release.claim_trim(kT0, 0));
  CHECK_FALSE(release.claim_trim(kT0 + 1, 0));  // claimed this interval
  CHECK(release.claim_trim(kT0 + kTrimIntervalNs, 0));
  const uint64_t later = kT0 + 2 * kTrimIntervalNs;
  CHECK_FALSE(release.claim_trim(later, later - 1));  // just grew
  CHECK(release.claim_trim(later + kTrimGraceAfterGrowthNs, later - 1));
}

TEST_CASE("release policy: decay releases idle memory above the floor once it stayed idle") {
  const uint64_t floor = 4 * kMiB;
  ReleasePolicy release(0, floor);  // no delay: all above the floor goes
  CHECK(release.decay(kT0, 64 * kMiB, 0) <= 64 * kMiB - floor);
  const uint64_t step = release.step_interval_ns();
  CHECK(step >= kFootprintMinStepNs);
  const uint64_t releasable = release.decay(kT0 + step, 64 * kMiB, 0);
  CHECK(releasable == 64 * kMiB - floor);
  release.note_released(releasable);
  // A growth since the last step: the pool was short, nothing to release.
  CHECK(release.decay(kT0 + 2 * step, floor, 1) == 0);
}

TEST_CASE("release policy: idle memory outside free chunks is gathered once per window") {
  ReleasePolicy release(kDefaultReleaseDelayNs, kUnlimited);
  CHECK(release.claim_drain(kT0));
  CHECK_FALSE(release.claim_drain(kT0 + 1));
  CHECK(release.claim_drain(kT0 + kDefaultReleaseDelayNs));
}
