// interpose/live/publisher.h: the library's side of live stats. One thread
// copies the figures (call counters, each device's pool stats, the NUMA
// report) into this process's segment every kPublishIntervalMs; the hot
// path does nothing for it (the counters it reads exist anyway).
#pragma once

#include "policy/config.h"

namespace pagefast::live {

constexpr int kPublishIntervalMs = 500;

// At the first allocation (never in a constructor): creates the segment
// and starts the thread, once. A failure is one warning; the program runs
// on without live stats.
void start(const Config& config);

// At the first driver call of a process whose settings were refused
// (pass-through): the segment with its mode and the reason, published
// once and no thread (nothing is counted in pass-through, so nothing
// changes), so that pagefast-stat lists the process.
void start_passthrough(const Config& config);

// At exit (the library's destructor): removes the segment. No CUDA, no
// join (the thread may be anywhere; it only reads counters).
void stop_at_exit();
// The process's fork handler, in the child (interpose/runtime.cpp).
void after_fork_child();

}  // namespace pagefast::live
