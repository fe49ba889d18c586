// interpose/thread_records.h: the one registry of per-thread records that
// the hot paths write without a shared lock: the call counters
// (stats.cpp) and the trace rings (trace.cpp).
//
// Each thread takes a record at its first call and keeps it in a
// thread-local pointer; a pthread key's destructor marks it free at thread
// exit, and the next new thread takes it over (a process that starts and
// ends threads all day keeps as many records as it ever ran at once).
// Records are never freed: a reader (the stats at exit, the trace writer)
// walks the list at any time without a lock. Constant-initialised, so it
// works before any constructor has run (a hook reached from another
// library's constructor).
//
// Record needs `std::atomic<bool> owned` and `Record* next`.
#pragma once

#include <atomic>

namespace pagefast {

template <typename Record>
class ThreadRecords {
 public:
  constexpr ThreadRecords() = default;

  // A free record, else a new one from make() (NULL: out of memory; the
  // caller falls back). The caller (re)initialises what its record needs.
  template <typename Make>
  Record* acquire(Make make) {
    for (Record* r = head_.load(std::memory_order_acquire); r; r = r->next) {
      bool expected = false;
      if (!r->owned.load(std::memory_order_relaxed) &&
          r->owned.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
        return r;
    }
    // Once per thread, never on the steady-state path.
    Record* r = make();
    if (!r) return nullptr;
    r->owned.store(true, std::memory_order_relaxed);
    Record* head = head_.load(std::memory_order_relaxed);
    do {
      r->next = head;
    } while (!head_.compare_exchange_weak(head, r, std::memory_order_release, std::memory_order_relaxed));
    return r;
  }

  // For a pthread key's destructor: the thread is gone.
  static void release(void* record) { static_cast<Record*>(record)->owned.store(false, std::memory_order_release); }

  // Every record ever made, owned or not.
  Record* first() const { return head_.load(std::memory_order_acquire); }

 private:
  std::atomic<Record*> head_{nullptr};
};

}  // namespace pagefast
