// interpose/hooks_state.h: the hooks' process-wide state (hooks.cpp, the
// capture list of hooks_capture.cpp), held by the process object
// (interpose/pool/process_state.h, docs/DESIGN.md "Process state").
// Constant-initialised; the capture list past the entries is made at its
// first need and never destroyed (used at exit).
#pragma once

#include <cuda.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace pagefast::hook {

// The capture list's lock: captures past the entries are rare, and the
// holder only edits the list.
class CaptureLock {
 public:
  void lock() {
    while (held_.exchange(true, std::memory_order_acquire))
      while (held_.load(std::memory_order_relaxed)) sched_yield();
  }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

constexpr int kCaptureEntries = 64;

struct State {
  // Streams being captured into a graph (hooks_capture.cpp): entries, each
  // a stream's handle plus one (0: free), then the list under the lock.
  std::atomic<uintptr_t> capture_entry[kCaptureEntries] = {};
  std::atomic<int> capture_entries_used{0};  // entries ever taken: the ones searched
  std::atomic<int> capture_overflow{0};      // streams in the list
  CaptureLock capture_lock;
  std::vector<CUstream>* capturing = nullptr;  // the list, under capture_lock
  // The first allocations noted themselves (hooks.cpp alloc_counted).
  std::atomic<bool> first_alloc_done{false};
};

}  // namespace pagefast::hook
