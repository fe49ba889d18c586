// policy/sleep_gate.h: the gate every slow path of a pool passes
// (docs/POOL.md "Sleep and wake"). While the pool sleeps, a slow path
// waits at the gate for wake, or fails (kSleepFail); sleep closes the gate
// and waits for the slow paths already past it, so that none is growing or
// refilling a cache while chunks go. The hit path never passes it: sleep
// empties the thread caches, so every allocation then reaches a slow path.
//
// The thread that closed the gate never waits at it: its wake could only
// come from itself, so its slow paths fail (out of memory) while asleep,
// whatever the flags; every other thread waits or fails as the flags say.
//
// Lock: its own (with the condition variable), held only to wait or to
// open; never held while taking another.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace pagefast::policy {

// Sleep: the bits of pagefast_sleep's flags.
constexpr unsigned kSleepKeep = 1;  // contents go to pinned host memory first
constexpr unsigned kSleepFail = 2;  // allocations fail while asleep (default: wait)
// Where kept contents go, with kSleepKeep (a region's policy, docs/SLEEP.md;
// never a flag of pagefast_sleep): kSleepToDisk, to a file per live block
// (HostCopy::mode: the provider writes it, reads it back at wake and
// deletes it); kSleepHostRelease, to host memory the provider gives back
// at wake instead of keeping it for the next sleep.
constexpr unsigned kSleepToDisk = 8;
constexpr unsigned kSleepHostRelease = 16;
constexpr unsigned kSleepKeepModes = kSleepKeep | kSleepToDisk | kSleepHostRelease;
// HostCopy::mode of copy_from_host only: the host memory stays whole until
// host_free even where the provider would give its pages back as each copy
// ends (sleep_host_keep:off), so that a wake which makes several copies all
// or none can undo them (the program's own VMM memory, own_vmm_copy.cpp).
constexpr unsigned kSleepHoldHost = 32;

class SleepGate {
 public:
  // Entered before any slow path; false when asleep with kSleepFail, or
  // when the calling thread is the one that closed the gate (the caller
  // answers out of memory); waits while asleep otherwise.
  // REQUIRES: leave() after a true answer.
  bool enter();
  void leave() { in_flight_.fetch_sub(1, std::memory_order_seq_cst); }
  struct Pass {
    SleepGate* gate;
    ~Pass() { gate->leave(); }
  };

  bool asleep() const { return asleep_.load(std::memory_order_acquire); }
  // Waits for wake without entering, for a caller that must not wait
  // inside its own lock (a region's shared cache): true once awake; false
  // at once where enter() would fail (kSleepFail, the closing thread).
  bool wait_for_wake();
  // While one lives on a thread, enter() there fails instead of waiting:
  // the caller gives up its lock and calls wait_for_wake().
  class NoWait {
   public:
    NoWait();
    ~NoWait();
    NoWait(const NoWait&) = delete;
    NoWait& operator=(const NoWait&) = delete;

   private:
    bool before_;
  };
  // Asleep from now on (with `flags` for the slow paths that come), closed
  // by the calling thread; returns once no slow path is past the gate.
  void close(unsigned flags);
  // Awake: the waiting slow paths go on.
  void open();

 private:
  std::atomic<bool> asleep_{false};
  std::atomic<unsigned> flags_{0};
  std::atomic<uint64_t> closer_{0};  // the thread that closed the gate (thread_number())
  std::atomic<uint64_t> in_flight_{0};
  std::mutex wait_mutex_;  // with wait_cv_: slow paths waiting for wake
  std::condition_variable wait_cv_;
};

}  // namespace pagefast::policy
