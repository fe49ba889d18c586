// interpose/pool/pool_capi.cpp: the pool's part of the public C API
// (interpose/pagefast.h): pagefast_pool_stats_get and pagefast_pool_trim.
// The C struct is checked against the policy's stats field table, field by
// field, so the two can never drift apart.
#include <cstddef>

#include "interpose/capi_export.h"
#include "interpose/pagefast.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "policy/pool_stats.h"

namespace {

#define PF_CHECK_FIELD(name, meaning)                                                               \
  static_assert(offsetof(pagefast_pool_stats, name) == offsetof(pagefast::policy::PoolStats, name), \
                "pagefast_pool_stats." #name " is out of step with PoolStats");
PAGEFAST_POOL_STATS_FIELDS(PF_CHECK_FIELD)
#undef PF_CHECK_FIELD
static_assert(sizeof(pagefast_pool_stats) == pagefast::policy::kPoolStatsPublicFields * sizeof(uint64_t),
              "pagefast_pool_stats and PoolStats have different fields");

}  // namespace

PF_EXPORT int pagefast_pool_stats_get(int device, pagefast_pool_stats* out) {
  // Every pool of the device (its own and the regions'), with the budget's
  // counters.
  pagefast::policy::PoolStats s;
  if (!out || !pagefast::pool::stats_of(device, &s)) return -1;
#define PF_COPY_FIELD(name, meaning) out->name = s.name;
  PAGEFAST_POOL_STATS_FIELDS(PF_COPY_FIELD)
#undef PF_COPY_FIELD
  return 0;
}

PF_EXPORT int pagefast_pool_trim(int device) {
  pagefast::pool::own_vmm::trim(device, UINT64_MAX);  // the program's released VMM memory too
  if (!pagefast::pool::pool_for_device(device)) return -1;
  pagefast::pool::DeviceMemory* memory = pagefast::pool::device_memory(device);
  memory->each_pool([](int, pagefast::policy::DevicePool* pool) { pool->trim(); });
  // The host memory sleep keeps page-locked between cycles too.
  if (memory->provider()) memory->provider()->release_host_memory();
  return 0;
}
