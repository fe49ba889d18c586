// policy/quarantine.h: freed blocks wait here until device work that may
// still use them has finished. cuMemFree synchronises implicitly; the pool
// instead stamps each freed block with a sync ticket and reuses it only
// after a synchronize() that began later has completed, so one sync
// retires a whole batch (0.7 us on an idle H200, docs/DRIVER-FACTS.md, shared by up to
// kQuarantineBatchEntries frees) and no lock is taken to free.
//
// Tickets: `started` counts syncs begun. A free reads it (value k); a sync
// takes ticket t with a read-modify-write of it. If t >= k, that RMW came
// after the free's read in the single order of seq_cst operations, so the
// sync began after the free's caller had submitted its work, and waits for
// it. `retired` is one more than the highest ticket of a finished sync:
// a block stamped k may be reused once k < retired.
#pragma once

#include <atomic>
#include <cstdint>

#include "policy/page_map.h"

namespace pagefast::policy {

class SyncTickets {
 public:
  // The stamp of a block freed now.
  uint64_t stamp() const { return started_.load(std::memory_order_seq_cst); }
  // Called right before synchronize().
  uint64_t begin() { return started_.fetch_add(1, std::memory_order_seq_cst); }
  // Called after synchronize() returned, Done or not, for ticket t.
  void finish(uint64_t ticket, bool done) {
    raise(finished_, ticket + 1);
    if (done) raise(retired_, ticket + 1);
  }
  bool retired(uint64_t stamp) const { return stamp < retired_.load(std::memory_order_acquire); }
  // A sync that covers `stamp` has begun (it may not have finished).
  bool covered_by_running(uint64_t stamp) const { return stamp < started_.load(std::memory_order_seq_cst); }
  // A sync that covers `stamp` has finished, successfully or not.
  bool finished(uint64_t stamp) const { return stamp < finished_.load(std::memory_order_acquire); }

 private:
  static void raise(std::atomic<uint64_t>& value, uint64_t to) {
    uint64_t seen = value.load(std::memory_order_relaxed);
    while (seen < to && !value.compare_exchange_weak(seen, to, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }

  // Each on a line of its own: every free reads `started`, every retire
  // reads `retired`, and syncs of any thread write them.
  alignas(64) std::atomic<uint64_t> started_{0};
  alignas(64) std::atomic<uint64_t> retired_{0};
  std::atomic<uint64_t> finished_{0};
};

struct QuarantineEntry {
  uint64_t addr;
  Span* span;  // the Slab or the Block
  uint64_t stamp;
};

// Entries of one thread, in free order, so stamps never decrease: the
// retired ones are always a prefix, and the last stamp is the batch's.
constexpr int kQuarantineBatchEntries = 64;

struct QuarantineBatch {
  uint32_t count = 0;
  uint64_t bytes = 0;
  QuarantineBatch* list_next = nullptr;
  // The cache that filled it: when its own thread retires it, the blocks
  // go back to that thread's cache first.
  const void* owner = nullptr;
  QuarantineBatch* all_next = nullptr;  // every batch of the pool, for teardown
  QuarantineEntry entries[kQuarantineBatchEntries];

  bool full() const { return count == kQuarantineBatchEntries; }
  uint64_t last_stamp() const { return entries[count - 1].stamp; }
};

}  // namespace pagefast::policy
