// policy/sleep_gate.cpp: SleepGate (sleep_gate.h).
#include "policy/sleep_gate.h"

#include <sched.h>

#include "policy/state.h"

namespace pagefast::policy {
namespace {

// A number per thread (State::next_thread), made at the thread's first
// close or wait, never on the awake path.
__thread uint64_t t_thread __attribute__((tls_model("initial-exec"))) = 0;

__thread bool t_no_wait __attribute__((tls_model("initial-exec"))) = false;  // SleepGate::NoWait

uint64_t thread_number() {
  if (!t_thread) t_thread = g_state.next_thread.fetch_add(1, std::memory_order_relaxed);
  return t_thread;
}

}  // namespace

bool SleepGate::enter() {
  while (true) {
    in_flight_.fetch_add(1, std::memory_order_seq_cst);
    if (__builtin_expect(!asleep_.load(std::memory_order_seq_cst), 1)) return true;
    leave();
    if (flags_.load(std::memory_order_relaxed) & kSleepFail) return false;
    // The thread that put the pool to sleep would wait for its own wake.
    if (closer_.load(std::memory_order_relaxed) == thread_number()) return false;
    if (t_no_wait) return false;  // the caller waits in wait_for_wake, outside its lock
    std::unique_lock<std::mutex> lock(wait_mutex_);
    wait_cv_.wait(lock, [&] { return !asleep_.load(std::memory_order_acquire); });
  }
}

bool SleepGate::wait_for_wake() {
  if (!asleep_.load(std::memory_order_seq_cst)) return true;
  if (flags_.load(std::memory_order_relaxed) & kSleepFail) return false;
  if (closer_.load(std::memory_order_relaxed) == thread_number()) return false;
  std::unique_lock<std::mutex> lock(wait_mutex_);
  wait_cv_.wait(lock, [&] { return !asleep_.load(std::memory_order_acquire); });
  return true;
}

SleepGate::NoWait::NoWait() : before_(t_no_wait) { t_no_wait = true; }
SleepGate::NoWait::~NoWait() { t_no_wait = before_; }

void SleepGate::close(unsigned flags) {
  flags_.store(flags, std::memory_order_relaxed);
  closer_.store(thread_number(), std::memory_order_relaxed);
  asleep_.store(true, std::memory_order_seq_cst);
  // Slow paths already past the gate finish first (they may be growing or
  // refilling a cache); new ones wait or fail at the gate.
  while (in_flight_.load(std::memory_order_seq_cst) != 0) sched_yield();
}

void SleepGate::open() {
  {
    std::lock_guard<std::mutex> lock(wait_mutex_);
    asleep_.store(false, std::memory_order_seq_cst);
  }
  wait_cv_.notify_all();
}

}  // namespace pagefast::policy
