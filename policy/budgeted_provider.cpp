// policy/budgeted_provider.cpp: see budgeted_provider.h.
#include "policy/budgeted_provider.h"

namespace pagefast::policy {

ProviderStatus BudgetedProvider::create_chunk(Granules granules, ChunkHandle* chunk) {
  budget_.make_room(self_, granules.bytes());
  ProviderStatus status = inner_.create_chunk(granules, chunk);
  if (status == ProviderStatus::OutOfMemory && budget_.reclaim_for(self_, granules.bytes()) > 0)
    status = inner_.create_chunk(granules, chunk);
  return status;
}

}  // namespace pagefast::policy
