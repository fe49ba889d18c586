// policy/allowance.cpp: the allowance that follows the free rate
// (allowance.h).
#include "policy/allowance.h"

namespace pagefast::policy {

Allowance::Allowance(uint64_t slack_ns, uint64_t min_bytes, uint64_t max_bytes, uint64_t initial_bytes)
    : slack_ns_(slack_ns),
      min_bytes_(min_bytes < max_bytes ? min_bytes : max_bytes),
      max_bytes_(max_bytes),
      bytes_(initial_bytes < min_bytes_  ? min_bytes_
             : initial_bytes > max_bytes ? max_bytes
                                         : initial_bytes) {}

uint64_t Allowance::update(uint64_t now_ns, uint64_t freed_total) {
  if (slack_ns_ == kNoSlack) return bytes_;
  if (!started_) {
    started_ = true;
    last_ns_ = now_ns;
    last_freed_ = freed_total;
    return bytes_;
  }
  if (now_ns - last_ns_ < kAllowanceWindowNs) return bytes_;
  const double dt = double(now_ns - last_ns_);
  // The total never goes down; a reader that raced a thread's exit may
  // see it do so once: that window counts nothing.
  const double instant = freed_total > last_freed_ ? double(freed_total - last_freed_) * 1e9 / dt : 0.0;
  // Exponential smoothing over time (not over samples): a window twice as
  // long weighs twice as much.
  // The first window's rate is taken whole: the least allowance is only
  // for the time until a rate is known.
  const double weight = measured_ ? dt / (dt + double(kAllowanceSmoothingNs)) : 1.0;
  measured_ = true;
  rate_ += (instant - rate_) * weight;
  last_ns_ = now_ns;
  last_freed_ = freed_total;
  const double want = rate_ * double(slack_ns_) / 1e9;
  bytes_ = want <= double(min_bytes_) ? min_bytes_ : want >= double(max_bytes_) ? max_bytes_ : uint64_t(want);
  return bytes_;
}

}  // namespace pagefast::policy
