// policy/owner_lock.h: the lock of a thread cache (thread_cache.h), made
// for one owner that takes it on every allocation and free and others
// that take it rarely (a drain under pressure, a trim, a sleep, the
// memory report).
//
// The owner's quick sections (the pool hit's pop and push) take no locked
// instruction: the owner marks itself busy with a plain store and checks
// the lock word with a plain load. A thread other than the owner locks
// with an exchange, then runs an asymmetric barrier, which makes every
// running thread of the process pass a full fence, and waits for the
// owner's busy mark to clear. Either the owner saw the lock taken (and goes
// the slow way, waiting for it), or the other thread sees the owner busy
// (and waits): never both inside. This is the pattern of liburcu's
// membarrier flavour and folly's asymmetric barrier. The barrier is
// membarrier's private expedited command (Linux 4.14), or where the kernel
// refuses it (an older kernel, a seccomp filter) a TLB shootdown: write
// access taken from a page of the process, which interrupts every
// processor that runs it. The owner itself locks with the exchange alone:
// it is never inside its own quick section then.
//
// Who the owner is: the thread that attached the cache as its own, or,
// for a cache that threads share one at a time under a mutex of theirs
// (a region's, the device's fallback cache), the thread holding that mutex
// (Borrow). A cache without one has no quick section running, and any
// locker runs the barrier.
//
// ThreadSanitizer does not see the barrier: its builds take the exchange
// in the quick section too (PF_OWNER_LOCK_ASYMMETRIC 0).
#pragma once

#include <atomic>
#include <cstdint>

#include "policy/spin.h"

#if defined(__SANITIZE_THREAD__)
#define PF_OWNER_LOCK_ASYMMETRIC 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PF_OWNER_LOCK_ASYMMETRIC 0
#endif
#endif
#ifndef PF_OWNER_LOCK_ASYMMETRIC
#define PF_OWNER_LOCK_ASYMMETRIC 1
#endif

namespace pagefast::policy {

// The barrier: every thread of the process that runs now passes a full
// memory fence before it returns.
void asymmetric_barrier();
// Which barrier this process uses (the first call decides; never from a
// static constructor): membarrier, or the TLB shootdown.
enum class BarrierKind { Membarrier, Shootdown };
BarrierKind barrier_kind();
// How many barriers this process ran (a drain's cost, for the tests).
uint64_t barriers_run();
// Tests: run the other barrier from now on. Returns the one before.
BarrierKind set_barrier_kind_for_test(BarrierKind kind);
// This thread's token (the address of a thread-local): what an owner is
// known by.
const void* owner_token();

class OwnerLock {
 public:
  // Spins before yielding: the holder never waits on anything while holding.
  static constexpr int kSpinsBeforeYield = 64;

  // Any thread. Waits for the holder and, taken by other than the owner,
  // for the owner's quick section.
  void lock() {
    take();
    if (foreign()) wait_for_owner();
  }
  void unlock() { held_.store(0, std::memory_order_release); }
  // For readers that must never wait (the report at process exit): false
  // when held, or when the owner is inside a quick section.
  bool try_lock() {
    if (held_.exchange(1, std::memory_order_acquire) != 0) return false;
    if (foreign() && !owner_idle()) {
      unlock();
      return false;
    }
    return true;
  }

  // The owner's quick section: false (nothing taken) when another thread
  // holds the lock. leave_quick() ends it.
  bool enter_quick() {
#if PF_OWNER_LOCK_ASYMMETRIC
    busy_.store(1, std::memory_order_relaxed);
    // The compiler keeps the store before the load; the processor may
    // not, which the other side's barrier makes up for.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (__builtin_expect(held_.load(std::memory_order_acquire) == 0, 1)) return true;
    busy_.store(0, std::memory_order_release);
    return false;
#else
    return held_.exchange(1, std::memory_order_acquire) == 0;
#endif
  }
  void leave_quick() {
#if PF_OWNER_LOCK_ASYMMETRIC
    busy_.store(0, std::memory_order_release);
#else
    held_.store(0, std::memory_order_release);
#endif
  }

  // The calling thread becomes the owner (it attaches the cache as its
  // own), or none is. REQUIRES no quick section running.
  void own() { owner_.store(owner_token(), std::memory_order_relaxed); }
  void disown() { owner_.store(nullptr, std::memory_order_relaxed); }
  bool owned_by_caller() const { return owner_.load(std::memory_order_relaxed) == owner_token(); }

  // A shared cache's owner for the scope: the thread that holds the mutex
  // under which its users take turns.
  class Borrow {
   public:
    explicit Borrow(OwnerLock& lock) : lock_(lock) { lock_.own(); }
    ~Borrow() { lock_.disown(); }
    Borrow(const Borrow&) = delete;
    Borrow& operator=(const Borrow&) = delete;

   private:
    OwnerLock& lock_;
  };

 private:
  // Whether a lock taken now must wait for the owner's quick section.
  bool foreign() const { return PF_OWNER_LOCK_ASYMMETRIC && !owned_by_caller(); }
  void take() {
    int spins = 0;
    while (held_.exchange(1, std::memory_order_acquire)) {
      while (held_.load(std::memory_order_relaxed)) {
        if (++spins > kSpinsBeforeYield) sched_yield();
        else cpu_relax();
      }
    }
  }
  // REQUIRES held by this thread, not the owner: the barrier, then true
  // when the owner is outside its quick section.
  bool owner_idle();
  void wait_for_owner();

  std::atomic<uint32_t> held_{0};
  std::atomic<uint32_t> busy_{0};
  // Atomic because another thread reads it while the owner changes (a
  // shared cache's Borrow, a test's drainer at a detach).
  std::atomic<const void*> owner_{nullptr};
};

}  // namespace pagefast::policy
