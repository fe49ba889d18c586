// policy/budgeted_provider.cpp: see budgeted_provider.h.
#include "policy/budgeted_provider.h"

namespace pagefast::policy {

ProviderStatus BudgetedProvider::create_chunk(Granules granules, ChunkHandle* chunk) {
  budget_.make_room(self_, granules.bytes());
  if (capped_count_ && budget_.limit_bytes()) {
    uint64_t held = granules.bytes();
    for (int i = 0; i < capped_count_; ++i) held += capped_[i]->held_bytes();
    if (held > budget_.limit_bytes()) return ProviderStatus::OutOfMemory;
  }
  ProviderStatus status = inner_.create_chunk(granules, chunk);
  if (status == ProviderStatus::OutOfMemory && budget_.reclaim_for(self_, granules.bytes()) > 0)
    status = inner_.create_chunk(granules, chunk);
  return status;
}

}  // namespace pagefast::policy
