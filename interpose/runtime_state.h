// interpose/runtime_state.h: the runtime's process-wide state
// (interpose/runtime.cpp: start-up, exit, the fork handler), held by the
// process object (interpose/pool/process.h, docs/DESIGN.md "Process
// state"). Constant-initialised: the library's constructor may run before
// any dynamic initialiser, and a hook before the constructor. The
// configuration, which has constructors, is made on the heap at init.
#pragma once

#include <atomic>
#include <mutex>

#include "policy/log_sink.h"

namespace pagefast::runtime {

struct Started;  // runtime.cpp: the configuration, made once by init_slow

// A NUMA line held until the first allocation (runtime.cpp
// hold_numa_line); fixed storage: the sink runs in the constructor.
struct HeldLine {
  LogLevel level;
  char text[384];
};
constexpr int kHeldLines = 8;

struct State {
  std::atomic<bool> ready{false};
  bool passthrough = true;  // written once, before `ready` is set
  // A hook or a door ran in pass-through mode (which counts nothing).
  std::atomic<bool> passthrough_entered{false};
  Started* started = nullptr;  // NULL until init_slow made it; never destroyed
  // Recursive: a hook reached from inside init (a logger sink, say) must
  // not deadlock; it sees pass-through until init is complete.
  std::recursive_mutex init_mutex;
  bool init_begun = false;  // under init_mutex
  HeldLine held[kHeldLines] = {};
  std::atomic<int> held_count{0};
  std::atomic<bool> bannered{false};      // the first allocation's banner was written
  std::atomic<bool> numa_checked{false};  // ... and the binding checked against its device
};

}  // namespace pagefast::runtime
