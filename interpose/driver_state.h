// interpose/driver_state.h: the real driver's table and the dlsym door's
// notes (interpose/loader.cpp, doors.cpp), held by the process object
// (interpose/pool/process_state.h, docs/DESIGN.md "Process state").
// Constant-initialised: the table is filled once, under `load_mutex`, by
// the first call that needs the driver, and never changes after.
#pragma once

#include <atomic>
#include <mutex>

#include "interpose/real_driver_table.h"

namespace pagefast::driver {

struct State {
  RealDriver table{};
  // &table once loaded (real_driver(): the hot path's one load), NULL before.
  std::atomic<const RealDriver*> loaded{nullptr};
  std::atomic<int> load_state{0};  // 0 not tried, 1 loaded, 2 unavailable
  std::mutex load_mutex;
  // Door 1 counts an entry once, at its first call through the symbol
  // (doors.cpp note_symbol).
  std::atomic<bool> symbol_bound[kEntryCount] = {};
};

}  // namespace pagefast::driver
