// interpose/pool/pool_capi.cpp: what the pool's part of the public C API
// (pagefast_pool_stats_get, pagefast_pool_trim; exported by
// interpose/capi.cpp) calls. The C struct is checked against the
// policy's stats field table, field by field, so the two can never drift
// apart.
#include <cstddef>

#include "interpose/pagefast.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "policy/pool_stats.h"

namespace pagefast::pool {

namespace {

#define PF_CHECK_FIELD(name, meaning)                                                     \
  static_assert(offsetof(pagefast_pool_stats, name) == offsetof(policy::PoolStats, name), \
                "pagefast_pool_stats." #name " is out of step with PoolStats");
PAGEFAST_POOL_STATS_FIELDS(PF_CHECK_FIELD)
#undef PF_CHECK_FIELD
static_assert(sizeof(pagefast_pool_stats) == policy::kPoolStatsPublicFields * sizeof(uint64_t),
              "pagefast_pool_stats and PoolStats have different fields");

}  // namespace

int pool_stats_get(int device, pagefast_pool_stats* out) {
  // Every pool of the device (its own and the regions'), with the budget's
  // counters.
  policy::PoolStats s;
  if (!out || !stats_of(device, &s)) return -1;
#define PF_COPY_FIELD(name, meaning) out->name = s.name;
  PAGEFAST_POOL_STATS_FIELDS(PF_COPY_FIELD)
#undef PF_COPY_FIELD
  return 0;
}

int pool_trim(int device) {
  // Through the device's budget: every pool's idle memory and the program's
  // released VMM memory (the own-VMM cache's share).
  DeviceMemory* memory = device_memory_made(device);
  if (memory) memory->budget().trim();
  // The host memory sleep keeps page-locked between cycles too: the pool's
  // copies' and the program's own VMM memory's (one provider).
  if (VmmProvider* copier = memory ? memory->copy_provider_made() : nullptr) copier->release_host_memory();
  if (!memory || !pool_for_device(device)) return -1;
  return 0;
}

}  // namespace pagefast::pool
