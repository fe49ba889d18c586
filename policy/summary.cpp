// policy/summary.cpp: the one-line summary (summary.h).
#include "policy/summary.h"

#include <cstdio>

namespace pagefast {
namespace {

// A share in percent with one decimal, rounded down: 99.96% of the calls
// is "99.9%", never "100.0%", which is kept for all of them.
std::string percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "0%";
  if (part >= whole) return "100%";
  const uint64_t tenths = part * 1000 / whole;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llu.%llu%%", static_cast<unsigned long long>(tenths / 10),
                static_cast<unsigned long long>(tenths % 10));
  return buf;
}

std::string duration(uint64_t ns) {
  char buf[32];
  if (ns < 10000000ull) std::snprintf(buf, sizeof buf, "%.2f ms", double(ns) / 1e6);
  else if (ns < 10000000000ull) std::snprintf(buf, sizeof buf, "%.0f ms", double(ns) / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1f s", double(ns) / 1e9);
  return buf;
}

}  // namespace

std::string summary_line(uint64_t alloc_calls, const std::vector<policy::PoolStats>& devices) {
  uint64_t hits = 0, driver_ns = 0;
  for (const policy::PoolStats& s : devices) {
    hits += s.hits;
    driver_ns += s.growth_ns + s.release_ns;
  }
  if (alloc_calls == 0) return "no allocation call yet";
  // hits: allocations the pool answered from memory it already held; the
  // rest grew the pool or went to the driver.
  return std::to_string(alloc_calls) + " allocation calls, " + percent(hits, alloc_calls) +
         " from memory the pool already held; " + duration(driver_ns) +
         " in the driver's memory calls (creating, mapping, unmapping, releasing)";
}

std::string sleep_words(bool any_asleep, bool partly, int asleep_tags, int tags) {
  if (!any_asleep) return "awake";
  if (!partly) return "asleep";
  if (tags <= 0) return "partly asleep";
  if (asleep_tags >= tags) return "partly asleep (all " + std::to_string(tags) + " tags; the untagged memory awake)";
  return "partly asleep (" + std::to_string(asleep_tags) + " of " + std::to_string(tags) + " tag" +
         (tags == 1 ? "" : "s") + ")";
}

std::string forwarded_summary_line(uint64_t alloc_calls) {
  if (alloc_calls == 0) return "pool:off: no allocation call yet";
  return "pool:off: " + std::to_string(alloc_calls) + " allocation call" + (alloc_calls == 1 ? "" : "s") +
         ", each forwarded to the driver (the pool is off and holds no memory)";
}

}  // namespace pagefast
