// interpose/runtime.h: process-wide state of the shim: the configuration,
// parsed once; whether it runs as pass-through; the NUMA binding made at
// load. Initialised by the library constructor, or by the first hook if a
// program calls the driver from a constructor that runs before ours.
#pragma once

#include <atomic>
#include <string>

#include "interpose/pool/process.h"
#include "policy/config.h"

namespace pagefast::runtime {

// The runtime's state (runtime_state.h), in the process object.
inline State& state() { return pool::g_process.runtime; }

void init_slow();

inline void ensure_init() {
  if (__builtin_expect(!state().ready.load(std::memory_order_acquire), 0)) init_slow();
}
// Asked by every hook and door: so in pass-through it also notes that the
// program reached the driver through pagefast (driver_entered), and, when
// a setting was refused, lists the process for pagefast-stat with the
// reason (once). The note costs pool mode nothing; pass-through a relaxed
// load.
void note_passthrough_entry();
inline bool passthrough() {
  ensure_init();
  if (__builtin_expect(state().passthrough, 0) && !state().passthrough_entered.load(std::memory_order_relaxed))
    note_passthrough_entry();
  return state().passthrough;
}

// Whether the program called, or looked up through pagefast, any driver
// entry of the table. Without that, nothing is written at exit: a launcher
// (bash -c, timeout, torchrun) that inherits PAGEFAST_STATS must not
// overwrite its worker's file (docs/STATS.md).
bool driver_entered();

const Config& config();
std::string numa_json();

// The first allocations: the info banner (once), and the NUMA check of the
// device actually in use, which needs a current context. Returns true once
// both are done, so that the caller stops calling.
bool on_first_alloc();

}  // namespace pagefast::runtime
