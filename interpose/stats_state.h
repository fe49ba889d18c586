// interpose/stats_state.h: the call and door counters' process-wide state
// (interpose/stats.cpp), held by the process object
// (interpose/pool/process.h, docs/DESIGN.md "Process state"). The
// per-thread blocks are made at a thread's first counted call and never
// freed; a thread's own block stays a thread-local (stats.h t_calls), the
// hot path's one load.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "interpose/entries.h"
#include "interpose/thread_records.h"

namespace pagefast::stats {

enum class Door : int { Symbol = 0, Dlsym = 1, ProcAddress = 2, kCount };
constexpr int kCounterCount = kEntryCount + int(Door::kCount);

namespace detail {
struct Block;
}

struct State {
  ThreadRecords<detail::Block> blocks;
  pthread_key_t key{};
  pthread_once_t key_once = PTHREAD_ONCE_INIT;
  // A fallback for threads whose block could not be made: shared, atomic.
  std::atomic<uint64_t> overflow[kCounterCount] = {};
  // stats:off turns call counting off (set once at init, before any hook).
  bool count_calls = true;
  // A call made while counting is off: remembered once, for any_activity().
  std::atomic<bool> uncounted_call{false};
};

}  // namespace pagefast::stats
