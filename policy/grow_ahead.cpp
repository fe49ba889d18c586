// policy/grow_ahead.cpp: the rule of growth ahead (grow_ahead.h).
#include "policy/grow_ahead.h"

namespace pagefast::policy {

Granules grow_ahead_step(uint64_t peak_in_use_bytes, uint64_t mapped_bytes, uint64_t free_bytes, Granules chunk,
                         int percent) {
  if (percent <= 0 || !peak_in_use_bytes) return Granules(0);
  const uint64_t ceiling = grow_ahead_ceiling(peak_in_use_bytes, percent);
  if (mapped_bytes >= ceiling) return Granules(0);
  Granules step = granules_floor(ceiling - mapped_bytes);
  if (step > chunk) step = chunk;
  if (step < kMinAheadGranules) return Granules(0);
  if (free_bytes >= step.bytes()) return Granules(0);
  return step;
}

}  // namespace pagefast::policy
