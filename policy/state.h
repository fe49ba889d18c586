// policy/state.h: policy's process-wide state in one object (docs/DESIGN.md
// "Process state"): the page map that the driver entry points consult, and
// the two id counters (the thread caches' buffer ids, the sleep gate's
// thread numbers). policy/ names no part of interpose/, so this is its own
// object beside the process object (interpose/pool/process_state.h).
// Constant-initialised (constexpr constructors, trivial destructors: in
// .bss, no guard variable, nothing run at exit): usable before any
// constructor has run.
#pragma once

#include <atomic>
#include <cstdint>

#include "policy/page_map.h"
#include "policy/thread_cache.h"

namespace pagefast::policy {

struct State {
  PageMap page_map;
  // Buffer ids are process-wide: unique over all devices, never reused
  // (thread_registry.cpp take_buffer_ids).
  std::atomic<uint64_t> next_buffer_id{kBufferIdBase};
  // A number per thread, never reused (a thread id may be): made at the
  // thread's first close or wait (sleep_gate.cpp).
  std::atomic<uint64_t> next_thread{1};
  // The thread caches' asymmetric barrier (owner_lock.cpp): which one (0
  // not decided yet), and the page of the TLB shootdown.
  std::atomic<int> barrier{0};
  std::atomic<void*> barrier_page{nullptr};
  std::atomic<uint64_t> barriers_run{0};
};

extern State g_state;  // page_map.cpp

// The process-wide page map. Inline, so a lookup on the hot paths is the
// lookup alone.
inline PageMap& global_page_map() { return g_state.page_map; }

}  // namespace pagefast::policy
