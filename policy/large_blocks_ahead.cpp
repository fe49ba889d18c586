// policy/large_blocks_ahead.cpp: LargeBlocks::grow_ahead (large_blocks.h),
// growth ahead's step (policy/grow_ahead.h): the chunk's addresses taken
// under the device lock, its create, map and access made without it (so
// that the program's allocations from the arena never wait for them), and
// the chunk made the arena's under the lock again.
#include "policy/large_blocks.h"

namespace pagefast::policy {

bool LargeBlocks::grow_ahead(Granules step, uint64_t ceiling_bytes) {
  Arena::PendingGrowth growth;
  {
    DeviceLock guard(*this);
    // Never under a limit: a step must not take the pool over it while a
    // growth on demand runs beside it.
    if (budget_.limit_bytes() || arena_.resident().bytes() + step.bytes() > ceiling_bytes) return false;
    if (!arena_.begin_growth(step, &growth)) return false;
  }
  const uint64_t start = clock_.now_ns();
  ChunkHandle handle;
  bool created = false, mapped = false;
  const ProviderStatus status = arena_.create_ahead(growth, &handle, &created, &mapped);
  DeviceLock guard(*this);
  // A growth on demand while this one was made: the ceiling still holds
  // (the driver's unmap and release under the lock, as a release's are).
  if (status != ProviderStatus::Ok || arena_.resident().bytes() + step.bytes() > ceiling_bytes) {
    arena_.abandon_growth(growth, created ? &handle : nullptr, mapped);
    return false;
  }
  const ProviderStatus finished = arena_.finish_growth(growth, handle);
  note_growth(start, finished);
  if (finished != ProviderStatus::Ok) return false;
  ahead_growths_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace pagefast::policy
