// policy/grow_ahead.cpp: the rule of growth ahead (grow_ahead.h).
#include "policy/grow_ahead.h"

namespace pagefast::policy {

uint64_t grow_ahead_ceiling(uint64_t peak_in_use_bytes, int percent, uint64_t idle_bound_bytes) {
  if (percent <= 0 || !peak_in_use_bytes) return 0;
  uint64_t ceiling = peak_in_use_bytes + peak_in_use_bytes / 100 * uint64_t(percent);
  if (peak_in_use_bytes <= idle_bound_bytes && ceiling > idle_bound_bytes) ceiling = idle_bound_bytes;
  return ceiling;
}

Granules grow_ahead_step(uint64_t ceiling_bytes, uint64_t mapped_bytes, uint64_t free_bytes, Granules chunk,
                         Granules request) {
  if (mapped_bytes >= ceiling_bytes) return Granules(0);
  Granules step = granules_floor(ceiling_bytes - mapped_bytes);
  if (step > chunk) step = chunk;
  if (step < kMinAheadGranules) return Granules(0);
  if (free_bytes >= step.bytes()) return Granules(0);
  if (free_bytes + step.bytes() < request.bytes()) return Granules(0);
  return step;
}

}  // namespace pagefast::policy
