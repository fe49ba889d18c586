// interpose/runtime.h: process-wide state of the shim: the configuration,
// parsed once; whether it runs as pass-through; the NUMA binding made at
// load. Initialised by the library constructor, or by the first hook if a
// program calls the driver from a constructor that runs before ours.
#pragma once

#include <atomic>
#include <string>

#include "policy/config.h"

namespace pagefast::runtime {

extern std::atomic<bool> g_ready;
extern bool g_passthrough;  // written once, before g_ready is set

void init_slow();

inline void ensure_init() {
  if (__builtin_expect(!g_ready.load(std::memory_order_acquire), 0)) init_slow();
}
inline bool passthrough() {
  ensure_init();
  return g_passthrough;
}

const Config& config();
std::string numa_json();

// The first allocations: the info banner (once), and the NUMA check of the
// device actually in use, which needs a current context. Returns true once
// both are done, so that the caller stops calling.
bool on_first_alloc();

}  // namespace pagefast::runtime
