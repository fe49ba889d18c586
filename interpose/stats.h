// interpose/stats.h: call and door counters, and the stats document
// (PAGEFAST_STATS; runtime.cpp writes it at exit through files.h). Counting costs a thread-local add: each
// thread owns a block of counters that readers sum; blocks of exited
// threads are kept and re-used, so no count is ever lost.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "interpose/entries.h"
#include "interpose/stats_state.h"
#include "policy/config.h"
#include "policy/owner_add.h"
#include "policy/pool_stats.h"

namespace pagefast::stats {

// (Door: stats_state.h.)

namespace detail {
// This thread's call counters, indexed by Entry, from its first counted
// call on (NULL before, and always with stats:off): count_call's inline
// path, one thread-local load and an add on every hooked call.
extern __thread std::atomic<uint64_t>* t_calls __attribute__((tls_model("initial-exec")));
void count_call_slow(Entry entry);
}  // namespace detail

// The inline half of count_call: counts and returns true once this thread
// has its block; false (nothing counted) before, and always with stats:off.
// A thread's block is made only by a call the hooks counted, so true also
// says that the runtime is initialised and not in pass-through
// (hooks_common.h active()).
inline bool count_call_fast(Entry entry) {
  std::atomic<uint64_t>* calls = detail::t_calls;
  if (__builtin_expect(calls == nullptr, 0)) return false;
  // Only this thread writes its block: one add to memory (owner_add).
  policy::owner_add(calls[int(entry)], 1);
  return true;
}

inline void count_call(Entry entry) {
  if (__builtin_expect(!count_call_fast(entry), 0)) detail::count_call_slow(entry);
}
// PAGEFAST_CONF stats:off: calls are not counted (doors still are).
void set_call_counting(bool on);
void count_door(Door door);
uint64_t calls(Entry entry);
uint64_t doors(Door door);

// Whether this process called, or looked up through pagefast, any driver
// entry of the table (counted, or seen while stats:off stopped counting).
// A process that did neither writes no stats or report file at exit
// (docs/STATS.md).
bool any_activity();

// Every tag's figures (docs/SLEEP.md), in slot order: the stats
// document's "tags", the live segment's and Prometheus's. Never waits for
// a sleep or a wake (pool::tag_figures reads what their last step left).
std::vector<policy::TagStats> tags();

// The whole stats document as JSON text (docs/STATS.md "Schema"), for the
// given configuration and NUMA report. Reads counters only: safe at exit.
std::string document(const Config& config, const std::string& numa_json);

}  // namespace pagefast::stats
