// policy/oom_record.h: the pool's out-of-memory answers: how many (and how
// many requests went to the real driver instead), and the last answer's
// record for the memory report (policy/pool_report.h). A fixed struct,
// written in place under its own lock on the out-of-memory path only:
// recording can never fail or allocate, and the report reads it with
// try_lock (never waits at exit).
//
// Lock: its own, taken last (after the device lock where a caller holds
// that) and never held while taking another.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "policy/large_blocks.h"

namespace pagefast::policy {

struct OomRecord {
  uint64_t count = 0;                   // OOM answers so far; 0: none recorded
  uint64_t request_bytes = 0;           // the program's request; 0: not known yet
  uint64_t needed_bytes = 0;            // what the arena could not give (granules or a slab)
  bool for_slab = false;                // a small request that needed a new slab
  bool request_pending = false;         // needed_bytes noted, request_bytes not yet
  uint64_t limit_bytes = 0;             // the limit then; 0: none
  uint64_t released_bytes = 0;          // idle memory released to the driver first
  uint64_t free_bytes = 0;              // free in the pool after that (its own view)
  uint64_t room_under_limit_bytes = 0;  // growth still allowed by the limit; kUnlimited: none
  bool forwarded = false;               // no limit: the real driver got the request
};

class OomRecorder {
 public:
  OomRecorder() = default;
  OomRecorder(const OomRecorder&) = delete;
  OomRecorder& operator=(const OomRecorder&) = delete;

  void count_passthrough() { passthroughs_.fetch_add(1, std::memory_order_relaxed); }
  // Counts an answer and records the arena's side of it (needed_bytes);
  // the request follows with note_request once the answer is known.
  void note(Granules needed, bool for_slab, const Shortfall& shortfall, bool forwarded);
  // Only after note(): a failure for another reason (host out of memory)
  // leaves the record alone.
  void note_request(uint64_t request_bytes);
  // The request was served after all (a full device's borrow): the last
  // answer is uncounted and the record before it put back.
  void withdraw(bool passthrough);
  // false when the record is being written.
  bool try_read(OomRecord* out);

  uint64_t ooms() const { return ooms_.load(std::memory_order_relaxed); }
  uint64_t passthroughs() const { return passthroughs_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> ooms_{0};
  std::atomic<uint64_t> passthroughs_{0};
  std::mutex mutex_;
  OomRecord last_, previous_;  // previous: put back by withdraw
};

}  // namespace pagefast::policy
