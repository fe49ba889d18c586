// policy/summary.h: the one line that says what pagefast did for a
// process, for a user to quote: the allocation calls it saw, the share the
// pool served from memory it held (no driver call), and the time spent in
// the driver's memory calls (creating, mapping, unmapping and releasing
// chunks). Written at exit at level info and shown by
// pagefast-stat; read from the figures the pool keeps anyway. Pure C++.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/pool_stats.h"

namespace pagefast {

// alloc_calls: cuMemAlloc_v2 calls seen; devices: each pool's figures.
std::string summary_line(uint64_t alloc_calls, const std::vector<policy::PoolStats>& devices);

// A process's sleep in words: "awake", "asleep", or, where some pools
// sleep and others are awake (a tag's sleep), "partly asleep (N of M
// tags)"; asleep_tags of tags are asleep. any_asleep: some device has a
// pool asleep; partly: some device has pools awake beside it.
std::string sleep_words(bool any_asleep, bool partly, int asleep_tags, int tags);

// The same line for a process whose pool is off (pool:off): its calls
// were counted and each went to the driver, so there is no share served
// from the pool and no pool time to state.
std::string forwarded_summary_line(uint64_t alloc_calls);

}  // namespace pagefast
