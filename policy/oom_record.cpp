// policy/oom_record.cpp: OomRecorder (oom_record.h).
#include "policy/oom_record.h"

namespace pagefast::policy {

void OomRecorder::note(Granules needed, bool for_slab, const Shortfall& shortfall, bool forwarded) {
  ooms_.fetch_add(1, std::memory_order_relaxed);
  // Off the hot path (an out-of-memory answer); the record is written in
  // place, so nothing here can fail.
  std::lock_guard<std::mutex> guard(mutex_);
  previous_ = last_;
  OomRecord& o = last_;
  o.count = ooms_.load(std::memory_order_relaxed);
  o.request_bytes = 0;
  o.needed_bytes = needed.bytes();
  o.for_slab = for_slab;
  o.request_pending = true;
  o.limit_bytes = shortfall.limit_bytes;
  o.released_bytes = shortfall.released_bytes;
  o.free_bytes = shortfall.free_bytes;
  o.room_under_limit_bytes = shortfall.room_under_limit_bytes;
  o.forwarded = forwarded;
}

void OomRecorder::note_request(uint64_t request_bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!last_.request_pending) return;
  last_.request_bytes = request_bytes;
  last_.request_pending = false;
}

void OomRecorder::withdraw(bool passthrough) {
  ooms_.fetch_sub(1, std::memory_order_relaxed);
  if (passthrough) passthroughs_.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard(mutex_);
  last_ = previous_;
}

bool OomRecorder::try_read(OomRecord* out) {
  std::unique_lock<std::mutex> guard(mutex_, std::try_to_lock);
  if (!guard.owns_lock()) return false;
  *out = last_;
  return true;
}

}  // namespace pagefast::policy
